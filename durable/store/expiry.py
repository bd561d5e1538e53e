"""`ExpiryIndex`: a time-ordered index over one caller-KV prefix, for retention.

An entry is the KV key ``prefix + at_ms (8 bytes, big-endian) + suffix``
with an empty value; keys sort by time, so a sweep reads the oldest entries
first and stops at the first one that is not yet due. The ``suffix`` names
what the entry is about (a run id, say).

`ExpiryIndex.sweep` (the spec's ``pass``) removes due entries: an entry is
due when ``at_ms + retention <= now_ms``. For each due entry it calls a
callback, which returns what to do:

- `Delete` ``(effects)``: commit the effects and the entry's delete together;
- `DeleteIf` ``(key, expected, effects)``: the same when KV ``key`` holds
  ``expected`` at commit time (None: is absent), else delete the entry alone;
- `Keep`: leave the entry (later sweeps offer it again).

Effects are decoupled from the queue: either a `KvEffects` (caller-KV puts
and deletes, checked against the namespace's reserved prefixes) or a plain
callable that stages anything into the sweep's `WriteBatch` (how a layer
that owns other key spaces adds its own writes).

The in-memory *bound* is the lowest ``at_ms`` that may still be in the
index. A sweep whose bound is not due returns 0 without reading; otherwise
it scans from the bound. `ExpiryIndex.entry_key` lowers the bound, so build
an entry's key in the same synchronous section as the commit that writes it.
Entries written otherwise (by another process, before a restart) are found
because a new index starts with an unknown bound and scans the whole prefix.

A key under the prefix without a full 8-byte time is deleted without a
callback. Sweep deletions are not awaited (a lost delete is redone by the
next sweep, since the entry is still there); await the writer's ``flush``
if they must be durable. An error from the callback or the store ends the
sweep with that error, and the bound stays at the entry being handled, so
the next sweep reads it again; so does a cancelled sweep.
"""

from __future__ import annotations

import asyncio
import inspect
import struct
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import NamedTuple, TypeAlias

from durable._logging import get_logger
from durable.errors import ReadOnlyStore
from durable.store.kv import KvEffects, KvNamespace, _check_bytes
from durable.store.log.batch import WriteBatch

__all__ = [
    "Delete",
    "DeleteIf",
    "ExpiryAction",
    "ExpiryCallback",
    "ExpiryEntry",
    "ExpiryIndex",
    "Keep",
    "Stager",
]

log = get_logger("durable.store.expiry")

_TIME = struct.Struct(">Q")
_TIME_SIZE = _TIME.size
_MAX_AT_MS = (1 << 64) - 1
#: The bound of an index known to be empty: never due.
_EMPTY = 1 << 64

#: Stages arbitrary writes into the sweep's batch (state keys, not caller keys).
Stager: TypeAlias = Callable[[WriteBatch], None]


@dataclass(frozen=True, slots=True)
class Delete:
    """Remove the entry, committing ``effects`` in the same transaction."""

    effects: KvEffects | Stager | None = None


@dataclass(frozen=True, slots=True)
class DeleteIf:
    """Like `Delete` when KV ``key`` holds ``expected`` (None: absent) at commit.

    Otherwise remove the entry alone and drop ``effects``.
    """

    key: bytes
    expected: bytes | None
    effects: KvEffects | Stager | None = None


@dataclass(frozen=True, slots=True)
class Keep:
    """Leave the entry in place; it holds the bound, so the next sweep offers it again."""


ExpiryAction: TypeAlias = Delete | DeleteIf | Keep


class ExpiryEntry(NamedTuple):
    """A due entry, as given to a sweep callback."""

    #: The entry's caller-KV key.
    key: bytes
    #: Its time, in milliseconds since the epoch.
    at_ms: int
    #: Whatever followed the time in the key.
    suffix: bytes


#: A sweep callback: plain or async, returns what to do with the entry.
ExpiryCallback: TypeAlias = Callable[[ExpiryEntry], "ExpiryAction | Awaitable[ExpiryAction]"]


class ExpiryIndex:
    """An expiry index over the caller-KV ``prefix`` of ``kv``; see the module docstring.

    ``kv`` must be writable for `sweep` and `add`, and allowed to write
    under ``prefix`` (pass `KvNamespace.internal` for a reserved prefix).
    ``page_size`` is how many keys a sweep reads at a time.
    """

    def __init__(self, kv: KvNamespace, prefix: bytes, *, page_size: int = 256) -> None:
        self._prefix = _check_bytes(prefix, "expiry index prefix")
        if page_size < 1:
            raise ValueError(f"page_size must be >= 1, got {page_size}")
        kv.stage_delete(WriteBatch(), self._prefix)  # ReservedKey now, not mid-sweep
        self._kv = kv
        self._page_size = page_size
        self._bound: int | None = None  # None: unknown, scan the whole prefix
        self._lowered: int | None = None  # lowest entry_key time during a sweep
        self._sweeping = False
        self._lock = asyncio.Lock()

    @property
    def prefix(self) -> bytes:
        """The caller-KV prefix the index lives under."""
        return self._prefix

    def __repr__(self) -> str:
        return f"ExpiryIndex(prefix={self._prefix!r})"

    # ------------------------------------------------------------------ keys

    def entry_key(self, at_ms: int, suffix: bytes = b"") -> bytes:
        """The caller-KV key of the entry (``at_ms``, ``suffix``); lowers the bound.

        Write it with an empty value, in the same synchronous section that
        called this (e.g. ``KvEffects.expiry_entry``, or `add`).
        """
        if isinstance(at_ms, bool) or not isinstance(at_ms, int):
            raise TypeError(f"at_ms must be an int, not {type(at_ms).__name__}")
        if not 0 <= at_ms <= _MAX_AT_MS:
            raise ValueError(f"at_ms must be in 0..2**64-1, got {at_ms}")
        suffix = _check_bytes(suffix, "expiry entry suffix")
        if self._bound is not None:
            self._bound = min(self._bound, at_ms)
        if self._sweeping:
            self._lowered = at_ms if self._lowered is None else min(self._lowered, at_ms)
        return self._prefix + _TIME.pack(at_ms) + suffix

    def parse(self, key: bytes) -> tuple[int, bytes] | None:
        """``(at_ms, suffix)`` of an entry key; None outside the prefix or without a time."""
        if not key.startswith(self._prefix) or len(key) < len(self._prefix) + _TIME_SIZE:
            return None
        (at_ms,) = _TIME.unpack_from(key, len(self._prefix))
        return at_ms, key[len(self._prefix) + _TIME_SIZE :]

    async def add(self, at_ms: int, suffix: bytes = b"") -> bytes:
        """Write the entry (``at_ms``, ``suffix``), durably; return its key."""
        key = self.entry_key(at_ms, suffix)
        await self._kv.put(key, b"")
        return key

    # ----------------------------------------------------------------- sweep

    async def sweep(self, now_ms: int, retention: float, callback: ExpiryCallback) -> int:
        """Remove the entries due at ``now_ms`` (``at_ms + retention <= now_ms``).

        ``retention`` is in seconds. The callback is called once per due
        entry, oldest first, and may be async. Returns how many entries a
        `Delete` or `DeleteIf` removed (malformed keys are removed too, but
        not counted). Sweeps of one index run one at a time.
        """
        if retention < 0:
            raise ValueError(f"retention must be >= 0 seconds, got {retention}")
        retention_ms = round(retention * 1000)
        async with self._lock:
            bound = self._bound
            if bound is not None and bound + retention_ms > now_ms:
                return 0
            if self._kv.read_only:
                raise ReadOnlyStore(self._kv.url, "sweep an expiry index")
            self._sweeping, self._lowered = True, None
            removed = 0
            remaining: int | None = None  # first entry left in place (kept or not due)
            current = bound  # where unprocessed entries start, should the sweep fail
            finished = False
            try:
                start = self._prefix if bound is None else self._prefix + _TIME.pack(bound)
                start_inclusive = True
                while not finished:
                    page = self._kv.scan(
                        self._prefix,
                        start,
                        inclusive=(start_inclusive, False),
                        limit=self._page_size,
                    )
                    for key, _ in page.entries:
                        parsed = self.parse(key)
                        if parsed is None:
                            log.warning("malformed expiry entry deleted", key=key)
                            self._kv.commit(self._kv.stage_delete(WriteBatch(), key))
                            continue
                        at_ms, suffix = parsed
                        current = at_ms
                        if at_ms + retention_ms > now_ms:
                            remaining = at_ms if remaining is None else remaining
                            finished = True
                            break
                        action = callback(ExpiryEntry(key, at_ms, suffix))
                        if inspect.isawaitable(action):
                            action = await action
                        if isinstance(action, Keep):
                            remaining = at_ms if remaining is None else remaining
                        else:
                            self._apply(key, action)
                            removed += 1
                    else:
                        if page.more:
                            start, start_inclusive = page.entries[-1][0], False
                        else:
                            finished = True
                return removed
            finally:
                self._bound = self._next_bound(finished, remaining, current)
                self._sweeping, self._lowered = False, None

    def _next_bound(self, finished: bool, remaining: int | None, current: int | None) -> int | None:
        """The bound after a sweep: where the first entry it left in place is."""
        if finished:
            new: int | None = _EMPTY if remaining is None else remaining
        elif current is None:
            new = None  # failed before reaching an entry of an unknown index
        else:
            new = current if remaining is None else min(remaining, current)
        if new is not None and self._lowered is not None:
            new = min(new, self._lowered)
        return new

    def _apply(self, key: bytes, action: object) -> None:
        """Commit the entry's delete with the action's effects (not awaited)."""
        if isinstance(action, DeleteIf):
            effects = action.effects if self._kv.matches(action.key, action.expected) else None
        elif isinstance(action, Delete):
            effects = action.effects
        else:
            raise TypeError(
                f"an expiry callback must return Delete, DeleteIf or Keep, not {action!r}"
            )
        batch = self._kv.stage_delete(WriteBatch(), key)
        if isinstance(effects, KvEffects):
            self._kv.stage_effects(batch, effects)
        elif effects is not None:
            effects(batch)
        self._kv.commit(batch)
