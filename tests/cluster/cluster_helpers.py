"""Helpers of the inbox tests: an owner (queue + runtime + applier) on a shared store."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from durable.cluster.inbox import InboxApplier
from durable.engine import (
    RuntimeOptions,
    Step,
    StepOutcome,
    Succeed,
    WorkflowRuntime,
)
from durable.store.clock import MockClock
from durable.store.objects.base import ObjectStore
from durable.store.queue import OpenOptions, Queue, QueueConfig

Factory = Callable[[], ObjectStore]
Body = Callable[[Step], Awaitable[StepOutcome]]
#: ``await owner_of(store, body, ...)`` (the fixture): an `Owner` of ``store``.
Opener = Callable[..., Awaitable["Owner"]]

#: The runtime's queue.
QUEUE = "workflow-steps"
#: A correlation key the runs of `wait_then_echo` wait on.
KEY = "approve:order-1"
#: Interval of the queue's background tasks: tests drive them by hand.
HOUR = 3600.0


class Runner:
    """Runs ``body``, recording each (run, step) delivered."""

    def __init__(self, body: Body) -> None:
        self.body = body
        self.ran: list[tuple[str, int]] = []

    async def run_step(self, step: Step) -> StepOutcome:
        """Record the delivery, then run the body."""
        self.ran.append((step.run_id, step.step_number))
        return await self.body(step)


async def echo(step: Step) -> StepOutcome:
    """One step: succeed with the input."""
    return Succeed(step.payload)


async def wait_then_echo(step: Step) -> StepOutcome:
    """Step 0 waits an hour for a signal on `KEY`; step 1 succeeds with it."""
    if step.step_number == 0:
        return StepOutcome.continue_on_signal(step.payload, KEY, HOUR)
    return Succeed(step.signal if step.signal is not None else b"timed out")


@dataclass
class Owner:
    """The store's owner: its queue, one runtime on `QUEUE`, its inbox applier."""

    queue: Queue
    runtime: WorkflowRuntime
    runner: Runner
    applier: InboxApplier
    workers: list[object] = field(default_factory=list)

    async def run_until_done(self, run_id: str) -> object:
        """Run a worker until ``run_id`` terminates; its `RunEnd`."""
        worker = self.runtime.spawn()
        try:
            return await asyncio.wait_for(self.runtime.wait(run_id), 30)
        finally:
            await worker.shutdown()


async def open_owner(
    store: ObjectStore,
    clock: MockClock,
    body: Body = echo,
    *,
    options: RuntimeOptions | None = None,
    applier_store: ObjectStore | None = None,
) -> Owner:
    """Open the store (fencing any earlier owner) with a runtime and an applier."""
    queue = await Queue.open(
        store,
        OpenOptions(
            clock=clock,
            reaper_interval=HOUR,
            scheduler_interval=HOUR,
            fence_check_interval=HOUR,
            queue_configs={QUEUE: QueueConfig(retry_backoff_base=0.0)},
        ),
    )
    runner = Runner(body)
    runtime = WorkflowRuntime(queue, runner, options=options)
    runtimes = {QUEUE: runtime}
    applier = InboxApplier(applier_store or store, queue.kv, runtimes.get, clock)
    return Owner(queue, runtime, runner, applier)
