"""`Engine(url, partitions=P)`: a lone engine owns every partition at once,
whatever the engine before it on the store did."""

from __future__ import annotations

import asyncio

import pytest
from decorator_helpers import LIMIT, Factory, after_deferral, result

import durable
from durable.store.clock import MockClock

P = 8
events: dict[str, asyncio.Event] = {}


@pytest.fixture(autouse=True)
def _fresh() -> None:
    events.clear()


def event(name: str) -> asyncio.Event:
    return events.setdefault(name, asyncio.Event())


@durable.step
async def plus_one(n: int) -> int:
    return n + 1


@durable.step
async def held(n: int) -> int:
    event("held running").set()
    await event("let go").wait()
    return n


@durable.workflow
async def increment(n: int) -> int:
    return await plus_one(n)


@durable.workflow
async def waits_in_a_step(n: int) -> int:
    return await held(n)


def partitioned(make_objects: Factory, clock: MockClock) -> durable.Engine:
    return durable.Engine(make_objects(), clock=clock, partitions=P)


async def test_a_lone_engine_owns_every_partition_again_after_another_closed(
    make_objects: Factory, clock: MockClock
) -> None:
    for n in range(3):
        async with partitioned(make_objects, clock) as engine:
            assert engine.owner  # at once: the last engine's release is on the store
            assert engine.partition_count == P
            assert await result(await increment.start(n)) == n + 1


async def test_an_engine_whose_close_was_cancelled_lets_the_next_own_at_once(
    make_objects: Factory, clock: MockClock
) -> None:
    engine = partitioned(make_objects, clock)
    await engine.__aenter__()
    handle = await waits_in_a_step.start(7)
    await asyncio.wait_for(event("held running").wait(), LIMIT)
    workflows = engine.for_run(handle.run_id).workflows
    closing = asyncio.ensure_future(engine.__aexit__(None, None, None))
    await asyncio.wait_for(workflows.draining.wait(), LIMIT)  # the step holds the drain
    closing.cancel()  # e.g. the caller's timeout
    with pytest.raises(asyncio.CancelledError):
        await closing
    # Its member left all the same (not heartbeating on, owning nothing for ever).
    async with partitioned(make_objects, clock) as engine:
        assert engine.owner
        event("let go").set()
        await after_deferral(engine, handle.run_id, 1)  # the lost attempt was a crash
        assert await result(engine.handle(handle.run_id)) == 7
