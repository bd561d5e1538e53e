"""Issue 15 point 4: a workflow queue's concurrency is per process, whatever
number of partitions the process owns. Found by `benchmarks.bench_scale`:
the prototype gave each owned partition its own `WorkflowQueues`, so a
lone worker on 8 partitions ran 8 x the limit at once; now every
partition's worker of a queue shares one `Slots`."""

from __future__ import annotations

import asyncio
import uuid

from durable import Engine, step, workflow

LIMIT = 2
RUNS = 16
_running: list[int] = [0, 0]  # now, peak
_release = asyncio.Event()


@step(name="pool_concurrency.hold")
async def hold(i: int) -> int:
    """Count the bodies running at once; wait for the test to release them."""
    _running[0] += 1
    _running[1] = max(_running[1], _running[0])
    try:
        await _release.wait()
    finally:
        _running[0] -= 1
    return i


@workflow(name="pool_concurrency.one")
async def one(i: int) -> int:
    """One held step."""
    return await hold(i)


async def test_a_lone_worker_on_8_partitions_runs_at_most_the_queue_limit_at_once() -> None:
    global _release
    _release = asyncio.Event()
    _running[:] = [0, 0]
    async with Engine(
        f"memory://pool-concurrency-{uuid.uuid4().hex}",
        partitions=8,
        concurrency={"workflows": LIMIT},
    ):
        handles = [await one.options(run_id=f"run-{i}").start(i) for i in range(RUNS)]
        for _ in range(200):  # until as many as may have started did
            if _running[1] >= LIMIT:
                break
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.2)  # time for any further (wrong) start
        peak = _running[1]
        _release.set()
        assert [await h.result() for h in handles] == list(range(RUNS))
    assert peak == LIMIT, f"{peak} step bodies ran at once, the limit is {LIMIT}"
