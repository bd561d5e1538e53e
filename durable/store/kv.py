"""The caller KV namespace: opaque byte keys under the `USER` tag of a store.

A `KvNamespace` reads and writes caller keys in the same state as the queue,
so KV changes can commit in one transaction with queue transitions. Every
caller key ``k`` is stored as ``user_key(k)``; it can never collide with an
internal key, even one with the same bytes.

Guarantees (the spec's section 1.20):

- `KvNamespace.get` and `KvNamespace.scan` read the in-memory state: they
  see every commit already applied, including ones not yet durable.
- `put`, `delete`, and `compare_put` / `compare_delete` when they return
  True, return only once their commit (and every earlier one) is durable.
  A compare that does not match writes nothing and does not wait, so it
  answers even while the store cannot be written.
- A read-modify-write (read, compare, build the batch, commit) runs without
  an ``await`` inside, so it is atomic on the one event loop: concurrent
  compare-and-set loops lose no update and need no retry.
- Values over `MAX_KV_VALUE_SIZE` raise `KvValueTooLarge` before anything
  is written. Keys and values must be `bytes` (a `TypeError` otherwise).
- Keys under a *reserved prefix* (given at construction, used by the layers
  of durable for their own records) cannot be written through the namespace:
  `ReservedKey`. Reading them is allowed. `KvNamespace.internal` returns a
  view without the check, for those layers.
- Over a `LogReader` the namespace is read-only: every write raises
  `ReadOnlyStore`. `KvNamespace.watch` works there too, fired by the
  reader's refreshes.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from durable.errors import ConflictingKvEffect, ReadOnlyStore, ReservedKey
from durable.store.keyspace import USER, check_kv_value, user_key
from durable.store.log.batch import WriteBatch
from durable.store.log.reader import LogReader
from durable.store.log.state import State, prefix_end
from durable.store.log.writer import Durable, LogWriter

if TYPE_CHECKING:
    from durable.store.expiry import ExpiryIndex

__all__ = ["KvEffects", "KvNamespace", "KvPage"]

#: Page size of `KvNamespace.entries` when none is given.
DEFAULT_PAGE_SIZE = 256


def _check_bytes(value: object, what: str) -> bytes:
    if isinstance(value, bytes):
        return value
    hint = " (encode it, e.g. with .encode())" if isinstance(value, str) else ""
    raise TypeError(f"KV {what} must be bytes, not {type(value).__name__}{hint}")


def _check_optional_bytes(value: object, what: str) -> bytes | None:
    return None if value is None else _check_bytes(value, what)


@dataclass(frozen=True, slots=True)
class KvPage:
    """One page of a `KvNamespace.scan`.

    ``entries`` are ``(caller key, value)`` pairs in scan order; ``more`` is
    True when the range holds at least one further entry after the page.
    """

    entries: list[tuple[bytes, bytes]]
    more: bool

    @property
    def last_key(self) -> bytes | None:
        """The key of the page's last entry (where to continue), or None."""
        return self.entries[-1][0] if self.entries else None


class KvEffects:
    """KV puts and deletes to commit together with something else.

    Used by `ExpiryIndex` actions, and anywhere a layer stages caller-KV
    changes into another transaction (`KvNamespace.stage_effects`). Keys and
    values are checked when added: a key both put and deleted raises
    `ConflictingKvEffect`, a value over the limit `KvValueTooLarge`. The
    reserved-prefix check happens when the effects are staged, against the
    namespace they are staged through.
    """

    __slots__ = ("_deletes", "_puts")

    def __init__(self) -> None:
        self._puts: dict[bytes, bytes] = {}
        self._deletes: dict[bytes, None] = {}  # an ordered set

    def put(self, key: bytes, value: bytes) -> KvEffects:
        """Set ``key`` to ``value`` (a later put of the same key wins)."""
        key = _check_bytes(key, "key")
        value = _check_bytes(value, "value")
        check_kv_value(key, value)
        if key in self._deletes:
            raise ConflictingKvEffect(key)
        self._puts[key] = value
        return self

    def delete(self, key: bytes) -> KvEffects:
        """Remove ``key`` (an absent key is fine)."""
        key = _check_bytes(key, "key")
        if key in self._puts:
            raise ConflictingKvEffect(key)
        self._deletes[key] = None
        return self

    def expiry_entry(self, index: ExpiryIndex, at_ms: int, suffix: bytes = b"") -> KvEffects:
        """Add an entry to ``index`` at ``at_ms`` (see `ExpiryIndex.entry_key`)."""
        return self.put(index.entry_key(at_ms, suffix), b"")

    @property
    def puts(self) -> dict[bytes, bytes]:
        """A copy of the staged puts, ``key -> value``."""
        return dict(self._puts)

    @property
    def deletes(self) -> list[bytes]:
        """The staged deletes, in the order they were added."""
        return list(self._deletes)

    def __len__(self) -> int:
        return len(self._puts) + len(self._deletes)

    def __bool__(self) -> bool:
        return bool(self._puts) or bool(self._deletes)

    def __repr__(self) -> str:
        return f"KvEffects(puts={len(self._puts)}, deletes={len(self._deletes)})"


class KvNamespace:
    """The caller KV namespace of one store; see the module docstring.

    ``source`` is the store's `LogWriter` (read-write) or a `LogReader`
    (read-only). ``reserved_prefixes`` are caller-key prefixes that only
    `internal` views may write.
    """

    __slots__ = ("_check_reserved", "_reserved", "_source", "_writer")

    def __init__(
        self,
        source: LogWriter | LogReader,
        *,
        reserved_prefixes: Iterable[bytes] = (),
    ) -> None:
        reserved = tuple(_check_bytes(p, "reserved prefix") for p in reserved_prefixes)
        if b"" in reserved:
            raise ValueError("an empty reserved prefix would reserve every KV key")
        self._source = source
        self._writer = source if isinstance(source, LogWriter) else None
        self._reserved = reserved
        self._check_reserved = True

    # ------------------------------------------------------------ properties

    @property
    def url(self) -> str:
        """The store's location."""
        return self._source.url

    @property
    def reserved_prefixes(self) -> tuple[bytes, ...]:
        """The prefixes callers may not write under."""
        return self._reserved

    @property
    def read_only(self) -> bool:
        """True over a `LogReader`: every write raises `ReadOnlyStore`."""
        return self._writer is None

    @property
    def is_internal(self) -> bool:
        """True for a view made by `internal` (no reserved-prefix check)."""
        return not self._check_reserved

    def internal(self) -> KvNamespace:
        """A view of the same namespace that may write under reserved prefixes.

        For the layers of durable that own those prefixes; never hand it to
        application code.
        """
        view = KvNamespace(self._source, reserved_prefixes=self._reserved)
        view._check_reserved = False
        return view

    def __repr__(self) -> str:
        mode = "read-only" if self.read_only else "internal" if self.is_internal else "caller"
        return f"KvNamespace({self._source.url!r}, {mode}, reserved={list(self._reserved)!r})"

    # ----------------------------------------------------------------- reads

    @property
    def _state(self) -> State:
        # Read through the source each time: a reader's refresh may replace it.
        return self._source.state

    def get(self, key: bytes) -> bytes | None:
        """The value of ``key``, or None."""
        return self._state.get(user_key(_check_bytes(key, "key")))

    def count(self, prefix: bytes) -> int:
        """How many keys start with ``prefix``, without reading them (O(log n))."""
        return self._state.count(user_key(_check_bytes(prefix, "prefix")))

    def scan(
        self,
        prefix: bytes,
        start: bytes | None = None,
        end: bytes | None = None,
        *,
        inclusive: tuple[bool, bool] = (True, False),
        reverse: bool = False,
        limit: int,
    ) -> KvPage:
        """Up to ``limit`` entries under ``prefix`` between ``start`` and ``end``.

        ``start`` and ``end`` are caller keys; ``inclusive`` says whether each
        bound is included (default: ``start <= key < end``, like `range`).
        Bounds outside the prefix are clamped to it; an empty range, or
        ``limit`` 0, gives an empty page. Ascending by default; with
        ``reverse=True`` descending from ``end``.

        To continue after a page, scan again with ``start=page.last_key`` and
        ``inclusive=(False, ...)`` (descending: ``end=page.last_key`` and
        ``inclusive=(..., False)``), or use `entries`.
        """
        prefix = _check_bytes(prefix, "prefix")
        start = _check_optional_bytes(start, "start")
        end = _check_optional_bytes(end, "end")
        if limit < 0:
            raise ValueError(f"scan limit must be >= 0, got {limit}")
        if limit == 0:
            return KvPage([], False)
        lo, lo_inc = user_key(prefix), True
        if start is not None and start >= prefix:
            lo, lo_inc = user_key(start), inclusive[0]
        hi, hi_inc = prefix_end(user_key(prefix)), False
        if end is not None:
            pend = prefix_end(prefix)
            if pend is None or end < pend:
                hi, hi_inc = user_key(end), inclusive[1]
        if hi is not None and (lo > hi or (lo == hi and not (lo_inc and hi_inc))):
            return KvPage([], False)
        rows = list(
            itertools.islice(
                self._state.scan(lo, hi, inclusive=(lo_inc, hi_inc), reverse=reverse),
                limit + 1,
            )
        )
        more = len(rows) > limit
        return KvPage([(k[len(USER) :], v) for k, v in rows[:limit]], more)

    def snapshot(self, prefix: bytes) -> list[tuple[bytes, bytes]]:
        """Every entry under ``prefix``, ascending, read at once: one consistent
        view of the memory state (no commit lands in between). For bounded
        prefixes (one run's keys); stream large ranges with `entries`."""
        prefix = _check_bytes(prefix, "prefix")
        return [
            (k[len(USER) :], v)
            for k, v in self._state.scan(
                user_key(prefix),
                prefix_end(user_key(prefix)),
                inclusive=(True, False),
                reverse=False,
            )
        ]

    async def entries(
        self,
        prefix: bytes,
        start: bytes | None = None,
        end: bytes | None = None,
        *,
        inclusive: tuple[bool, bool] = (True, False),
        reverse: bool = False,
        page_size: int = DEFAULT_PAGE_SIZE,
    ) -> AsyncIterator[list[tuple[bytes, bytes]]]:
        """Every entry of the range, as a lazy stream of non-empty pages.

        Each page is read at once (consistent within itself); the next page
        continues after the last key yielded, so writes between pages are
        seen if they land ahead of the cursor. Yields to the event loop
        between pages.
        """
        if page_size < 1:
            raise ValueError(f"page_size must be >= 1, got {page_size}")
        lo_inc, hi_inc = inclusive
        while True:
            page = self.scan(
                prefix, start, end, inclusive=(lo_inc, hi_inc), reverse=reverse, limit=page_size
            )
            if page.entries:
                yield page.entries
            if not page.more:
                return
            if reverse:
                end, hi_inc = page.last_key, False
            else:
                start, lo_inc = page.last_key, False
            await asyncio.sleep(0)

    # ------------------------------------------------------------- watching

    def watch(self, key: bytes) -> asyncio.Future[None]:
        """A future resolved once a commit that puts or deletes ``key`` is durable.

        Registration is synchronous: read ``key``, then `watch` it with no
        ``await`` in between, and no write can slip through unseen. The
        future fails with the writer's error if that commit never becomes
        durable, or when the store closes. Call `unwatch` when you stop
        waiting. Over a `LogReader` the future resolves when a refresh
        applies such a commit (or a checkpoint reload changes ``key``), and
        fails with `StoreClosed` when the reader closes.
        """
        return self._source.watchers.watch(user_key(_check_bytes(key, "key")))

    def unwatch(self, key: bytes, fut: asyncio.Future[None]) -> None:
        """Withdraw a `watch` (a no-op once it fired)."""
        self._source.watchers.unwatch(user_key(_check_bytes(key, "key")), fut)

    # ---------------------------------------------------------------- writes

    async def put(self, key: bytes, value: bytes) -> None:
        """Set ``key`` to ``value``; durable when this returns."""
        writer = self._require_writer("put a KV key")
        await writer.commit(self.stage_put(WriteBatch(), key, value))

    async def delete(self, key: bytes) -> None:
        """Remove ``key`` (absent is fine); durable when this returns."""
        writer = self._require_writer("delete a KV key")
        await writer.commit(self.stage_delete(WriteBatch(), key))

    async def compare_delete(self, key: bytes, expected: bytes) -> bool:
        """Remove ``key`` only if its value is ``expected``.

        True once the delete is durable; False (nothing written) otherwise.
        """
        writer = self._require_writer("delete a KV key")
        expected = _check_bytes(expected, "expected value")
        batch = self.stage_delete(WriteBatch(), key)
        if self._state.get(user_key(key)) != expected:
            return False
        await writer.commit(batch)
        return True

    async def compare_put(self, key: bytes, expected: bytes | None, value: bytes) -> bool:
        """Set ``key`` to ``value`` only if its value is ``expected`` (None: absent).

        True once the put is durable; False (nothing written, no wait)
        otherwise.
        """
        writer = self._require_writer("put a KV key")
        expected = _check_optional_bytes(expected, "expected value")
        batch = self.stage_put(WriteBatch(), key, value)
        if self._state.get(user_key(key)) != expected:
            return False
        await writer.commit(batch)
        return True

    # ------------------------------------------- staging, for durable's layers

    def matches(self, key: bytes, expected: bytes | None) -> bool:
        """Whether ``key`` currently holds ``expected`` (None: is absent)."""
        expected = _check_optional_bytes(expected, "expected value")
        return self.get(key) == expected

    def stage_put(self, batch: WriteBatch, key: bytes, value: bytes) -> WriteBatch:
        """Check ``key`` and ``value`` and add their put to ``batch``."""
        key = self._check_writable_key(key)
        value = _check_bytes(value, "value")
        check_kv_value(key, value)
        return batch.put(user_key(key), value)

    def stage_delete(self, batch: WriteBatch, key: bytes) -> WriteBatch:
        """Check ``key`` and add its delete to ``batch``."""
        return batch.delete(user_key(self._check_writable_key(key)))

    def stage_effects(self, batch: WriteBatch, effects: KvEffects) -> WriteBatch:
        """Add every put, then every delete, of ``effects`` to ``batch``.

        Every key is checked first, so a rejected key leaves ``batch`` as it was.
        """
        puts, deletes = effects.puts, effects.deletes
        for key in itertools.chain(puts, deletes):
            self._check_writable_key(key)
        for key, value in puts.items():
            batch.put(user_key(key), value)
        for key in deletes:
            batch.delete(user_key(key))
        return batch

    def commit(
        self, batch: WriteBatch, *, lazy: bool = False, within: float | None = None
    ) -> Durable:
        """Commit ``batch`` now; the result resolves once it is durable.

        ``lazy`` and ``within``: see `LogWriter.commit` (a lazy commit rides
        the next flush, or starts one after ``within`` seconds). `ReadOnlyStore`
        over a reader; the writer's failure if it has stopped.
        """
        return self._require_writer("commit").commit(batch, lazy=lazy, within=within)

    def flush_within(self, seconds: float) -> None:
        """Have the commits made so far start their flush within ``seconds``
        (0: now) without waiting for it (`LogWriter.flush_within`);
        `ReadOnlyStore` over a reader."""
        self._require_writer("flush").flush_within(seconds)

    def flush_inline(self, durable: Durable) -> bool:
        """`LogWriter.flush_inline`: flush ``durable``'s group now, on this
        thread, if it can be; False over a reader or when it cannot."""
        writer = self._writer
        return writer is not None and writer.flush_inline(durable)

    def check_writable(self) -> None:
        """Raise what a `commit` made now would raise before applying
        anything (`LogWriter.check`): `ReadOnlyStore` over a reader, the
        writer's failure once it has stopped, `SelfFenced` while its
        validity check gives a reason. Cheap and in memory."""
        self._require_writer("commit").check()

    def _require_writer(self, operation: str) -> LogWriter:
        if self._writer is None:
            raise ReadOnlyStore(self._source.url, operation)
        return self._writer

    def _check_writable_key(self, key: bytes) -> bytes:
        key = _check_bytes(key, "key")
        if self._check_reserved:
            for prefix in self._reserved:
                if key.startswith(prefix):
                    raise ReservedKey(key, prefix)
        return key
