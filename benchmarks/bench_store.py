"""Store benchmark: awaited commits/s and object PUTs per commit; reopen time.

    python -m benchmarks.bench_store [--quick] [--backend local|memory|s3|gcs|azure]

Workloads:

- ``commits``: N concurrent committers each doing awaited commits of one
  small key (a `kv_put`-sized transaction) for a fixed time, at 1, 16 and
  128 committers; on a local directory (fsync), and on the memory store
  behind 20 ms of injected latency per object call (a cloud-like RTT).
- ``reopen``: a store holding 100,000 pending jobs is closed and reopened;
  time until the queue is open and ready to claim.
- ``--backend s3|gcs|azure``: the commit workload on that backend's local
  emulator (endpoints from ``scripts/emulators.py start``), directly and
  behind a proxy adding 10 ms each way (a 20 ms round trip).

The last line of output is one JSON object with every figure.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from durable.store.log import LogOptions, LogWriter, WriteBatch
from durable.store.objects import (
    FaultyObjectStore,
    LocalObjectStore,
    MemoryObjectStore,
    open_object_store,
)
from durable.store.objects.base import ObjectStore


async def bench_commits(
    objects: FaultyObjectStore, committers: int, seconds: float
) -> dict[str, float]:
    """Awaited commits/s and log PUTs per commit at ``committers`` concurrency."""
    writer = await LogWriter.open(objects, LogOptions(checkpoint_on_close=False))
    stop = time.perf_counter() + seconds
    value = b"v" * 64
    latencies: list[float] = []

    async def committer(i: int) -> int:
        n = 0
        while time.perf_counter() < stop:
            t0 = time.perf_counter()
            await writer.commit(WriteBatch().put(b"k%05d-%09d" % (i, n), value))
            latencies.append(time.perf_counter() - t0)
            n += 1
        return n

    puts_before = objects.calls["create"] + objects.calls["put"]
    t0 = time.perf_counter()
    done = sum(await asyncio.gather(*(committer(i) for i in range(committers))))
    elapsed = time.perf_counter() - t0
    puts = objects.calls["create"] + objects.calls["put"] - puts_before
    await writer.close()
    latencies.sort()
    return {
        "commits_per_s": round(done / elapsed, 1),
        "puts_per_commit": round(puts / max(done, 1), 4),
        "p50_ms": round(latencies[len(latencies) // 2] * 1000, 3),
        "p99_ms": round(latencies[int(len(latencies) * 0.99)] * 1000, 3),
    }


async def bench_reopen(objects: ObjectStore, jobs: int) -> dict[str, float]:
    """Seconds to reopen a queue holding ``jobs`` pending jobs, after a crash and a close."""
    from durable.store.queue import OpenOptions, Queue

    q = await Queue.open(objects, OpenOptions())
    batch = 5000
    for start in range(0, jobs, batch):
        await q.enqueue_batch("bench", [b"p" * 64] * min(batch, jobs - start))
    figures: dict[str, float] = {"reopen_jobs": jobs}
    for kind in ("after_crash", "after_close"):
        if kind == "after_close":
            await q.close()  # writes a checkpoint: the next open reads one object
        # After a crash the old writer simply stops and the new one fences it:
        # the log since the last checkpoint is replayed.
        t0 = time.perf_counter()
        q2 = await Queue.open(objects, OpenOptions())
        figures[f"reopen_{kind}_s"] = round(time.perf_counter() - t0, 3)
        assert q2.stats("bench").pending == jobs
        await q.close()
        q = q2
    assert await q.claim("bench", 30.0) is not None
    await q.close()
    return figures


async def cloud_store(backend: str, endpoint: str | None) -> FaultyObjectStore:
    """A fresh bucket on ``backend``'s emulator, counted by a FaultyObjectStore."""
    from durable.testing.cloud import new_bucket

    url, options = await new_bucket(backend, endpoint=endpoint)
    return FaultyObjectStore(await open_object_store(url, options))


async def bench_cloud(backend: str, seconds: float, figures: dict[str, Any]) -> None:
    """Commit workloads on an emulator, directly and at 20 ms RTT."""
    from durable.testing.cloud import storage_options
    from durable.testing.delay_proxy import DelayProxy

    opts = storage_options(backend)
    target = opts.get("endpoint_url") or opts["connection_string"].split("BlobEndpoint=")[1]
    port = int(target.split("://", 1)[1].split("/", 1)[0].rsplit(":", 1)[1])
    async with DelayProxy(port, delay=0.010) as proxy:
        for label, endpoint in (("direct", None), ("rtt20", proxy.url)):
            for n in (1, 16, 128):
                objects = await cloud_store(backend, endpoint)
                try:
                    r = await bench_commits(objects, n, seconds)
                finally:
                    await objects.close()
                for k, v in r.items():
                    figures[f"{backend}_{label}_c{n}_{k}"] = v
                print(f"{backend} {label:6} committers={n:4} {r}", file=sys.stderr)


async def main(argv: list[str]) -> dict[str, Any]:
    """Run the benchmark and return its figures."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="short runs, for CI smoke tests")
    p.add_argument("--backend", choices=["local", "memory", "s3", "gcs", "azure"], default=None)
    p.add_argument("--latency-ms", type=float, default=20.0, help="injected latency on memory")
    args = p.parse_args(argv)
    seconds = 0.3 if args.quick else 3.0
    reopen_jobs = 2_000 if args.quick else 100_000
    figures: dict[str, Any] = {"quick": args.quick}
    if args.backend in ("s3", "gcs", "azure"):
        await bench_cloud(args.backend, seconds, figures)
        return figures
    backends = [args.backend] if args.backend else ["local", "memory"]
    tmp = Path(tempfile.mkdtemp(prefix="durable-bench-"))
    try:
        for backend in backends:
            for n in (1, 16, 128):
                inner: ObjectStore
                if backend == "local":
                    inner = LocalObjectStore(tmp / f"commits-{n}")
                    faulty = FaultyObjectStore(inner)
                else:
                    inner = MemoryObjectStore()
                    faulty = FaultyObjectStore(inner, latency=args.latency_ms / 1000)
                r = await bench_commits(faulty, n, seconds)
                for k, v in r.items():
                    figures[f"{backend}_c{n}_{k}"] = v
                print(f"{backend:6} committers={n:4} {r}", file=sys.stderr)
        if "local" in backends:
            r = await bench_reopen(LocalObjectStore(tmp / "reopen"), reopen_jobs)
            figures.update({f"local_{k}": v for k, v in r.items()})
            print(f"reopen {r}", file=sys.stderr)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return figures


if __name__ == "__main__":
    print(json.dumps(asyncio.run(main(sys.argv[1:]))))
