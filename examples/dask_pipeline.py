"""Heavy steps on a Dask cluster: ``@step(executor="dask")``.

    python -m examples.dask_pipeline [STORE_DIR]

The example starts a local Dask cluster of two worker processes (with
``allowed-failures`` 0, so Dask never re-runs a body behind the engine's
back) and gives its client to the engine: ``Engine(store,
executors={"dask": client})``.

The workflow gathers four ``count_primes`` steps: pure-Python CPU work, so
in one process they would take turns on the GIL; here their bodies run on
the cluster's workers, two at a time. The engine keeps the orchestration:
it journals each result as it comes back, and a restarted run would read
them from the journal instead of sending them again. The light step that
adds the counts up runs inline, in the engine's process.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import dask.config
from distributed import Client, LocalCluster

from durable import Engine, step, workflow
from examples._store_dir import run_with_store

#: The ranges whose primes are counted, one step each.
CHUNKS = [(0, 50_000), (50_000, 100_000), (100_000, 150_000), (150_000, 200_000)]


@step(executor="dask")
async def count_primes(lo: int, hi: int) -> tuple[int, int]:
    """The primes in ``[lo, hi)`` by trial division (CPU-bound), and the id of
    the worker process that counted them."""
    count = 0
    for n in range(max(lo, 2), hi):
        if all(n % d for d in range(2, int(n**0.5) + 1)):
            count += 1
    return count, os.getpid()


@step  # inline: the default executor, in the engine's process
async def total(counts: list[int]) -> int:
    """The sum of the counts."""
    return sum(counts)


@workflow
async def primes_below(chunks: list[tuple[int, int]]) -> int:
    """Count the primes of every chunk on the cluster, then add them up here."""
    results = await asyncio.gather(*(count_primes(lo, hi) for lo, hi in chunks))
    for (lo, hi), (count, pid) in zip(chunks, results, strict=True):
        print(f"  [{lo:,}, {hi:,}): {count:,} primes, counted by worker process {pid}")
    workers = {pid for _, pid in results}
    print(f"  worker processes used: {len(workers)}; engine process: {os.getpid()}")
    return await total([count for count, _ in results])


async def main(store: Path) -> None:
    dask.config.set({"distributed.scheduler.allowed-failures": 0})
    async with (
        LocalCluster(
            n_workers=2,
            threads_per_worker=1,
            processes=True,
            host="127.0.0.1",
            dashboard_address=":0",
            asynchronous=True,
        ) as cluster,
        Client(cluster, asynchronous=True) as client,
    ):
        print(f"started a Dask cluster of {len(cluster.workers)} worker processes")
        async with Engine(store, executors={"dask": client}):
            handle = await primes_below.options(run_id="primes").start(CHUNKS)
            result = await handle.result()
        print(f"run 'primes': {result:,} primes below {CHUNKS[-1][1]:,}")
    print("closed the cluster")


if __name__ == "__main__":
    run_with_store(main)
