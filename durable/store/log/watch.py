"""Waiting for a key to be written: `KeyWatchers`.

A watcher registers a key and gets a future. On a writer, a commit that
puts or deletes that key resolves the future once it is *durable* (with the
writer's failure, should the commit never become durable). On a read-only
reader, the refresh that applies a log object writing the key (or a
checkpoint reload that changes it) resolves it at once: what a reader
applies is durable already. Registering is synchronous, so a caller that
reads the state and then registers, with no ``await`` in between, cannot
miss a write. Once the writer has stopped (fenced, failed or closed), or the
reader has closed, every watcher fails with its error, and so does every
watch registered later, at once.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from durable.store.log.writer import Durable

__all__ = ["KeyWatchers"]


class KeyWatchers:
    """Futures keyed by store key, resolved by the durable commit that writes the key."""

    __slots__ = ("_by_key", "_stopped", "on_watch")

    def __init__(self) -> None:
        self._by_key: dict[bytes, list[asyncio.Future[None]]] = {}
        self._stopped: BaseException | None = None
        #: Called (no arguments) whenever a watch is registered: a reader's
        #: follower polls at its busy pace once someone waits (`Follower.wake`).
        self.on_watch: Callable[[], object] | None = None

    def __bool__(self) -> bool:
        return bool(self._by_key)

    def watch(self, key: bytes) -> asyncio.Future[None]:
        """A future resolved once a commit writing ``key`` is durable (failed
        at once if the writer has stopped)."""
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        if self._stopped is not None:
            fut.set_exception(self._stopped)
            return fut
        self._by_key.setdefault(key, []).append(fut)
        if self.on_watch is not None:
            self.on_watch()
        return fut

    def unwatch(self, key: bytes, fut: asyncio.Future[None]) -> None:
        """Withdraw ``fut`` (a no-op once it fired)."""
        futs = self._by_key.get(key)
        if futs is None:
            return
        with contextlib.suppress(ValueError):
            futs.remove(fut)
        if not futs:
            del self._by_key[key]

    def committed(self, ops: Sequence[bytes | None], durable: Durable) -> None:
        """A commit of ``ops`` (key, value pairs) was applied; fire its keys'
        watchers once ``durable``."""
        hits: list[asyncio.Future[None]] = []
        for i in range(0, len(ops), 2):
            key = ops[i]
            assert key is not None
            futs = self._by_key.pop(key, None)
            if futs:
                hits.extend(futs)
        if hits:
            durable.add_done_callback(lambda: _resolve(hits, durable))

    def applied(self, ops: Sequence[bytes | None]) -> None:
        """Durable ``ops`` (key, value pairs) were applied: fire their keys' watchers now."""
        if self._by_key:
            self.written(ops[0::2])  # type: ignore[arg-type]  # keys are never None

    def written(self, keys: Iterable[bytes]) -> None:
        """``keys`` changed durably: fire their watchers now."""
        for key in keys:
            futs = self._by_key.pop(key, None)
            if futs:
                for fut in futs:
                    if not fut.done():
                        fut.set_result(None)

    def watched(self) -> list[bytes]:
        """The keys someone watches now."""
        return list(self._by_key)

    def fail_all(self, error: BaseException) -> None:
        """Fail every watcher (the store is closing)."""
        for futs in self._by_key.values():
            for fut in futs:
                if not fut.done():
                    fut.set_exception(error)
        self._by_key.clear()

    def stop(self, error: BaseException) -> None:
        """Fail every watcher, and every later one at once: the writer stopped."""
        self._stopped = error
        self.fail_all(error)


def _resolve(futs: list[asyncio.Future[None]], durable: Durable) -> None:
    error = durable.error()
    for fut in futs:
        if fut.done():
            continue
        if error is None:
            fut.set_result(None)
        else:
            fut.set_exception(error)
