"""`FaultyObjectStore`: a wrapper that adds latency, failures and crashes.

For tests and benchmarks. It delegates to an inner store and can:

- wait a fixed ``latency`` before every call (concurrent calls overlap, as
  on a network);
- fail the next calls of one operation (`FaultyObjectStore.fail_next`), or
  make them time out before or after the inner call took effect
  (`FaultyObjectStore.timeout_next`), optionally after letting ``skip``
  calls of it through (to hit the N-th call of a sequence);
- crash: after N more successful writes, every call raises `SimulatedCrash`
  (`FaultyObjectStore.crash_after_writes`), as if the process had died;
- count calls per operation and bytes written.

`try_lock` and `claim_log` are the inner store's; a crash releases every
lock (and log claim) taken through the wrapper, as the kernel does for a
process that dies. `is_local` is the inner store's while no latency is
injected (with latency the store behaves as a remote one).

Scripted faults of one operation fire in the order they were scripted.
"""

from __future__ import annotations

import asyncio
import collections
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import TypeVar

from durable.errors import ObjectStoreError, ObjectStoreTimeout
from durable.store.objects.base import ObjectLock, ObjectStore

__all__ = ["FaultyObjectStore", "SimulatedCrash"]

_T = TypeVar("_T")
_OPS = ("get", "put", "create", "list", "delete")
_WRITES = frozenset({"put", "create", "delete"})


class SimulatedCrash(BaseException):
    """The process "died": raised by every call of a crashed `FaultyObjectStore`.

    A `BaseException`, like `KeyboardInterrupt`, so that ``except Exception``
    in the code under test does not swallow it.
    """


@dataclass
class _Fault:
    timeout: bool  # raise ObjectStoreTimeout; else raise ``exc`` without delegating
    after: bool = False  # a timeout after the inner call took effect
    exc: BaseException | None = None  # None: a default ObjectStoreError
    passthrough: bool = False  # no fault: this call goes through (``skip``)


class FaultyObjectStore(ObjectStore):
    """Wraps ``inner``, adding ``latency`` seconds per call and scripted faults.

    ``clock_sleep`` replaces `asyncio.sleep` for the latency, e.g.
    ``MockClock().sleep``. `guarantees` and `url` are the inner store's;
    `close` closes the inner store (and does nothing once crashed).
    """

    def __init__(
        self,
        inner: ObjectStore,
        *,
        latency: float = 0.0,
        clock_sleep: Callable[[float], Awaitable[None]] | None = None,
    ) -> None:
        self.inner = inner
        #: Seconds to wait before every call; may be changed at any time.
        self.latency = latency
        self.guarantees = inner.guarantees
        #: Calls per operation, failed ones included (not those after a crash).
        self.calls: collections.Counter[str] = collections.Counter()
        #: Bytes passed to successful `put` and `create` calls.
        self.bytes_written = 0
        self._sleep = clock_sleep or asyncio.sleep
        self._faults: dict[str, collections.deque[_Fault]] = {
            op: collections.deque() for op in _OPS
        }
        self._writes_left: int | None = None
        self._crashed = False
        self._locks: list[ObjectLock] = []

    # ------------------------------------------------------------ scripting

    def fail_next(
        self, op: str, exc: BaseException | None = None, count: int = 1, *, skip: int = 0
    ) -> None:
        """Make the next ``count`` calls of ``op`` raise ``exc`` without delegating.

        The default ``exc`` is a transient `ObjectStoreError`. With ``skip``,
        that many calls of ``op`` go through first.
        """
        queue = self._skip(op, skip)
        for _ in range(count):
            queue.append(_Fault(timeout=False, exc=exc))

    def timeout_next(self, op: str, after: bool = True, *, skip: int = 0) -> None:
        """Make the next call of ``op`` raise `ObjectStoreTimeout`.

        With ``after=True`` the inner call runs first (a write lands, but the
        caller does not learn it); with ``after=False`` nothing happens. With
        ``skip``, that many calls of ``op`` go through first.
        """
        self._skip(op, skip).append(_Fault(timeout=True, after=after))

    def crash_after_writes(self, n: int) -> None:
        """Crash once ``n`` more writes (put, create, delete) have succeeded.

        The ``n``-th write returns normally; every call after it, and every
        call still waiting in its latency, raises `SimulatedCrash`. ``n=0``
        crashes at once. As in a real crash, writes already handed to the
        inner store when it happens may still land, though their callers get
        `SimulatedCrash`; run writes one at a time for exact crash points.
        """
        if n < 0:
            raise ValueError(f"crash_after_writes needs n >= 0, got {n}")
        self._writes_left = n
        self._crashed = False
        if n == 0:
            self._crash()

    @property
    def crashed(self) -> bool:
        """Whether the simulated process has died."""
        return self._crashed

    def _queue(self, op: str) -> collections.deque[_Fault]:
        if op not in self._faults:
            raise ValueError(f"unknown operation {op!r}; expected one of {', '.join(_OPS)}")
        return self._faults[op]

    def _skip(self, op: str, skip: int) -> collections.deque[_Fault]:
        if isinstance(skip, bool) or not isinstance(skip, int) or skip < 0:
            raise ValueError(f"skip needs an int >= 0, got {skip!r}")
        queue = self._queue(op)
        queue.extend(_Fault(timeout=False, passthrough=True) for _ in range(skip))
        return queue

    # ------------------------------------------------------------ machinery

    async def _call(self, op: str, name: str, size: int, call: Callable[[], Awaitable[_T]]) -> _T:
        self._check_alive()
        self.calls[op] += 1
        if self.latency > 0:
            await self._sleep(self.latency)
            self._check_alive()
        fault = self._faults[op].popleft() if self._faults[op] else None
        if fault is not None and fault.passthrough:
            fault = None
        if fault is not None and not fault.timeout:
            raise fault.exc or ObjectStoreError(f"injected {op} fault on {name!r}", name=name)
        if fault is not None and not fault.after:
            raise ObjectStoreTimeout(f"injected {op} timeout on {name!r} (not applied)", name=name)
        result = await call()
        self._check_alive()  # crashed while our call was in flight
        if op in _WRITES:
            self.bytes_written += size
            if self._writes_left is not None:
                self._writes_left -= 1
                if self._writes_left <= 0:
                    self._crash()
        if fault is not None:
            raise ObjectStoreTimeout(f"injected {op} timeout on {name!r} (applied)", name=name)
        return result

    def _crash(self) -> None:
        self._crashed = True
        for lock in self._locks:  # the kernel releases a dead process's locks
            lock.release()
        self._locks.clear()

    def _check_alive(self) -> None:
        if self._crashed:
            raise SimulatedCrash(f"simulated crash of the process using {self.url}")

    # ------------------------------------------------------------------ API

    @property
    def url(self) -> str:
        """The inner store's URL."""
        return self.inner.url

    @property
    def is_local(self) -> bool:
        """The inner store's, unless latency is injected (then False)."""
        return self.inner.is_local and self.latency <= 0

    def __repr__(self) -> str:
        return f"FaultyObjectStore({self.inner!r}, latency={self.latency})"

    async def get(self, name: str) -> bytes:
        """The inner `get`, with latency and faults."""
        return await self._call("get", name, 0, lambda: self.inner.get(name))

    async def put(self, name: str, data: bytes) -> None:
        """The inner `put`, with latency and faults."""
        await self._call("put", name, len(data), lambda: self.inner.put(name, data))

    async def create(self, name: str, data: bytes) -> None:
        """The inner `create`, with latency and faults."""
        await self._call("create", name, len(data), lambda: self.inner.create(name, data))

    async def list(self, prefix: str) -> list[str]:
        """The inner `list`, with latency and faults."""
        return await self._call("list", prefix, 0, lambda: self.inner.list(prefix))

    async def delete(self, names: Iterable[str]) -> None:
        """The inner `delete`, with latency and faults."""
        if isinstance(names, str):
            raise TypeError(f"delete takes an iterable of names, not the string {names!r}")
        doomed = [*names]
        first = doomed[0] if doomed else ""
        await self._call("delete", first, 0, lambda: self.inner.delete(doomed))

    async def try_lock(self, name: str) -> ObjectLock | None:
        """The inner `try_lock` (`SimulatedCrash` once crashed)."""
        self._check_alive()
        lock = await self.inner.try_lock(name)
        if lock is not None:
            self._locks = [held for held in self._locks if held.held]
            self._locks.append(lock)
        return lock

    async def claim_log(self, prefix: str = "", *, takeover: bool = False) -> ObjectLock | None:
        """The inner `claim_log` (`SimulatedCrash` once crashed); a crash
        releases it with the locks."""
        self._check_alive()
        claim = await self.inner.claim_log(prefix, takeover=takeover)
        if claim is not None:
            self._locks = [held for held in self._locks if held.held]
            self._locks.append(claim)
        return claim

    async def close(self) -> None:
        """Close the inner store, unless the simulated process has died."""
        if not self._crashed:
            await self.inner.close()
