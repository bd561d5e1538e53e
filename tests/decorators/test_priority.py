"""Priority per start (issue 18 point 6): ``wf.options(priority=...)``: of the
runs waiting on a queue, the lowest priority number runs first (default
1000, `durable.store.queue.options.PRIORITY_NORMAL`), then FIFO.

On one partition's queue (``DURABLE_TEST_PARTITIONS=8``: the runs get ids
in one partition, whose queue orders them)."""

from __future__ import annotations

import asyncio

import pytest
from decorator_helpers import LIMIT, Factory, make_engine

import durable
from durable.store.clock import MockClock

order: list[str] = []
gates: list[asyncio.Event] = []


@pytest.fixture(autouse=True)
def _fresh() -> None:
    order.clear()
    gates[:] = [asyncio.Event(), asyncio.Event()]


@durable.step(name="priority.hold")
async def hold() -> None:
    gates[0].set()  # the one slot is taken
    await gates[1].wait()


@durable.workflow(name="priority.blocker", queue="prio")
async def blocker() -> None:
    await hold()


@durable.workflow(name="priority.job", queue="prio")
async def job(name: str) -> str:
    order.append(name)
    return name


async def test_lower_priority_numbers_run_first(make_objects: Factory, clock: MockClock) -> None:
    async with make_engine(make_objects, clock, concurrency={"prio": 1}) as engine:

        def rid(name: str) -> str:
            return engine.co_located(f"prio-{name}", "prio")

        first = await blocker.options(run_id=rid("blocker")).start()
        await asyncio.wait_for(gates[0].wait(), LIMIT)
        handles = [
            await job.options(run_id=rid(name), priority=p).start(name)
            for name, p in [("low", 5000), ("high", 100), ("urgent", 0), ("mid", 2000)]
        ]
        handles.append(await job.options(run_id=rid("default")).start("default"))  # 1000
        handles.append(await job.options(run_id=rid("high2"), priority=100).start("high2"))
        gates[1].set()
        await asyncio.wait_for(first.result(), LIMIT)
        for h in handles:
            await asyncio.wait_for(h.result(), LIMIT)
        assert order == ["urgent", "high", "high2", "default", "mid", "low"]
