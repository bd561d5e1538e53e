"""Durable streams (issue 19 point 7): step writes read live by a client process.

    python -m benchmarks.bench_streams [--quick]

A *worker* process (``Engine(store)`` on a local temp directory, fsync on)
runs the runs; this process is a *client* (``Engine(store, role="client")``):
it starts `RUNS` runs of a workflow whose one step writes `RATE` values per
second to a stream for `SECONDS` seconds (``await durable.write_stream``),
and reads every run's stream at once (``handle.read_stream``) until the
runs end. Each value carries its index and the writer's ``time.monotonic()``
(one clock for every process of the host), so the reader measures
write-to-read latency and checks that every value arrives, once, in order.

Figures: ``values``, ``values_per_s`` (values read / seconds from the
first write to the last read), ``write_to_read_p50_ms`` / ``p99_ms``,
``log_writes`` (log objects the worker wrote while the runs ran: its
`LogStats`, asked over its stdin) and ``log_writes_per_value``,
``in_order`` (every value once, in order). Targets: in order, p50 at most
50 ms, at most 0.1 log writes per value.

``--quick`` (the smoke test): 10 runs for 2 s. Progress goes to stderr; the
last line of stdout is one JSON object with every figure.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import durable
from durable.decorators.streams import LINGER

RATE = 100  # values per second per run
RUNS = 20
SECONDS = 10.0


@durable.step(name="bench_streams.produce")
async def produce(rate: int, seconds: float) -> int:
    """Write ``rate`` values a second for ``seconds`` seconds."""
    count = round(rate * seconds)
    start = time.monotonic()
    for i in range(count):
        delay = start + i / rate - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)  # the pace of a model producing tokens
        await durable.write_stream("out", [i, time.monotonic()])
    return count


@durable.workflow(name="bench_streams.run")
async def stream_run(rate: int, seconds: float) -> int:
    """One run: one step that streams."""
    return await produce(rate, seconds)


def say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


async def worker(store: str) -> None:
    """The worker process: own the store and run the runs; answer ``stats``
    lines on stdin with the log writer's counters; exit at EOF."""
    async with durable.Engine(store) as engine:
        print("ready", flush=True)
        while line := await asyncio.to_thread(sys.stdin.readline):
            if line.strip() == "stats":
                stats = engine.queue.writer.stats
                print(json.dumps({"log_objects": stats.log_objects, "commits": stats.commits}))
                sys.stdout.flush()


async def ask(proc: asyncio.subprocess.Process, line: str) -> str:
    assert proc.stdin is not None
    assert proc.stdout is not None
    proc.stdin.write(line.encode() + b"\n")
    await proc.stdin.drain()
    return (await proc.stdout.readline()).decode().strip()


async def read(handle: durable.WorkflowHandle[int], latencies: list[float]) -> tuple[int, bool]:
    """Read a run's stream to its end: how many values, and whether each
    came once, in order."""
    expected, in_order = 0, True
    async for item in handle.read_stream("out"):
        now = time.monotonic()
        index, written = item
        latencies.append((now - written) * 1000)
        in_order = in_order and index == expected
        expected += 1
    return expected, in_order


async def bench(store: Path, runs: int, seconds: float) -> dict[str, Any]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "benchmarks.bench_streams",
        "--worker",
        str(store),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )
    try:
        assert proc.stdout is not None
        assert proc.stdin is not None
        assert (await proc.stdout.readline()).strip() == b"ready", "the worker did not start"
        async with durable.Engine(store, role="client"):
            before = json.loads(await ask(proc, "stats"))
            began = time.monotonic()
            handles = [await stream_run.start(RATE, seconds) for _ in range(runs)]
            latencies: list[float] = []
            read_all = await asyncio.gather(*(read(h, latencies) for h in handles))
            ended = time.monotonic()
            results = [await h.result() for h in handles]
            after = json.loads(await ask(proc, "stats"))
        proc.stdin.close()
        await asyncio.wait_for(proc.wait(), 60)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    values = sum(n for n, _ in read_all)
    expected = round(RATE * seconds) * runs
    in_order = all(ok for _, ok in read_all) and values == expected == sum(results)
    writes = after["log_objects"] - before["log_objects"]
    latencies.sort()
    return {
        "runs": runs,
        "rate_per_run": RATE,
        "seconds": seconds,
        "linger_ms": LINGER * 1000,
        "values": values,
        "values_per_s": round(values / (ended - began), 1),
        "write_to_read_p50_ms": round(statistics.median(latencies), 2),
        "write_to_read_p99_ms": round(
            latencies[min(len(latencies) - 1, len(latencies) * 99 // 100)], 2
        ),
        "log_writes": writes,
        "log_writes_per_value": round(writes / max(values, 1), 4),
        "in_order": in_order,
    }


def main(argv: list[str]) -> dict[str, Any]:
    """Run the benchmark and return its figures."""
    p = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    p.add_argument("--quick", action="store_true", help="tiny sizes, for CI smoke tests")
    p.add_argument("--worker", metavar="STORE", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.worker:
        asyncio.run(worker(args.worker))
        return {}
    runs, seconds = (10, 2.0) if args.quick else (RUNS, SECONDS)
    tmp = Path(tempfile.mkdtemp(prefix="durable-bench-streams-"))
    try:
        say(f"{runs} runs x {RATE} values/s for {seconds} s, read by a client process")
        figures = asyncio.run(bench(tmp / "store", runs, seconds))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    say(
        f"{figures['values']} values, {figures['values_per_s']}/s, write-to-read p50 "
        f"{figures['write_to_read_p50_ms']} ms p99 {figures['write_to_read_p99_ms']} ms, "
        f"{figures['log_writes_per_value']} log writes per value, in order: {figures['in_order']}"
    )
    return {"quick": bool(args.quick), **figures}


if __name__ == "__main__":
    figures = main(sys.argv[1:])
    if figures:
        print(json.dumps(figures))
