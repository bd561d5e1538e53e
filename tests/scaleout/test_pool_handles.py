"""A handle outlives a move of its run's partition (found by CI: in a pool,
a worker's ``await handle.result()`` raised `StoreClosed` when the run's
partition was handed over under it, though the run went on elsewhere).

Worker A owns all 4 partitions; eight runs park on a durable signal wait;
worker B joins, and the pool hands some partitions over to it (A drains
them: the parked runs suspend). A's handles were waiting all along, and
B's handles were waiting on the partitions it did not own yet. Once each
run's signal is sent, every handle in both processes returns the run's
result: `result`, `get`, `waiting` and `status` each crossed a move.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import durable
from durable import Engine, workflow
from durable.decorators.partitioned import PartitionedSession
from durable.decorators.status import WorkflowState

RUNS = [f"move-{i}" for i in range(8)]


@workflow(name="pool_handles.parked")
async def parked(i: int) -> int:
    """Publish, park on the run's signal, return ``i`` plus the signal's value."""
    await durable.publish("seen", i)
    value = await durable.wait_for_signal(f"go-{durable.run_id()}")
    return i + int(value)


def moved(a: Engine, b: Engine) -> bool:
    """True once B owns the partition of some run (it was A's)."""
    return any(b.for_run(r).owner and not a.for_run(r).owner for r in RUNS)


async def test_handles_in_both_workers_survive_a_handover(tmp_path: Path) -> None:
    url = str(tmp_path / "store")
    async with Engine(url, partitions=4, ttl=1.0, heartbeat=0.2) as a:
        handles = [await parked.options(run_id=r).start(i) for i, r in enumerate(RUNS)]
        for h in handles:  # every run parked before B joins
            assert await h.waiting(timeout=30) is not None
        waits = [asyncio.ensure_future(h.result()) for h in handles]
        gets = [asyncio.ensure_future(h.get("seen", timeout=30)) for h in handles]
        async with Engine(url, partitions=4, ttl=1.0, heartbeat=0.2) as b:
            b_waits = [asyncio.ensure_future(b.handle(r).result()) for r in RUNS]
            session = b._session
            assert isinstance(session, PartitionedSession)
            await asyncio.wait_for(session.wait_until(lambda: moved(a, b)), 30)
            assert not any(w.done() for w in waits + b_waits), "a wait ended at the move"
            for h in handles:  # read on whichever mode each partition is in now
                status = await h.status()
                assert status is not None
                assert status.state is WorkflowState.WAITING
                assert await h.waiting(timeout=30) is not None
            for r in RUNS:
                await a.signal(f"go-{r}", 100)
            want = [i + 100 for i in range(len(RUNS))]
            assert await asyncio.wait_for(asyncio.gather(*waits), 30) == want
            assert await asyncio.wait_for(asyncio.gather(*b_waits), 30) == want
            assert await asyncio.gather(*gets) == list(range(len(RUNS)))
            assert moved(a, b)
