"""Helpers shared by the engine's runtime tests (runners, hooks, waiting)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from durable.engine import (
    RunOutcome,
    Step,
    StepError,
    StepOutcome,
    Succeed,
    TerminalEffects,
    WorkflowRuntime,
)
from durable.store.objects.base import ObjectStore
from durable.store.queue import Queue

Factory = Callable[[], ObjectStore]
Opener = Callable[..., Awaitable[Queue]]
Body = Callable[[Step], Awaitable[StepOutcome]]

#: Interval of the queue's reaper, scheduler and fence check: tests drive them by hand.
HOUR = 3600.0
#: The runtime's default queue, configured by the ``open_queue`` fixture.
QUEUE = "workflow-steps"
#: Tasks of one open queue that sleep on the clock (reaper, scheduler, fence check).
BG = 3


class Runner:
    """Runs ``body`` and records every (run, step, attempt) it ran."""

    def __init__(self, body: Body) -> None:
        self.body = body
        self.ran: list[tuple[str, int, int]] = []

    async def run_step(self, step: Step) -> StepOutcome:
        """Record the delivery, then run the body."""
        self.ran.append((step.run_id, step.step_number, step.attempts))
        return await self.body(step)


class RecordingHook:
    """Observes every run; fails transiently ``fail_first`` times, then records
    each outcome and stages ``hooked/{run_id} = status``."""

    def __init__(self, fail_first: int = 0) -> None:
        self.seen: list[RunOutcome] = []
        self.fail_first = fail_first
        self.calls = 0
        self.called = asyncio.Event()

    def observes(self, outcome: RunOutcome) -> bool:
        """Every run."""
        return True

    async def on_termination(self, outcome: RunOutcome, effects: TerminalEffects) -> None:
        """Record ``outcome`` (after the configured transient failures)."""
        self.calls += 1
        if self.fail_first:
            self.fail_first -= 1
            raise StepError.transient("hook endpoint down")
        self.seen.append(outcome)
        self.called.set()
        effects.put(f"hooked/{outcome.run_id}", outcome.status.as_str().encode())


async def finish(rt: WorkflowRuntime, run_id: str) -> Any:
    """Run a worker until run ``run_id`` terminates; its `RunEnd`."""
    worker = rt.spawn()
    try:
        return await asyncio.wait_for(rt.wait(run_id), timeout=30)
    finally:
        await worker.shutdown()


def chain(steps: int) -> Body:
    """Continue ``steps`` times, appending to the payload, then succeed with it."""

    async def body(step: Step) -> StepOutcome:
        if step.step_number < steps:
            return StepOutcome.continue_now(step.payload + b">%d" % step.step_number)
        return Succeed(step.payload + b"!")

    return body
