"""Workflow queues (issue point 11): ``@workflow(queue=...)`` and per-queue
concurrency limits set on the engine."""

from __future__ import annotations

import asyncio
from collections import Counter

import pytest
from decorator_helpers import LIMIT, Factory, make_engine, result

import durable
from durable import WorkflowState
from durable.decorators.registry import DEFAULT_QUEUE
from durable.errors import DecoratorError, InvalidArgument
from durable.store.clock import MockClock

active: Counter[str] = Counter()
peak: Counter[str] = Counter()
gate: list[asyncio.Event] = []
started: dict[str, asyncio.Event] = {}


@pytest.fixture(autouse=True)
def _fresh() -> None:
    active.clear()
    peak.clear()
    gate[:] = [asyncio.Event()]
    started.clear()


def all_started(queue: str) -> asyncio.Event:
    return started.setdefault(queue, asyncio.Event())


@durable.step
async def occupy(queue: str, expected: int) -> None:
    active[queue] += 1
    peak[queue] = max(peak[queue], active[queue])
    if active[queue] >= expected:
        all_started(queue).set()
    try:
        await gate[0].wait()
    finally:
        active[queue] -= 1


@durable.workflow(queue="emails")
async def send(expected: int) -> str:
    await occupy("emails", expected)
    return "sent"


@durable.workflow(queue="bulk")
async def crunch(expected: int) -> str:
    await occupy("bulk", expected)
    return "crunched"


@durable.workflow
async def default_queue_run() -> str:
    return "ok"


async def test_a_queue_limited_to_one_never_runs_two_at_once(
    make_objects: Factory, clock: MockClock
) -> None:
    async with make_engine(make_objects, clock, concurrency={"emails": 1}) as engine:
        emails = [await send.start(1) for _ in range(3)]
        bulk = [await crunch.start(3) for _ in range(3)]  # the default limit: 8
        await asyncio.wait_for(all_started("bulk").wait(), LIMIT)
        await asyncio.wait_for(all_started("emails").wait(), LIMIT)
        # Three bulk runs run at once; of the emails, one runs, two wait.
        assert active == {"bulk": 3, "emails": 1}
        states = [await h.status() for h in emails]
        assert sum(s.state is WorkflowState.PENDING for s in states if s is not None) == 2
        part = engine.for_run(emails[0].run_id)
        pointer = part.workflows.default.view.pointer(emails[0].run_id)
        assert pointer is not None
        job = part.queue.job_record(pointer.job_id)
        assert job is not None
        assert job.queue == "emails"
        gate[0].set()
        assert [await result(h) for h in emails] == ["sent"] * 3
        assert [await result(h) for h in bulk] == ["crunched"] * 3
    assert peak == {"emails": 1, "bulk": 3}


async def test_a_queue_with_concurrency_zero_runs_nothing_here(
    make_objects: Factory, clock: MockClock
) -> None:
    # A process that only starts runs (a web server, say) ...
    async with make_engine(make_objects, clock, concurrency={DEFAULT_QUEUE: 0}) as engine:
        handle = await default_queue_run.start()
        part = engine.for_run(handle.run_id)
        assert part.queue.stats(DEFAULT_QUEUE).pending == 1
        idle = clock.sleepers
        waiter = asyncio.ensure_future(handle.result(timeout=1))
        await asyncio.wait_for(clock.wait_for_sleepers(idle + 1), LIMIT)
        clock.advance(1)
        await asyncio.wait({waiter}, timeout=LIMIT)
        assert isinstance(waiter.exception(), TimeoutError)  # nobody ran it
    # ... and a worker process that runs them.
    async with make_engine(make_objects, clock) as engine:
        assert await result(engine.handle(handle.run_id)) == "ok"


def test_workflow_queues_are_named_at_decoration() -> None:
    assert send.queue == "emails"
    assert default_queue_run.queue == DEFAULT_QUEUE == "workflows"
    with pytest.raises(DecoratorError, match="queue"):

        @durable.workflow(queue="x" * 300)
        async def too_long() -> None:
            pass


def test_concurrency_limits_are_checked() -> None:
    for bad in ({"emails": -1}, {"emails": 1.5}, {"emails": True}, {3: 1}):
        with pytest.raises(InvalidArgument):
            durable.Engine("memory://x", concurrency=bad)  # type: ignore[arg-type]
