"""Log write latency: the segment medium's append + fdatasync vs today's create.

    python -m benchmarks.bench_segments [--quick]

Per durable log write of a 1 KiB log object, medians and p90 in ms, all in
one run on one disk, interleaved round by round so that both see the same
noise:

- ``raw``: the system calls alone, in this thread: ``os.write`` +
  ``os.fdatasync`` on an append-only file, against temp file + ``fsync`` +
  ``os.link`` + unlink + directory ``fsync`` (what `LocalObjectStore.create`
  does).
- ``store``: ``create("log/<seq>")`` through `SegmentObjectStore` (claimed)
  and through `LocalObjectStore`, each in a worker thread as the log calls it.
- ``commit``: one awaited one-key `LogWriter.commit` at a time, on each.
- ``disk``: how one durable write of the same bytes may be made on this
  file system, interleaved write by write: ``append_fdatasync`` (``write``
  to an ``O_APPEND`` file, then ``fdatasync``), ``append_dsync`` (one
  ``write`` to an ``O_APPEND | O_DSYNC`` file: what the segment store does)
  and ``prealloc_dsync`` (``pwrite`` into a file whose blocks and size were
  set beforehand with ``posix_fallocate``, ``O_DSYNC``). An append changes
  the file's size, so ext4 commits its journal at every sync; a write
  inside preallocated space does not: the floor a medium that writes into
  preallocated segments could reach (its fencing could then no longer rest
  on ``O_APPEND``'s order; see benchmarks/README.md).

The last line of output is one JSON object with every figure.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import secrets
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

from durable.store.log import LogOptions, LogWriter, WriteBatch
from durable.store.objects import LocalObjectStore, SegmentObjectStore

BODY = os.urandom(1024)


def _pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return round(xs[min(len(xs) - 1, int(q * len(xs)))] * 1000, 3)


def _raw(root: Path, n: int) -> tuple[list[float], list[float]]:
    fd = os.open(root / "append.seg", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    objects = root / "objects"
    objects.mkdir()
    dfd = os.open(objects, os.O_RDONLY | os.O_DIRECTORY)
    append, create = [], []
    try:
        for i in range(n):
            t = time.perf_counter()
            os.write(fd, BODY)
            os.fdatasync(fd)
            append.append(time.perf_counter() - t)
            t = time.perf_counter()
            tmp = objects / f".tmp-{secrets.token_hex(8)}"
            with open(tmp, "xb") as f:
                f.write(BODY)
                f.flush()
                os.fsync(f.fileno())
            os.link(tmp, objects / f"{i:020d}")
            os.unlink(tmp)
            os.fsync(dfd)
            create.append(time.perf_counter() - t)
    finally:
        os.close(fd)
        os.close(dfd)
    return append, create


def _disk(root: Path, n: int) -> dict[str, list[float]]:
    """Per write, the seconds of each way to make it durable (see the docstring)."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC
    plain = os.open(root / "plain.seg", flags | os.O_APPEND, 0o644)
    dsync = os.open(root / "dsync.seg", flags | os.O_APPEND | os.O_DSYNC, 0o644)
    pre = os.open(root / "pre.seg", flags | os.O_DSYNC, 0o644)
    os.posix_fallocate(pre, 0, (n + 1) * len(BODY))
    os.fsync(pre)
    times: dict[str, list[float]] = {
        "append_fdatasync": [],
        "append_dsync": [],
        "prealloc_dsync": [],
    }
    try:
        for i in range(n):
            t = time.perf_counter()
            os.write(plain, BODY)
            os.fdatasync(plain)
            times["append_fdatasync"].append(time.perf_counter() - t)
            t = time.perf_counter()
            os.write(dsync, BODY)
            times["append_dsync"].append(time.perf_counter() - t)
            t = time.perf_counter()
            os.pwrite(pre, BODY, i * len(BODY))
            times["prealloc_dsync"].append(time.perf_counter() - t)
    finally:
        for fd in (plain, dsync, pre):
            os.close(fd)
    return times


async def _timed(call: Callable[[], Awaitable[object]]) -> float:
    t = time.perf_counter()
    await call()
    return time.perf_counter() - t


async def _stores(root: Path, n: int) -> tuple[list[float], list[float]]:
    seg = SegmentObjectStore(root / "seg")
    await seg.claim_log()
    local = LocalObjectStore(root / "local")
    a, c = [], []
    for i in range(1, n + 1):
        name = f"log/{i:020d}"
        a.append(await _timed(lambda: seg.create(name, BODY)))  # noqa: B023
        c.append(await _timed(lambda: local.create(name, BODY)))  # noqa: B023
    await seg.close()
    return a, c


async def _commits(root: Path, n: int) -> tuple[list[float], list[float]]:
    opts = LogOptions(checkpoint_on_close=False)
    ws = await LogWriter.open(SegmentObjectStore(root / "wseg"), opts)
    wl = await LogWriter.open(LocalObjectStore(root / "wlocal"), opts)
    a, c = [], []
    for i in range(n):
        key = b"k%d" % (i % 64)
        a.append(await _timed(lambda: ws.commit(WriteBatch().put(key, BODY))))  # noqa: B023
        c.append(await _timed(lambda: wl.commit(WriteBatch().put(key, BODY))))  # noqa: B023
    await ws.close()
    await wl.close()
    return a, c


def main() -> None:
    """Run every measurement and print the table and the JSON figures."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="50 writes each instead of 500")
    args = parser.parse_args()
    n = 50 if args.quick else 500
    figures: dict[str, object] = {"quick": args.quick, "writes": n}
    with tempfile.TemporaryDirectory(dir=os.environ.get("BENCH_DIR")) as tmp:
        root = Path(tmp)
        (root / "raw").mkdir()
        for label, (append, create) in (
            ("raw", _raw(root / "raw", n)),
            ("store", asyncio.run(_stores(root, n))),
            ("commit", asyncio.run(_commits(root, n))),
        ):
            for what, xs in (("append", append), ("create", create)):
                figures[f"{label}_{what}_p50_ms"] = _pct(xs, 0.5)
                figures[f"{label}_{what}_p90_ms"] = _pct(xs, 0.9)
            figures[f"{label}_speedup_p50"] = round(
                statistics.median(create) / statistics.median(append), 2
            )
            print(
                f"{label:7} append+fdatasync p50 {figures[f'{label}_append_p50_ms']:.3f} ms "
                f"(p90 {figures[f'{label}_append_p90_ms']:.3f})   create p50 "
                f"{figures[f'{label}_create_p50_ms']:.3f} ms "
                f"(p90 {figures[f'{label}_create_p90_ms']:.3f})   "
                f"x{figures[f'{label}_speedup_p50']}",
                file=sys.stderr,
            )
        (root / "disk").mkdir()
        disk = _disk(root / "disk", n)
        for mode, xs in disk.items():
            figures[f"disk_{mode}_p50_ms"] = _pct(xs, 0.5)
            figures[f"disk_{mode}_p90_ms"] = _pct(xs, 0.9)
        print(
            "disk    "
            + "   ".join(f"{mode} p50 {figures[f'disk_{mode}_p50_ms']:.3f} ms" for mode in disk),
            file=sys.stderr,
        )
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
