"""Where the time of one sequential step goes, on the local store.

    python -m benchmarks.profile_step [--quick] [--steps N]

Runs one workflow of N no-op steps (default 200; 50 with ``--quick``) on
``Engine(<temp dir>)`` (the segment log medium) twice: first plainly, for
the wall time per step, then under `cProfile` (the event loop's thread;
a run going step by step has its log appends and ``fdatasync`` made on
that thread, `durable.store.objects.segments.INLINE_APPEND_MAX`, where
they show as the ``disk`` layer; one made in a worker thread shows as
time waiting in ``select``). It prints:

- the wall time per step, and the loop thread's CPU time per step (the
  kernel's work for the sync included);
- the split of the profiled time per step: the disk, waiting in
  ``select``, and the loop's own work by layer (engine and decorators, the
  store, codecs, asyncio itself);
- one ``os.write`` + ``os.fdatasync`` on the same disk (p50), the floor;
- the 15 functions with the most own time.

The last line of output is one JSON object with the figures.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import json
import os
import pstats
import statistics
import sys
import tempfile
import time
from pathlib import Path

import durable
from durable import Engine

LAYERS = (
    ("disk", ("posix.fdatasync", "posix.write", "posix.fstat")),
    ("select", ("select.epoll", "selectors.py")),
    ("engine", ("durable/decorators", "durable/engine", "durable/cluster")),
    ("store", ("durable/store",)),
    ("codecs", ("msgpack", "cloudpickle", "pickle", "zlib", "struct")),
    ("asyncio", ("asyncio",)),
)


@durable.step
async def noop(i: int) -> int:
    """One step that does nothing."""
    return i


@durable.workflow
async def chain(steps: int) -> int:
    """``steps`` steps, one after the other."""
    total = 0
    for i in range(steps):
        total += await noop(i)
    return total


async def run_once(
    path: Path, steps: int, tag: str, profiler: cProfile.Profile | None = None
) -> tuple[float, float]:
    """Wall and loop-thread CPU seconds of one ``steps``-step run, from its
    start to its result (profiled by ``profiler`` if given)."""
    async with Engine(path):
        await (await chain.options(run_id=f"warm-{tag}").start(2)).result()
        if profiler is not None:
            profiler.enable()
        wall, cpu = time.perf_counter(), time.thread_time()
        handle = await chain.options(run_id=f"run-{tag}").start(steps)
        assert await handle.result() == steps * (steps - 1) // 2
        wall, cpu = time.perf_counter() - wall, time.thread_time() - cpu
        if profiler is not None:
            profiler.disable()
    return wall, cpu


def layer_of(filename: str, name: str) -> str:
    where = f"{filename}:{name}"
    for layer, marks in LAYERS:
        if any(m in where for m in marks):
            return layer
    return "other"


def fdatasync_p50_ms(root: Path, n: int = 200) -> float:
    fd = os.open(root / "floor.seg", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    times = []
    try:
        for _ in range(n):
            t = time.perf_counter()
            os.write(fd, b"x" * 256)
            os.fdatasync(fd)
            times.append(time.perf_counter() - t)
    finally:
        os.close(fd)
    return round(statistics.median(times) * 1000, 3)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="50 steps")
    parser.add_argument("--steps", type=int, default=None, help="steps in the run (default 200)")
    args = parser.parse_args()
    steps = args.steps or (50 if args.quick else 200)
    with tempfile.TemporaryDirectory(prefix="durable-profile-") as tmp:
        root = Path(tmp)
        wall, cpu = asyncio.run(run_once(root / "plain", steps, "plain"))
        profiler = cProfile.Profile()
        profiled, _ = asyncio.run(run_once(root / "profiled", steps, "profiled", profiler))
        floor = fdatasync_p50_ms(root)
    stats = pstats.Stats(profiler)
    raw = stats.stats  # type: ignore[attr-defined]
    by_layer: dict[str, float] = {}
    rows = []
    for (filename, _line, name), (_cc, _nc, tottime, _ct, _callers) in raw.items():
        layer = layer_of(filename, name)
        by_layer[layer] = by_layer.get(layer, 0.0) + tottime
        rows.append((tottime, f"{Path(filename).name}:{name}", layer))
    total = sum(by_layer.values()) or 1.0
    per_step = {k: round(v / steps * 1000, 4) for k, v in sorted(by_layer.items())}
    print(f"{steps} sequential steps on Engine(<temp dir>)")
    print(f"wall ms per step: {wall / steps * 1000:.3f} (loop CPU {cpu / steps * 1000:.3f})")
    print(f"one append + fdatasync on this disk, p50: {floor:.3f} ms")
    print(
        "profiled ms per step, by layer (disk = the log's write and sync on this thread; "
        "select = waiting, for a worker thread's write among others):"
    )
    for layer, ms in sorted(per_step.items(), key=lambda kv: -kv[1]):
        print(f"  {layer:8s} {ms:8.4f}  {by_layer[layer] / total:6.1%}")
    print("functions with the most own time (ms per step):")
    top = sorted(rows, reverse=True)[:15]
    for tottime, where, layer in top:
        print(f"  {tottime / steps * 1000:8.4f}  {layer:8s} {where}")
    figures = {
        "steps": steps,
        "wall_ms_per_step": round(wall / steps * 1000, 4),
        "loop_cpu_ms_per_step": round(cpu / steps * 1000, 4),
        "profiled_ms_per_step": round(profiled / steps * 1000, 4),
        "fdatasync_p50_ms": floor,
        **{f"{layer}_ms_per_step": ms for layer, ms in per_step.items()},
    }
    print(json.dumps(figures))


if __name__ == "__main__":
    sys.exit(main())
