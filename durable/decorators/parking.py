"""Parked waits: the durable waits of one delivery, and when it suspends.

A durable wait (``durable.sleep``, ``durable.wait_for_signal``, a child
workflow's result) that cannot complete at once *parks*: it registers a
`Parked` with the delivery's `Parking` (its position, its deadline on the
engine's clock, its signal key and the journal entry to write if the
delivery suspends on it) and awaits. The rest of the workflow goes on:
steps in other branches of a gather run, and are journaled, while a wait
is parked.

The delivery suspends only when it is *quiescent*: at least one wait is
parked, no tracked operation (a step, a wait not parked yet) is running,
no child start is unfinished, and that has held for `SETTLE_ITERATIONS`
turns of the event loop (a gather's tasks, and the code after a finished
branch, start on a later turn). Then (`Parking.until_suspended`):

- parked waits whose deadline has passed complete in place (a sleep
  returns, a signal wait times out) and the workflow goes on; a signal
  wait whose key holds a buffered signal is kept parked instead, so the
  signal is not lost to its timeout;
- otherwise the delivery ends with one trigger: `OnSignal` on the key of
  a parked signal wait (the first, by position, whose key holds a buffered
  signal, else the first by position), its timeout the earliest deadline
  of all the parked waits; with no signal wait parked, `After` that
  deadline.

A deadline that passes while the delivery is busy also completes its wait
in place, at once (a timer on the engine's clock).

What is still sequential: a suspended run waits on one signal key. The
signals sent meanwhile to the keys of its other parked waits are buffered
by the engine (one per key) and taken when the run waits on them, one
delivery each.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from durable.decorators.suspend import Suspend
from durable.engine.outcomes import After, OnSignal

if TYPE_CHECKING:
    from durable.decorators.journal import Entry
    from durable.store.clock import Clock

__all__ = ["FOREVER", "SETTLE_ITERATIONS", "Parked", "Parking"]

#: The timeout of a wait without one: ten years.
FOREVER = 10 * 365 * 86400.0
#: Turns of the event loop a delivery must stay idle, with a wait parked,
#: before it suspends.
SETTLE_ITERATIONS = 8
#: The shortest `OnSignal` timeout (it must be positive).
_MIN_TIMEOUT = 0.001


@dataclass(eq=False, slots=True)
class Parked:
    """One durable wait of the delivery that cannot complete yet."""

    #: Its journal position.
    position: int
    #: When it completes anyway (engine-clock ms); None: never (a child).
    until_ms: int | None
    #: The signal key it waits on; None for a sleep.
    key: str | None = None
    #: The journal entry to write when the delivery suspends on this wait.
    pending: Entry | None = None
    #: Past its deadline, but kept for the signal buffered under its key.
    held: bool = False
    #: Resolved (None) when the wait completes in place.
    future: asyncio.Future[None] = field(
        default_factory=lambda: asyncio.get_running_loop().create_future()
    )


class Parking:
    """The parked waits of one delivery and how busy it is; see the module
    docstring.

    ``starts`` are the delivery's child starts (running tasks count as
    busy); ``buffered(key)`` tells whether a signal is buffered under
    ``key``.
    """

    def __init__(
        self,
        clock: Clock,
        starts: Collection[asyncio.Task[None]],
        buffered: Callable[[str], bool],
    ) -> None:
        self._clock = clock
        self._starts = starts
        self._buffered = buffered
        self._busy = 0
        self._parked: list[Parked] = []
        self._generation = 0
        self._changed: asyncio.Future[None] | None = None
        self._timer: asyncio.Task[None] | None = None
        self._timer_at: int | None = None
        self._on_park: Callable[[], None] | None = None

    # ------------------------------------------------------------ bookkeeping

    def begin(self) -> None:
        """A tracked operation (a step, a wait) starts."""
        self._busy += 1
        self._bump()

    def end(self) -> None:
        """A tracked operation ends."""
        self._busy -= 1
        self._bump()

    def when_parked(self, callback: Callable[[], None]) -> None:
        """Call ``callback`` once, when the first wait parks: a delivery starts
        `until_suspended` then, since until something parks it has nothing
        to decide (most deliveries never park)."""
        self._on_park = callback

    async def park(self, parked: Parked) -> None:
        """Park ``parked`` (a wait of a tracked operation) until it completes in
        place; cancelled when the delivery suspends."""
        self._parked.append(parked)
        if self._on_park is not None:
            callback, self._on_park = self._on_park, None
            callback()
        self._busy -= 1  # the wait is parked, not busy
        self._bump()
        try:
            await parked.future
        finally:
            if parked in self._parked:  # cancelled, not woken
                self._parked.remove(parked)
                self._busy += 1
                self._bump()

    def _wake(self, parked: Parked) -> None:
        self._parked.remove(parked)
        self._busy += 1  # busy from now, not from when its task resumes
        if not parked.future.done():
            parked.future.set_result(None)
        self._bump()

    def _bump(self) -> None:
        self._generation += 1
        if self._parked and self._changed is not None:
            if not self._changed.done():
                self._changed.set_result(None)
            self._changed = None

    def _quiet(self) -> bool:
        return (
            bool(self._parked) and self._busy <= 0 and all(start.done() for start in self._starts)
        )

    # --------------------------------------------------------------- deciding

    async def until_suspended(self) -> Suspend:
        """Run beside the workflow: complete the waits whose deadline passes,
        and return how the delivery suspends once it is quiescent (a
        `Suspend`, not raised)."""
        try:
            while True:
                if self._quiet():
                    generation = self._generation
                    for _ in range(SETTLE_ITERATIONS):
                        await asyncio.sleep(0)
                    if generation != self._generation or not self._quiet():
                        continue
                    now = self._clock.now_ms()
                    if not self._expire(now):
                        return self._suspension(now)
                    continue
                if self._parked and self._expire(self._clock.now_ms()):
                    continue
                await self._next_change()
        finally:
            self._stop_timer()

    def _expire(self, now: int) -> bool:
        """Complete the parked waits due at ``now`` (but hold a signal wait
        whose key holds a buffered signal); True if any completed."""
        woke = False
        for parked in list(self._parked):
            if parked.until_ms is None or parked.until_ms > now:
                continue
            if parked.key is not None and self._buffered(parked.key):
                parked.held = True
                continue
            self._wake(parked)
            woke = True
        return woke

    def _suspension(self, now: int) -> Suspend:
        """The one trigger the quiescent delivery suspends on."""
        deadlines = [p.until_ms for p in self._parked if p.until_ms is not None]
        earliest = min(deadlines) if deadlines else None
        signals = sorted((p for p in self._parked if p.key is not None), key=_position)
        if signals:
            chosen = next((p for p in signals if self._buffered(p.key or "")), signals[0])
            assert chosen.key is not None
            timeout = FOREVER if earliest is None else (earliest - now) / 1000
            trigger = OnSignal(chosen.key, max(timeout, _MIN_TIMEOUT))
            return Suspend(trigger, chosen.position, chosen.pending)
        assert earliest is not None, "a parked wait without a key (a sleep) has a deadline"
        return Suspend(After(max(earliest - now, 0) / 1000))

    async def _next_change(self) -> None:
        """Wait until something changes: an operation starts or ends, a wait
        parks or completes, a child start finishes, a deadline passes."""
        changed = self._changed = asyncio.get_running_loop().create_future()
        waits: set[asyncio.Future[None]] = {changed}
        waits.update(start for start in self._starts if not start.done())
        timer = self._timer_for_deadline()
        if timer is not None:
            waits.add(timer)
        await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)

    def _timer_for_deadline(self) -> asyncio.Task[None] | None:
        """A clock sleep until the earliest deadline of the parked waits that
        can still complete in place (kept while that deadline stands)."""
        due = [p.until_ms for p in self._parked if p.until_ms is not None and not p.held]
        at = min(due) if due else None
        if at != self._timer_at or (self._timer is not None and self._timer.done()):
            self._stop_timer()
            if at is not None:
                delay = (at - self._clock.now_ms()) / 1000
                self._timer = asyncio.ensure_future(self._clock.sleep(delay))
                self._timer_at = at
        return self._timer

    def _stop_timer(self) -> None:
        if self._timer is not None and not self._timer.done():
            self._timer.cancel()
        self._timer = None
        self._timer_at = None


def _position(parked: Parked) -> int:
    return parked.position
