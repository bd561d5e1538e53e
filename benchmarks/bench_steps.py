"""Workflow runtime benchmark: step throughput, 1-step latency, sequential steps.

    python -m benchmarks.bench_steps [--quick] [--backend local|s3|gcs|azure]

Workloads, on a local directory (``Queue.open(path)``, fsync on):

- ``throughput``: 500 runs of 10 no-op steps (Continue 9 times, then
  Succeed) are submitted together, then one `WorkflowRuntime` worker drains
  them; for a few ``max_concurrent_steps`` values, keeping the best. Steps/s,
  process CPU per step, peak RSS and peak thread count.
- ``latency``: 200 one-step runs, one at a time (submit, then wait for the
  outcome) with the worker running: p50/p95/p99 ms.
- ``sequential``: one run of 100 steps (the median of 3): ms per step,
  next to ``write_floor_ms``: one awaited create-if-absent of a small
  object in the same directory (temp file, fsync, link, directory fsync),
  the least a durable step transition costs on this disk, measured in the
  same run (the disk of a shared machine is noisy).
- ``--backend s3|gcs|azure``: ``throughput`` (100 runs x 10 steps) on that
  backend's emulator behind a 20 ms round trip (`DelayProxy`): step
  transitions/s and object writes (create + put) per transition. The
  endpoints come from ``eval "$(.venv/bin/python scripts/emulators.py start)"``.

The last line of output is one JSON object with every figure.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import json
import resource
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from durable.engine import (
    RunEnd,
    RunSpec,
    RuntimeOptions,
    Step,
    StepOutcome,
    Succeed,
    TerminalStatus,
    WorkflowRuntime,
)
from durable.store.objects import FaultyObjectStore, LocalObjectStore
from durable.store.objects.base import ObjectStore
from durable.store.queue import OpenOptions, Queue

try:  # the `bench` extra; without it, no OS thread count
    psutil: Any = importlib.import_module("psutil")
except ImportError:
    psutil = None

QUEUE = "workflow-steps"


class NoopChain:
    """A run of ``steps`` no-op steps: Continue ``steps - 1`` times, then Succeed."""

    def __init__(self, steps: int) -> None:
        self.last = steps - 1
        self.ran = 0

    async def run_step(self, step: Step) -> StepOutcome:
        self.ran += 1
        if step.step_number < self.last:
            return StepOutcome.continue_now(b"")
        return Succeed(b"ok")


class Sampler:
    """Samples the thread count every ``interval`` seconds on the event loop."""

    def __init__(self, interval: float = 0.005) -> None:
        self.interval = interval
        self.peak_threads = threading.active_count()
        self.peak_os_threads = 0
        self._proc = psutil.Process() if psutil is not None else None
        self._task: asyncio.Task[None] | None = None

    def sample(self) -> None:
        self.peak_threads = max(self.peak_threads, threading.active_count())
        if self._proc is not None:
            self.peak_os_threads = max(self.peak_os_threads, self._proc.num_threads())

    async def _run(self) -> None:
        while True:
            self.sample()
            await asyncio.sleep(self.interval)

    def __enter__(self) -> Sampler:
        self._task = asyncio.create_task(self._run())
        return self

    def __exit__(self, *exc: object) -> None:
        assert self._task is not None
        self._task.cancel()
        self.sample()


def open_options() -> OpenOptions:
    """The queue's open options: the defaults (fsync on, background loops on)."""
    return OpenOptions()


async def submit_all(rt: WorkflowRuntime, run_ids: list[str], chunk: int = 100) -> None:
    """Submit one run per id, ``chunk`` submissions at a time (they share commits)."""
    for start in range(0, len(run_ids), chunk):
        await asyncio.gather(*(rt.submit(RunSpec(b"", run_id=r)) for r in run_ids[start:][:chunk]))


async def wait_done(q: Queue, jobs: int, limit_s: float) -> None:
    """Until ``jobs`` step jobs of the queue are done (polling its counters)."""
    deadline = time.perf_counter() + limit_s
    while q.stats(QUEUE).done < jobs:
        if time.perf_counter() > deadline:
            raise TimeoutError(f"{q.stats(QUEUE)} after {limit_s} s")
        await asyncio.sleep(0.002)


def check_succeeded(run_id: str, end: RunEnd | None) -> None:
    """Raise unless run ``run_id`` ended as succeeded."""
    if end is None or end.termination.status is not TerminalStatus.SUCCEEDED:
        raise RuntimeError(f"run {run_id!r} did not succeed: {end!r}")


async def bench_throughput(
    objects: ObjectStore | Path,
    runs: int,
    steps: int,
    concurrency: int,
    counted: FaultyObjectStore | None = None,
) -> dict[str, float]:
    """Submit ``runs`` runs of ``steps`` steps, then drain them with one worker."""
    q = await Queue.open(objects, open_options())
    try:
        runner = NoopChain(steps)
        rt = WorkflowRuntime(
            q, runner, options=RuntimeOptions(QUEUE, max_concurrent_steps=concurrency)
        )
        run_ids = [f"run-{i:06d}" for i in range(runs)]
        t0 = time.perf_counter()
        await submit_all(rt, run_ids)
        submit_s = time.perf_counter() - t0
        writes0 = counted.calls["create"] + counted.calls["put"] if counted else 0
        with Sampler() as sampler:
            cpu0 = time.process_time()
            t0 = time.perf_counter()
            worker = rt.spawn()
            try:
                await wait_done(q, runs * steps, limit_s=600)
                elapsed = time.perf_counter() - t0
                cpu = time.process_time() - cpu0
                writes = counted.calls["create"] + counted.calls["put"] - writes0 if counted else 0
            finally:
                await worker.shutdown()
        for r in run_ids[:: max(1, runs // 20)] + run_ids[-1:]:
            check_succeeded(r, await rt.wait(r))
        if runner.ran != runs * steps:
            raise RuntimeError(f"ran {runner.ran} steps, expected {runs * steps}")
    finally:
        await q.close()
    transitions = runs * steps
    figures = {
        "steps_per_s": round(transitions / elapsed, 1),
        "cpu_ms_per_step": round(cpu * 1000 / transitions, 4),
        "submit_runs_per_s": round(runs / submit_s, 1),
        "peak_threads": sampler.peak_threads,
    }
    if sampler.peak_os_threads:
        figures["peak_os_threads"] = sampler.peak_os_threads
    if counted is not None:
        figures["puts_per_transition"] = round(writes / transitions, 4)
    return figures


async def timed_runs(rt: WorkflowRuntime, n: int, prefix: str) -> list[float]:
    """Seconds from submit to outcome of ``n`` runs, one at a time."""
    out = []
    for i in range(n):
        run_id = f"{prefix}-{i:06d}"
        t0 = time.perf_counter()
        await rt.submit(RunSpec(b"", run_id=run_id))
        end = await rt.wait(run_id)
        out.append(time.perf_counter() - t0)
        check_succeeded(run_id, end)
    return out


def pct(sorted_values: list[float], p: float) -> float:
    """The ``p``-th percentile (nearest rank) of ``sorted_values``, in ms."""
    i = min(len(sorted_values) - 1, max(0, round(p / 100 * len(sorted_values)) - 1))
    return round(sorted_values[i] * 1000, 3)


async def bench_latency(
    path: Path, runs: int, long_steps: int, long_repeats: int
) -> dict[str, float]:
    """Sequential one-step runs (submit -> outcome), then ``long_repeats`` runs of
    ``long_steps`` steps, one at a time (the median one counts)."""
    q = await Queue.open(path, open_options())
    try:
        rt = WorkflowRuntime(q, NoopChain(1), options=RuntimeOptions(QUEUE))
        worker = rt.spawn()
        try:
            await timed_runs(rt, min(20, runs), "warmup")
            lat = sorted(await timed_runs(rt, runs, "one"))
        finally:
            await worker.shutdown()
        rt_long = WorkflowRuntime(q, NoopChain(long_steps), options=RuntimeOptions(QUEUE))
        worker = rt_long.spawn()
        try:
            longs = sorted(await timed_runs(rt_long, long_repeats, "long"))
            long_s = longs[len(longs) // 2]  # the median run
        finally:
            await worker.shutdown()
    finally:
        await q.close()
    return {
        "one_step_p50_ms": pct(lat, 50),
        "one_step_p95_ms": pct(lat, 95),
        "one_step_p99_ms": pct(lat, 99),
        "one_step_mean_ms": round(sum(lat) / len(lat) * 1000, 3),
        "ms_per_sequential_step": round(long_s * 1000 / long_steps, 4),
    }


async def write_floor_ms(path: Path, n: int) -> float:
    """Median ms of ``n`` sequential awaited creates of a 400-byte object."""
    objects = LocalObjectStore(path)
    times = []
    for i in range(n):
        t0 = time.perf_counter()
        await objects.create(f"floor/{i:08d}", b"x" * 400)
        times.append(time.perf_counter() - t0)
    await objects.close()
    return pct(sorted(times), 50)


def peak_rss_mb() -> float:
    """Peak resident set size of the process so far, in MiB."""
    maxrss_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux
    return round(maxrss_kib / 1024, 1)


async def bench_local(quick: bool, figures: dict[str, Any]) -> None:
    runs, steps = (20, 5) if quick else (500, 10)
    seq_runs, long_steps = (20, 20) if quick else (200, 100)
    concurrencies = (64,) if quick else (16, 64, 256)
    tmp = Path(tempfile.mkdtemp(prefix="durable-bench-steps-"))
    try:
        best: dict[str, float] | None = None
        for c in concurrencies:
            r = await bench_throughput(tmp / f"throughput-c{c}", runs, steps, c)
            print(f"local throughput {runs}x{steps} concurrency={c:4} {r}", file=sys.stderr)
            for k, v in r.items():
                figures[f"c{c}_{k}"] = v
            if best is None or r["steps_per_s"] > best["steps_per_s"]:
                best = {**r, "best_max_concurrent_steps": c}
        assert best is not None
        figures.update({"runs": runs, "steps_per_run": steps, **best})
        figures["peak_threads"] = max(figures[f"c{c}_peak_threads"] for c in concurrencies)
        if any(f"c{c}_peak_os_threads" in figures for c in concurrencies):
            figures["peak_os_threads"] = max(
                figures.get(f"c{c}_peak_os_threads", 0) for c in concurrencies
            )
        r = await bench_latency(tmp / "latency", seq_runs, long_steps, 1 if quick else 3)
        r["write_floor_ms"] = await write_floor_ms(tmp / "floor", 50 if quick else 300)
        print(f"local latency {seq_runs} x 1 step, {long_steps}-step runs {r}", file=sys.stderr)
        figures.update(r)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


async def bench_cloud(backend: str, quick: bool, figures: dict[str, Any]) -> None:
    """``throughput`` on ``backend``'s emulator behind a 20 ms round trip."""
    from durable.store.objects import open_object_store
    from durable.testing.cloud import new_bucket, storage_options
    from durable.testing.delay_proxy import DelayProxy

    runs, steps = (20, 5) if quick else (100, 10)
    concurrencies = (64,) if quick else (64, 256)
    opts = storage_options(backend)
    target = opts.get("endpoint_url") or opts["connection_string"].split("BlobEndpoint=")[1]
    port = int(target.split("://", 1)[1].split("/", 1)[0].rsplit(":", 1)[1])
    best: dict[str, float] | None = None
    async with DelayProxy(port, delay=0.010) as proxy:
        for c in concurrencies:
            url, options = await new_bucket(backend, endpoint=proxy.url)
            counted = FaultyObjectStore(await open_object_store(url, options))
            try:
                r = await bench_throughput(counted, runs, steps, c, counted=counted)
            finally:
                await counted.close()
            print(f"{backend} rtt20 {runs}x{steps} concurrency={c:4} {r}", file=sys.stderr)
            for k, v in r.items():
                figures[f"{backend}_rtt20_c{c}_{k}"] = v
            if best is None or r["steps_per_s"] > best["steps_per_s"]:
                best = {**r, "best_max_concurrent_steps": c}
    assert best is not None
    figures.update({f"{backend}_rtt20_{k}": v for k, v in best.items()})
    figures.update({f"{backend}_rtt20_runs": runs, f"{backend}_rtt20_steps_per_run": steps})


async def main(argv: list[str]) -> dict[str, Any]:
    """Run the benchmark and return its figures."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="tiny sizes, for CI smoke tests")
    p.add_argument("--backend", choices=["local", "s3", "gcs", "azure"], default="local")
    args = p.parse_args(argv)
    figures: dict[str, Any] = {"quick": args.quick}
    if args.backend == "local":
        await bench_local(args.quick, figures)
    else:
        await bench_cloud(args.backend, args.quick, figures)
    figures["peak_rss_mb"] = peak_rss_mb()
    return figures


if __name__ == "__main__":
    print(json.dumps(asyncio.run(main(sys.argv[1:]))))
