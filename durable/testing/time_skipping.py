"""Time skipping: run a workflow through its timers on a `MockClock` at once.

``await run_until_settled(handle)`` drives the run of ``handle`` (on an
`Engine` whose clock is a `MockClock`) until it *settles*: it has ended, or
it waits on something no time can bring (a signal without a timeout, a job
no worker runs). Each time the run waits for a time, the clock jumps to it
(`MockClock.set`) and the due timers are promoted at once, so a workflow
that sleeps 30 days finishes in a fraction of a second.

How it knows the next due time: a waiting run's current step is a
scheduled queue job (`WorkflowHandle.waiting`: its ``until_ms`` is the wake
time of its sleeps, or the timeout of its signal wait). A run waiting on a
child run is settled through the child first: the child's timers are
skipped as far as the parent's own deadline, if it has one.

What it does not skip: time that passes *inside* a delivery (a step's retry
backoff, a step's timeout) and the retry of a failed delivery: advance the
clock yourself there (`MockClock.advance`). A signal wait with a timeout is
a time, and is skipped to its timeout: send the signal before, if the test
means it to arrive.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from durable.decorators.stall import clock_wait
from durable.decorators.waiting import Waiting, wait_until_waiting
from durable.errors import InvalidArgument
from durable.store.clock import MockClock
from durable.store.queue import Queue

if TYPE_CHECKING:
    from durable.decorators.base import EngineBase
    from durable.decorators.handles import WorkflowHandle

__all__ = ["Settled", "run_until_settled"]


@dataclass(frozen=True, slots=True)
class Settled:
    """Where `run_until_settled` left a run."""

    #: The run's id.
    run_id: str
    #: True when the run has ended (read its outcome with ``handle.result()``).
    ended: bool
    #: Where the run waits when it has not ended (a signal, a child, a job).
    waiting: Waiting | None
    #: How much mock time was skipped, in seconds.
    skipped: float


@dataclass(frozen=True, slots=True)
class _Beyond:
    """A run's next time lies past the bound it was settled within."""

    until_ms: int


async def run_until_settled(handle: WorkflowHandle[Any]) -> Settled:
    """Skip the mock clock from timer to timer until the run of ``handle``
    ends or waits on something time cannot advance; see the module
    docstring. `InvalidArgument` unless the handle's engine runs on a
    `MockClock` (and is this process's worker, which runs the run)."""
    engine: EngineBase = handle._engine  # the handle's engine, as `result()` uses it
    clock = engine.clock
    if not isinstance(clock, MockClock):
        raise InvalidArgument(
            f"run_until_settled needs an Engine on a MockClock, not {clock!r}: "
            "Engine(url, clock=MockClock())"
        )
    start = clock.now_ms()
    found = await _settle(engine, clock, handle.run_id, None)
    assert not isinstance(found, _Beyond)  # no bound at the top
    return Settled(
        run_id=handle.run_id,
        ended=found is None,
        waiting=found,
        skipped=(clock.now_ms() - start) / 1000,
    )


async def _settle(
    engine: EngineBase, clock: MockClock, run_id: str, bound: int | None
) -> Waiting | _Beyond | None:
    """Drive run ``run_id`` without moving the clock past ``bound`` (ms;
    None: no bound): None once it has ended, its `Waiting` when no time can
    move it, `_Beyond` when its next time lies past ``bound``."""
    after: Waiting | None = None
    while True:
        waiting = await wait_until_waiting(engine, run_id, after=after)
        if waiting is None:
            return None
        deadline = waiting.until_ms if clock_wait(waiting) else None
        child = waiting.child_run_id
        if child is not None:
            limit = (
                deadline if bound is None else bound if deadline is None else min(deadline, bound)
            )
            found = await _settle(engine, clock, child, limit)
            if found is None:  # the child ended: its end wakes this run
                after = waiting
                continue
        if deadline is None:
            return waiting
        if bound is not None and deadline > bound:
            return _Beyond(deadline)
        if deadline > clock.now_ms():
            clock.set(deadline)
        queue = engine.for_run(run_id).queue
        if isinstance(queue, Queue):  # the owner: promote now, not at the scheduler's tick
            queue.promote_scheduled_now()
        after = waiting
