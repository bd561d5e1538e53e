"""Executors (issue 16, point 4): CPU-bound steps on a Dask cluster, and the
cost of sending a step there.

    python -m benchmarks.bench_executor [--quick]

Every engine runs on its own local temp directory (``Engine(path)``,
default options: fsync on); the Dask clusters start before the timing
(their start-up is reported apart) with ``allowed-failures`` 0.

- ``cpu``: one workflow gathers ``cpu_steps`` calls of a step that burns
  ``cpu_step_ms`` of pure-Python CPU (a busy loop until the thread's CPU
  time has grown by that much: under a busy host it does the same work,
  instead of ending early as a wall-clock loop would). *Inline* runs them
  in the engine's process, one after the other on its event loop (the
  GIL); *dask* sends them to a ``LocalCluster(processes=True,
  n_workers=2, threads_per_worker=1)``. Start to result, the best of
  ``rounds`` each after a warm-up run (one engine, its rounds alternating
  inline, dask, Dask alone); ``cpu_dask_speedup`` is inline's
  time over dask's (target: at least 1.4 on 2 cores). ``cpu_plain_dask_s``:
  the same bodies with Dask alone (``client.map``, no engine) on the same
  cluster, for comparison.
- ``noop``: one workflow of ``noop_steps`` no-op steps one after the
  other, inline and on an in-process ``LocalCluster(processes=False)``:
  ms per step (the median of ``rounds``); ``noop_dask_overhead_ms_per_step``
  is dask's minus inline's (target: under 5 ms).
  ``noop_plain_dask_ms_per_task``: sequential no-op tasks with Dask alone
  (``await client.submit``) on the same cluster: the floor that Dask's own
  message batching sets (a client sends to the scheduler at most every
  10 ms, the scheduler to a worker every 5 ms).

The targets are printed with PASS/FAIL on stderr, not asserted. Progress
goes to stderr; the last line of stdout is one JSON object with every
figure.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import dask.config
import distributed

from benchmarks.bench_steps import peak_rss_mb
from durable import Engine, step, workflow

#: Targets of issue 16, point 4.
SPEEDUP_TARGET = 1.4
OVERHEAD_TARGET_MS = 5.0


def burn(ms: float) -> int:
    """Pure-Python CPU work until this thread has used ``ms`` more CPU time."""
    end = time.thread_time() + ms / 1000
    n = 0
    while time.thread_time() < end:
        for i in range(500):
            n += i * i % 7
    return n


async def _cpu(ms: float) -> int:
    return burn(ms)


async def _noop(i: int) -> int:
    return i


def noop_task(i: int) -> int:
    """A no-op Dask task (the plain-Dask comparison)."""
    return i


cpu_inline = step(name="bench.cpu_inline")(_cpu)
cpu_dask = step(name="bench.cpu_dask", executor="dask")(_cpu)
noop_inline = step(name="bench.noop_inline")(_noop)
noop_dask = step(name="bench.noop_dask", executor="dask")(_noop)


@workflow(name="bench.gathered")
async def gathered(on_dask: bool, steps: int, ms: float) -> int:
    """``steps`` CPU steps gathered: all in flight at once."""
    call = cpu_dask if on_dask else cpu_inline
    return len(await asyncio.gather(*(call(ms) for _ in range(steps))))


@workflow(name="bench.sequential")
async def sequential(on_dask: bool, steps: int) -> int:
    """``steps`` no-op steps, one after the other."""
    call = noop_dask if on_dask else noop_inline
    total = 0
    for i in range(steps):
        total += await call(i)
    return total


async def plain_dask(client: distributed.Client, fn: Any, args: list[Any], gather: bool) -> float:
    """Seconds to run ``fn(arg)`` for each of ``args`` on the cluster with Dask
    alone (no engine, no journal): all submitted at once when ``gather``,
    else one after the other."""
    t0 = time.perf_counter()
    if gather:
        await client.gather(client.map(fn, args, pure=False))
    else:
        for a in args:
            await client.submit(fn, a, pure=False)
    return time.perf_counter() - t0


def log(msg: str) -> None:
    """One progress line on stderr."""
    print(msg, file=sys.stderr, flush=True)


async def timed(run_id: str, wf: Any, *args: Any) -> tuple[float, Any]:
    """Seconds from ``start`` to result of one run of ``wf(*args)``, and its result."""
    t0 = time.perf_counter()
    handle = await wf.options(run_id=run_id).start(*args)
    result = await handle.result()
    return time.perf_counter() - t0, result


async def bench_cpu(
    path: Path, client: distributed.Client, steps: int, ms: float, rounds: int
) -> dict[str, list[float]]:
    """Seconds of each round of ``gathered``, inline, on dask and with Dask
    alone; the three alternate, round by round, so a busy moment of the
    host does not fall on one of them only."""
    times: dict[str, list[float]] = {"inline": [], "dask": [], "plain": []}
    async with Engine(path, executors={"dask": client}):
        for on_dask in (False, True):
            await timed(f"warmup-{on_dask}", gathered, on_dask, 2, ms)
        for r in range(rounds):
            for on_dask, name in ((False, "inline"), (True, "dask")):
                elapsed, n = await timed(f"{name}-{r}", gathered, on_dask, steps, ms)
                if n != steps:
                    raise RuntimeError(f"{name} round {r} ran {n} steps, expected {steps}")
                times[name].append(elapsed)
            times["plain"].append(await plain_dask(client, burn, [ms] * steps, gather=True))
    return times


async def bench_noop(
    path: Path, client: distributed.Client, steps: int, rounds: int
) -> dict[str, list[float]]:
    """Ms per step of each round of ``sequential``, inline, on dask and with
    Dask alone (ms per task), alternating as in `bench_cpu`."""
    per_step: dict[str, list[float]] = {"inline": [], "dask": [], "plain": []}
    async with Engine(path, executors={"dask": client}):
        for on_dask in (False, True):
            await timed(f"warmup-{on_dask}", sequential, on_dask, 5)
        for r in range(rounds):
            for on_dask, name in ((False, "inline"), (True, "dask")):
                elapsed, total = await timed(f"{name}-{r}", sequential, on_dask, steps)
                if total != steps * (steps - 1) // 2:
                    raise RuntimeError(f"{name} round {r} returned {total}")
                per_step[name].append(elapsed * 1000 / steps)
            plain = await plain_dask(client, noop_task, list(range(steps)), gather=False)
            per_step["plain"].append(plain * 1000 / steps)
    return per_step


async def main(argv: list[str]) -> dict[str, Any]:
    """Run the benchmark and return its figures."""
    p = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    p.add_argument("--quick", action="store_true", help="tiny sizes, for CI smoke tests")
    args = p.parse_args(argv)
    quick: bool = args.quick
    cpu_steps, cpu_ms = (8, 20.0) if quick else (40, 50.0)
    noop_steps = 20 if quick else 100
    rounds = 1 if quick else 3
    figures: dict[str, Any] = {
        "quick": quick,
        "cpu_steps": cpu_steps,
        "cpu_step_ms": cpu_ms,
        "noop_steps": noop_steps,
        "rounds": rounds,
    }
    dask.config.set({"distributed.scheduler.allowed-failures": 0})
    tmp = Path(tempfile.mkdtemp(prefix="durable-bench-executor-"))
    try:
        t0 = time.perf_counter()
        async with (
            distributed.LocalCluster(
                processes=True,
                n_workers=2,
                threads_per_worker=1,
                host="127.0.0.1",
                dashboard_address=":0",
                asynchronous=True,
            ) as cluster,
            distributed.Client(cluster, asynchronous=True) as client,
        ):
            figures["process_cluster_start_s"] = round(time.perf_counter() - t0, 3)
            cpu = await bench_cpu(tmp / "cpu", client, cpu_steps, cpu_ms, rounds)
        for name, times in cpu.items():
            log(f"cpu {cpu_steps} x {cpu_ms} ms, {name}: {[round(t, 3) for t in times]} s")
        figures["cpu_inline_s"] = round(min(cpu["inline"]), 4)
        figures["cpu_dask_s"] = round(min(cpu["dask"]), 4)
        figures["cpu_dask_speedup"] = round(min(cpu["inline"]) / min(cpu["dask"]), 3)
        figures["cpu_plain_dask_s"] = round(min(cpu["plain"]), 4)
        figures["cpu_plain_dask_speedup"] = round(min(cpu["inline"]) / min(cpu["plain"]), 3)

        async with (
            distributed.LocalCluster(
                processes=False,
                n_workers=2,
                threads_per_worker=1,
                dashboard_address=":0",
                asynchronous=True,
            ) as cluster,
            distributed.Client(cluster, asynchronous=True) as client,
        ):
            noop = await bench_noop(tmp / "noop", client, noop_steps, rounds)
        for name, ms in noop.items():
            log(f"noop x {noop_steps} sequential, {name}: {[round(t, 3) for t in ms]} ms each")
        inline_ms, dask_ms = statistics.median(noop["inline"]), statistics.median(noop["dask"])
        figures["noop_inline_ms_per_step"] = round(inline_ms, 3)
        figures["noop_dask_ms_per_step"] = round(dask_ms, 3)
        figures["noop_dask_overhead_ms_per_step"] = round(dask_ms - inline_ms, 3)
        figures["noop_plain_dask_ms_per_task"] = round(statistics.median(noop["plain"]), 3)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    figures["peak_rss_mb"] = peak_rss_mb()
    speedup = figures["cpu_dask_speedup"]
    overhead = figures["noop_dask_overhead_ms_per_step"]
    log(
        f"{'PASS' if speedup >= SPEEDUP_TARGET else 'FAIL'} cpu speedup on 2 worker "
        f"processes {speedup}x (target >= {SPEEDUP_TARGET}x)"
    )
    log(
        f"{'PASS' if overhead < OVERHEAD_TARGET_MS else 'FAIL'} dask overhead per no-op step "
        f"{overhead} ms (target < {OVERHEAD_TARGET_MS} ms)"
    )
    return figures


if __name__ == "__main__":
    print(json.dumps(asyncio.run(main(sys.argv[1:]))))
