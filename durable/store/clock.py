"""Time, injected: every timestamp, timer and sleep in `durable` reads a `Clock`.

`SystemClock` is the wall clock. `MockClock` is moved by hand with
`MockClock.advance`, which also wakes the background loops sleeping on it,
so leases, schedules, backoff and retention move together in tests.

A `MockClock` also *fails fast*: ``handle.result()`` on a run that waits for
a time of this clock (a ``durable.sleep``, a signal wait's timeout) raises
`ClockNotAdvanced` once the clock has not moved for ``stall_after`` seconds
of real time while the run waited (`durable.decorators.stall`), instead of
hanging until the test's timeout.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import time
from collections.abc import Callable
from typing import Protocol, runtime_checkable

__all__ = ["Clock", "MockClock", "SystemClock", "call_later"]


@runtime_checkable
class Clock(Protocol):
    """A source of time for every decision the store and engine make."""

    def now_ms(self) -> int:
        """Milliseconds since the Unix epoch."""
        ...

    async def sleep(self, seconds: float) -> None:
        """Sleep for ``seconds`` of this clock's time."""
        ...


class SystemClock:
    """The wall clock (`time.time`) and `asyncio.sleep`."""

    def now_ms(self) -> int:
        """Milliseconds since the Unix epoch, from the system clock."""
        return time.time_ns() // 1_000_000

    async def sleep(self, seconds: float) -> None:
        """Sleep on the event loop's timer."""
        await asyncio.sleep(max(0.0, seconds))

    def __repr__(self) -> str:
        return "SystemClock()"


class MockClock:
    """A clock that moves only when told to.

    ``sleep`` suspends until `advance` moves time past the sleeper's
    deadline. `wait_for_sleepers` lets a test wait until background tasks
    are parked on the clock, instead of sleeping on the wall clock.

    ``stall_after``: seconds of real time after which ``handle.result()`` on
    a run waiting for a time of this clock, which nothing advances, raises
    `ClockNotAdvanced` (None: wait without that check).
    """

    def __init__(
        self, start_ms: int = 1_700_000_000_000, *, stall_after: float | None = 5.0
    ) -> None:
        if stall_after is not None and not stall_after > 0:
            raise ValueError(f"stall_after must be positive seconds or None, got {stall_after!r}")
        self._now = int(start_ms)
        self._sleepers: list[tuple[int, int, asyncio.Future[None]]] = []
        self._seq = itertools.count()
        self._changed: asyncio.Event | None = None
        self._moved: asyncio.Event | None = None
        #: Real seconds a run may wait on this clock, unadvanced, in ``result()``.
        self.stall_after = stall_after

    def now_ms(self) -> int:
        """The mock time in milliseconds."""
        return self._now

    def set(self, now_ms: int) -> None:
        """Move the clock to ``now_ms`` (never backwards) and wake due sleepers."""
        if now_ms < self._now:
            raise ValueError(f"MockClock cannot go backwards ({now_ms} < {self._now})")
        if now_ms > self._now and self._moved is not None:
            self._moved.set()
            self._moved = None
        self._now = int(now_ms)
        self._wake()

    def advance(self, seconds: float) -> None:
        """Move the clock forward by ``seconds`` and wake every due sleeper."""
        if seconds < 0:
            raise ValueError("MockClock.advance needs a non-negative duration")
        self.set(self._now + round(seconds * 1000))

    async def sleep(self, seconds: float) -> None:
        """Suspend until the clock has advanced by ``seconds``."""
        fut = self.deadline(seconds)
        if fut is None:
            await asyncio.sleep(0)
            return
        await fut

    def deadline(self, seconds: float) -> asyncio.Future[None] | None:
        """A future resolved once the clock has advanced by ``seconds`` (its
        waiter counts as a sleeper until then; cancel it to withdraw); None
        if that time has come already."""
        deadline = self._now + max(0, round(seconds * 1000))
        if deadline <= self._now:
            return None
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        heapq.heappush(self._sleepers, (deadline, next(self._seq), fut))
        self._notify()
        return fut

    @property
    def sleepers(self) -> int:
        """How many tasks are sleeping on this clock now."""
        return sum(1 for _, _, f in self._sleepers if not f.done())

    async def wait_for_sleepers(self, count: int = 1) -> None:
        """Wait until at least ``count`` tasks are sleeping on this clock."""
        while self.sleepers < count:
            if self._changed is None:
                self._changed = asyncio.Event()
            await self._changed.wait()

    async def wait_moved(self) -> None:
        """Wait until the clock next moves forward (`set`, `advance`)."""
        if self._moved is None:
            self._moved = asyncio.Event()
        await self._moved.wait()

    def next_deadline(self) -> int | None:
        """The earliest deadline (ms) of the tasks sleeping on this clock, or None."""
        live = [d for d, _, f in self._sleepers if not f.done()]
        return min(live) if live else None

    def _notify(self) -> None:
        if self._changed is not None:
            self._changed.set()
            self._changed = None

    def _wake(self) -> None:
        while self._sleepers and self._sleepers[0][0] <= self._now:
            _, _, fut = heapq.heappop(self._sleepers)
            if not fut.done():
                fut.set_result(None)
        self._notify()

    def __repr__(self) -> str:
        return f"MockClock(now_ms={self._now})"


def call_later(clock: Clock, seconds: float, callback: Callable[[], object]) -> Callable[[], None]:
    """Call ``callback()`` on the running loop after ``seconds`` of
    ``clock`` time; returns a function that cancels the call (harmless once
    it is made). A timer, not a task: `SystemClock` on the loop's timer,
    `MockClock` as one of its sleepers; any other `Clock` through a task
    that sleeps on it."""
    loop = asyncio.get_running_loop()
    if isinstance(clock, SystemClock):
        return loop.call_later(max(0.0, seconds), callback).cancel
    if isinstance(clock, MockClock):
        fut = clock.deadline(seconds)
        if fut is None:
            return loop.call_soon(callback).cancel
        fut.add_done_callback(lambda f: None if f.cancelled() else callback())
        return _canceller(fut)

    async def sleep_then_call() -> None:
        await clock.sleep(seconds)
        callback()

    return _canceller(loop.create_task(sleep_then_call()))


def _canceller(fut: asyncio.Future[None]) -> Callable[[], None]:
    def cancel() -> None:
        fut.cancel()

    return cancel
