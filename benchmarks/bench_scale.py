"""Partitioned stores and a pool of worker processes (issue 15).

    python -m benchmarks.bench_scale [--quick] [--backend latency|s3 ...]
        [--workers 1,2,4] [--partitions 1,8,16]

For each backend, N worker processes (spawned) share one fresh store of P
partitions: each runs ``Engine(store, partitions=P)`` then
``engine.serve()`` (P = 1 is an unpartitioned store, ``Engine(store)``:
one owner, the others standbys, as before issue 15). The parent sends
them commands over pipes and stamps cross-process times with
``time.monotonic()`` (one clock for every process of the host). Every
process opens the store through its own `CountingStore` (object calls
counted by operation and by what they are for: ``log``, ``inbox``,
``ckpt``, control: ``member`` heartbeats, ``assignment`` table,
``owner_chain``, ``manifest``).

Backends:

- ``latency``: a shared local temp directory behind
  ``FaultyObjectStore(latency=0.02)`` in each process (every object call a
  20 ms round trip, as on a cloud store; no emulator CPU on the 2 cores),
  without the directory's host lock (liveness goes by the ttl, as on a
  bucket);
- ``s3``: moto behind `durable.testing.delay_proxy.DelayProxy` (10 ms
  each way, a 20 ms round trip), a new bucket per configuration; needs
  ``eval "$(.venv/bin/python scripts/emulators.py start s3)"``.

Per configuration (prefix ``<backend>_n<N>_p<P>_``):

- the workload: each process starts its share of ``runs`` runs of a
  workflow of ``steps`` no-op ``@step`` calls through its own engine
  (``chunk`` ``start`` calls at once; a run whose partition another process
  owns goes through that partition's inbox) and awaits each result; a
  warm-up round first; the best of ``rounds`` rounds counts.
  ``transitions_per_s`` (a transition is one journaled step), the object
  writes (PUT, create, DELETE) per transition by category
  (``log_writes_per_transition``, ``inbox_...``, ``control_...``,
  ``ckpt_...``, all: ``writes_per_transition``), ``cpu_ms_per_transition``
  (every process's CPU, ``os.times()``; not the emulator's),
  start-to-result ``p50_ms``/``p99_ms`` of the runs under that load;
- ``settle_s``: from spawning the processes until every partition is
  owned, balanced (max - min <= 1);
- idle, after the pacing had time to back off: object requests per second
  per process (mean over the processes): ``idle_requests_per_s_per_process``
  and by kind (``idle_control_...``, ``idle_inbox_...``, ``idle_log_...``);
- with N = 2, ``takeover_s``: kill -9 of the process owning more
  partitions (the owner, when P = 1), seconds until the other owns them
  all.

Targets (issue 15), printed with pass/fail on stderr, not asserted: P = 8
with N = 1 at least 0.9x P = 1 (``<backend>_p8_vs_p1_n1``); N = 2 at least
1.6x N = 1 at P = 8 on ``latency`` (``<backend>_n2_vs_n1_p8``); at most 0.05
log writes per transition (plus control traffic); takeover within ttl + 2
heartbeats.

``--quick`` (the smoke test): ``latency`` only, N in {1, 2} x P in {1, 8}
but not N = 2 with P = 1, small sizes, ttl 2 s and heartbeat 0.4 s, a short
idle window. The full run uses the `Engine` defaults (ttl 15 s, heartbeat
3 s, concurrency 8 per queue), so its idle and takeover figures are the
ones users get.

Progress goes to stderr; the last line of stdout is one JSON object with
every figure.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import multiprocessing
import os
import shutil
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from benchmarks.bench_decorators import chain
from benchmarks.bench_steps import pct
from benchmarks.multiproc import CountingStore, Meter, Proc, recv, until_first
from durable import Engine
from durable.cluster.manifest import partition_of
from durable.cluster.owner import DEFAULT_HEARTBEAT, DEFAULT_TTL
from durable.store.objects import LocalObjectStore, open_object_store

#: Request categories that are control traffic (membership and assignment).
CONTROL = frozenset({"member", "assignment", "owner_chain", "manifest"})
#: Request operations that write.
WRITES = ("put", "create", "delete")
#: Seconds the pool may take to settle (every partition owned, balanced).
SETTLE_LIMIT = 180.0


# ------------------------------------------------------------------- where


@dataclass(frozen=True)
class Where:
    """One store the processes of a configuration share."""

    backend: str  # "latency" or "s3"
    url: str  # a directory, or an s3:// URL
    options: dict[str, Any] = field(default_factory=dict)

    async def open(self) -> CountingStore:
        """This process's counting handle on the store."""
        if self.backend == "latency":
            return CountingStore(LocalObjectStore(self.url), latency=0.02, host_lock=False)
        inner = await open_object_store(self.url, self.options)
        return CountingStore(inner, latency=0.0, host_lock=False)


class ProxyThread:
    """A `DelayProxy` (20 ms round trip) to the S3 emulator, served by a
    thread of the parent (the children connect through it)."""

    def __init__(self) -> None:
        from durable.testing.cloud import storage_options
        from durable.testing.delay_proxy import DelayProxy

        target = storage_options("s3")["endpoint_url"]
        port = int(target.rsplit(":", 1)[1].split("/", 1)[0])
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.proxy = DelayProxy(port, delay=0.010)
        asyncio.run_coroutine_threadsafe(self.proxy.start(), self.loop).result()

    def new_store(self) -> Where:
        """A fresh bucket, reached through the proxy."""
        from durable.testing.cloud import new_bucket

        url, options = asyncio.run(new_bucket("s3", endpoint=self.proxy.url))
        return Where("s3", url, dict(options))

    def close(self) -> None:
        """Stop the proxy and its thread."""
        asyncio.run_coroutine_threadsafe(self.proxy.close(), self.loop).result()
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)


# ------------------------------------------------------------------- child


def _probes(partitions: int) -> list[str]:
    """One id per partition, that routes to it (`Engine.for_run`)."""
    found: dict[int, str] = {}
    i = 0
    while len(found) < partitions:
        found.setdefault(partition_of(f"probe-{i}", partitions), f"probe-{i}")
        i += 1
    return [found[p] for p in range(partitions)]


def _owned(engine: Engine, probes: list[str] | None) -> int:
    """How many partitions this process owns now (of an unpartitioned store: 1 or 0)."""
    if probes is None:
        return int(engine.owner)
    return sum(engine.for_run(probe).owner for probe in probes)


async def _load(prefix: str, runs: int, steps: int, chunk: int) -> dict[str, Any]:
    """Start ``runs`` runs (``chunk`` starts at once), await every result;
    the times, and each run's seconds from its start call to its result."""
    expected = steps * (steps - 1) // 2
    starting = asyncio.Semaphore(chunk)

    async def one(run_id: str) -> float:
        # Keyless starts, as user code writes them: the engine mints the id,
        # into a partition this process owns when it is a pool member (an
        # explicit id goes where it hashes, through its owner's inbox).
        async with starting:
            t = time.monotonic()
            handle = await chain.start(steps)
        if await handle.result() != expected:
            raise RuntimeError(f"run {handle.run_id} ({run_id}) returned a wrong result")
        return time.monotonic() - t

    t0 = time.monotonic()
    lat = await asyncio.gather(*(one(f"{prefix}-{i:05d}") for i in range(runs)))
    return {"t0": t0, "t1": time.monotonic(), "lat": lat}


async def _commands(
    engine: Engine, store: CountingStore, probes: list[str] | None, conn: Connection
) -> None:
    meter = Meter(store)
    while True:
        cmd, *args = await recv(conn)
        reply: Any = None
        if cmd == "stop":
            return
        if cmd == "owned":
            reply = _owned(engine, probes)
        elif cmd == "load":
            reply = await _load(*args)
        elif cmd == "meter_begin":
            meter.begin()
        elif cmd == "meter_end":
            reply = meter.end()
        elif cmd == "wait_all":  # until this process owns every partition
            await engine.wait_owner(True, timeout=args[0])
            reply = time.monotonic()
        else:
            raise ValueError(f"unknown command {cmd!r}")
        conn.send(reply)


async def _child(
    where: Where,
    partitions: int,
    timing: tuple[float, float],
    concurrency: int | None,
    conn: Connection,
) -> None:
    store = await where.open()
    ttl, heartbeat = timing
    engine = Engine(
        store,  # type: ignore[arg-type]
        partitions=None if partitions == 1 else partitions,
        ttl=ttl,
        heartbeat=heartbeat,
        concurrency=None if concurrency is None else {"workflows": concurrency},
    )
    async with engine:
        probes = None if partitions == 1 else _probes(partitions)
        conn.send(("ready", os.getpid()))
        commands = asyncio.create_task(_commands(engine, store, probes, conn))
        await until_first({commands, asyncio.create_task(engine.serve())})
    await store.close()


def child_main(
    where: Where,
    partitions: int,
    timing: tuple[float, float],
    concurrency: int | None,
    conn: Connection,
) -> None:
    """A spawned worker process: one `Engine` on the store, serving."""
    asyncio.run(_child(where, partitions, timing, concurrency, conn))


# ------------------------------------------------------------------ parent


def _per_transition(calls: collections.Counter[str], transitions: int) -> dict[str, float]:
    """Object writes per transition, by kind, from ``<category>_<op>`` counts."""
    kinds: collections.Counter[str] = collections.Counter()
    for key, n in calls.items():
        cat, op = key.rsplit("_", 1)
        if op in WRITES:
            kinds["control" if cat in CONTROL else cat] += n
            kinds["all"] += n
    out = {
        f"{k}_writes_per_transition": round(kinds[k] / transitions, 4)
        for k in ("log", "inbox", "control", "ckpt")
    }
    out["writes_per_transition"] = round(kinds["all"] / transitions, 4)
    return out


def _idle(replies: list[dict[str, Any]]) -> dict[str, float]:
    """Requests per second per process, mean over ``replies`` (`Meter.end`)."""
    kinds: collections.Counter[str] = collections.Counter()
    for reply in replies:
        for key, n in reply["by_category"].items():
            cat = key.rsplit("_", 1)[0]
            rate = n / reply["seconds"] / len(replies)
            kinds["control" if cat in CONTROL else cat] += rate
            kinds["all"] += rate
    out = {"idle_requests_per_s_per_process": round(kinds["all"], 3)}
    for k in ("control", "inbox", "log"):
        out[f"idle_{k}_requests_per_s_per_process"] = round(kinds[k], 3)
    return out


def run_config(
    ctx: Any,
    where: Where,
    n: int,
    p: int,
    sizes: dict[str, Any],
    log: Callable[[str], None],
) -> dict[str, Any]:
    """Every figure of one configuration: ``n`` processes on ``p`` partitions."""
    timing = sizes["timing"]
    spawned = time.monotonic()
    args = (where, p, timing, sizes["concurrency"])
    procs = [Proc(ctx, f"worker {i}", child_main, args) for i in range(n)]
    figures: dict[str, Any] = {}

    def all_call(*cmd: Any) -> list[Any]:
        live = [x for x in procs if x.proc.is_alive()]
        for x in live:
            x.send(*cmd)
        return [x.recv() for x in live]

    try:
        for x in procs:
            x.ready()
        want = 1 if p == 1 else p
        while True:
            owned = all_call("owned")
            if sum(owned) == want and (p == 1 or max(owned) - min(owned) <= 1):
                break
            if time.monotonic() - spawned > SETTLE_LIMIT:
                raise TimeoutError(f"n={n} p={p}: not settled in {SETTLE_LIMIT} s: {owned}")
            time.sleep(0.05)
        figures["settle_s"] = round(time.monotonic() - spawned, 3)

        runs, steps, chunk = sizes["runs"], sizes["steps"], sizes["chunk"]
        share = runs // n
        all_call("load", "warm", max(1, sizes["warm"] // n), steps, chunk)
        best: dict[str, Any] | None = None
        for r in range(sizes["rounds"]):
            all_call("meter_begin")
            for i, x in enumerate(procs):
                x.send("load", f"r{r}w{i}", share, steps, chunk)
            loads = [x.recv() for x in procs]
            meters = all_call("meter_end")
            transitions = share * n * steps
            seconds = max(x["t1"] for x in loads) - min(x["t0"] for x in loads)
            calls: collections.Counter[str] = collections.Counter()
            for m in meters:
                calls.update(m["by_category"])
            lat = sorted(v for x in loads for v in x["lat"])
            fig = {
                "runs": share * n,
                "steps_per_run": steps,
                "transitions_per_s": round(transitions / seconds, 1),
                "cpu_ms_per_transition": round(
                    sum(m["cpu_s"] for m in meters) * 1000 / transitions, 3
                ),
                "p50_ms": pct(lat, 50),
                "p99_ms": pct(lat, 99),
                **_per_transition(calls, transitions),
            }
            if best is None or fig["transitions_per_s"] > best["transitions_per_s"]:
                best = fig
        assert best is not None
        figures.update(best)

        time.sleep(sizes["idle_settle"])
        all_call("meter_begin")
        time.sleep(sizes["idle_window"])
        figures.update(_idle(all_call("meter_end")))

        if n == 2:
            owned = all_call("owned")
            victim = procs[0] if owned[0] >= owned[1] else procs[1]
            survivor = procs[1] if victim is procs[0] else procs[0]
            survivor.send("wait_all", SETTLE_LIMIT)
            killed = time.monotonic()
            victim.kill()
            figures["takeover_s"] = round(survivor.recv() - killed, 3)
        log(
            f"n={n} p={p}: {figures['transitions_per_s']} transitions/s, "
            f"{figures['cpu_ms_per_transition']} CPU ms each, log/inbox/control writes per "
            f"transition {figures['log_writes_per_transition']}/"
            f"{figures['inbox_writes_per_transition']}/"
            f"{figures['control_writes_per_transition']}, p50/p99 "
            f"{figures['p50_ms']}/{figures['p99_ms']} ms, settled in {figures['settle_s']} s, "
            f"idle {figures['idle_requests_per_s_per_process']} req/s per process "
            f"(control {figures['idle_control_requests_per_s_per_process']})"
            + (f", takeover {figures['takeover_s']} s" if "takeover_s" in figures else "")
        )
    finally:
        for x in reversed(procs):
            x.stop()
    return figures


def check_targets(backend: str, figures: dict[str, Any], ttl: float, hb: float) -> list[str]:
    """The issue's targets for ``backend`` as ``PASS``/``FAIL`` lines; adds the
    ratios to ``figures``."""
    lines = []

    def tps(n: int, p: int) -> float | None:
        value = figures.get(f"{backend}_n{n}_p{p}_transitions_per_s")
        return float(value) if value is not None else None

    def target(ok: bool, what: str) -> None:
        lines.append(f"{'PASS' if ok else 'FAIL'} {backend}: {what}")

    base, p8, n2 = tps(1, 1), tps(1, 8), tps(2, 8)
    if base and p8:
        ratio = p8 / base
        figures[f"{backend}_p8_vs_p1_n1"] = round(ratio, 3)
        target(ratio >= 0.9, f"P=8 N=1 at {ratio:.2f}x P=1 N=1 (target >= 0.9x)")
    if p8 and n2:
        ratio = n2 / p8
        figures[f"{backend}_n2_vs_n1_p8"] = round(ratio, 3)
        note = "" if backend == "latency" else " (the target is for latency)"
        target(ratio >= 1.6, f"N=2 at {ratio:.2f}x N=1 at P=8 (target >= 1.6x){note}")
    for key, value in sorted(figures.items()):
        if key.startswith(f"{backend}_") and key.endswith("_log_writes_per_transition"):
            config = key.removeprefix(f"{backend}_").removesuffix("_log_writes_per_transition")
            target(value <= 0.05, f"{config}: {value} log writes per transition (target <= 0.05)")
        if key.startswith(f"{backend}_") and key.endswith("_takeover_s"):
            config = key.removeprefix(f"{backend}_").removesuffix("_takeover_s")
            limit = ttl + 2 * hb
            target(value <= limit, f"{config}: takeover in {value} s (target <= {limit} s)")
    return lines


#: Sizes by ``--quick``.
SIZES: dict[bool, dict[str, Any]] = {
    False: {
        "runs": 400,  # split between the processes
        "steps": 5,
        "chunk": 50,  # concurrent start calls per process
        "warm": 40,
        "rounds": 2,  # the best counts
        "idle_settle": 5.0,  # seconds before the idle window (pacing backs off)
        "idle_window": 10.0,
        "timing": (DEFAULT_TTL, DEFAULT_HEARTBEAT),
        "configs": [(n, p) for p in (1, 8, 16) for n in (1, 2, 4)],
    },
    True: {
        "runs": 60,
        "steps": 3,
        "chunk": 20,
        "warm": 10,
        "rounds": 1,
        "idle_settle": 0.5,
        "idle_window": 1.0,
        "timing": (2.0, 0.4),
        "configs": [(1, 1), (1, 8), (2, 8)],
    },
}


def main(argv: list[str]) -> dict[str, Any]:
    """Run the benchmark and return its figures."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="tiny sizes, for CI smoke tests")
    parser.add_argument(
        "--backend",
        action="append",
        choices=["latency", "s3"],
        help="repeat for several (default: both; with --quick: latency)",
    )
    parser.add_argument("--workers", help="comma-separated N (default 1,2,4)")
    parser.add_argument("--partitions", help="comma-separated P (default 1,8,16)")
    parser.add_argument(
        "--concurrency",
        type=int,
        help="runs of the workflow queue at once per engine (default: the Engine's, 100)",
    )
    args = parser.parse_args(argv)
    quick: bool = args.quick
    sizes = dict(SIZES[quick])
    if args.workers or args.partitions:
        ns = [int(x) for x in (args.workers or "1,2,4").split(",")]
        ps = [int(x) for x in (args.partitions or "1,8,16").split(",")]
        sizes["configs"] = [(n, p) for p in ps for n in ns]
    sizes["concurrency"] = args.concurrency
    ttl, hb = sizes["timing"]
    figures: dict[str, Any] = {"quick": quick, "ttl_s": ttl, "heartbeat_s": hb}
    if args.concurrency is not None:
        figures["concurrency"] = args.concurrency
    ctx = multiprocessing.get_context("spawn")
    tmp = Path(tempfile.mkdtemp(prefix="durable-bench-scale-"))
    targets: list[str] = []
    began = time.monotonic()
    try:
        for backend in args.backend or (["latency"] if quick else ["latency", "s3"]):

            def log(msg: str, backend: str = backend) -> None:
                print(
                    f"[{time.monotonic() - began:6.1f} s] {backend}: {msg}",
                    file=sys.stderr,
                    flush=True,
                )

            proxy = ProxyThread() if backend == "s3" else None
            try:
                for k, (n, p) in enumerate(sizes["configs"]):
                    if proxy is not None:
                        where = proxy.new_store()
                    else:
                        where = Where("latency", str(tmp / f"{backend}-{k}-n{n}-p{p}"))
                    result = run_config(ctx, where, n, p, sizes, log)
                    figures.update({f"{backend}_n{n}_p{p}_{key}": v for key, v in result.items()})
            finally:
                if proxy is not None:
                    proxy.close()
            targets += check_targets(backend, figures, ttl, hb)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    for line in targets:
        print(line, file=sys.stderr, flush=True)
    return figures


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1:])))
