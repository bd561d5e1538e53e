"""Many processes on one store (issue 14): one worker, a standby, four clients.

    python -m benchmarks.bench_clients [--quick] [--backend local|latency ...]

Every process is spawned (``multiprocessing``, start method ``spawn``) and
opens the same store through the decorators' `Engine`: the *worker*
(``Engine(store)`` then ``engine.serve()``: the owner), a *standby* (a
second ``Engine(store)``, which waits to take over and serves as a client
meanwhile) and four *clients* (``Engine(store, role="client")``). The
parent sends them commands over pipes and stamps cross-process times with
``time.monotonic()`` (one clock for every process of the host).

Backends:

- ``local``: a local temp directory (`LocalObjectStore`, fsync on);
- ``latency``: the same kind of directory behind
  ``FaultyObjectStore(latency=0.02)``, every object call a 20 ms round
  trip, as on a cloud store (``memory://`` is per process, so a shared
  directory stands in for it), and without the directory's host lock, so
  liveness goes by the ttl as on a bucket.

Every process counts its object-store calls by operation and by prefix
(a `FaultyObjectStore` subclass with no latency on ``local``).

Figures, per backend (prefixed ``local_`` / ``latency_``):

- ``throughput``: runs of a workflow of 10 no-op ``@step`` calls, started
  by the four clients together (each a quarter, in chunks of concurrent
  ``start`` calls, then ``await handle.result()`` for each), against the
  same number started by the worker itself, in the same benchmark run:
  ``client_runs_per_s``, ``inproc_runs_per_s`` and their ratio
  (target: at least 0.5);
- ``latency``: one-step runs one at a time, ``start`` to ``result``, from
  one client and in the worker, alternating blocks of each so both see the
  same load: ``client_p50_ms``/``p99`` against ``inproc_p50_ms``/``p99``
  (target on ``local``: client p50 at most 4x in-process p50);
- ``idle``: every process idle (after the pacing had time to back off),
  over a window: object requests per second by operation, their cost per
  day at S3 list prices (PUT, COPY, POST, LIST $0.005 per 1,000; GET
  $0.0004 per 1,000; DELETE free) and the process CPU in percent of a core
  (``os.times()``), for the worker (the owner), the standby and a client;
- ``takeover``: kill -9 of the owner, seconds until the standby owns the
  store (``engine.wait_owner()`` returned); a new worker joins as a standby;
  then SIGTERM of the owner, seconds until that standby owns the store, and
  how long the old owner took to exit (drain, checkpoint, release); then a
  client's run through the new owner.

``--quick`` (the smoke test): small sizes, ttl 4 s and heartbeat 0.5 s, a
short idle window. The full run uses the `Engine` defaults (ttl 15 s,
heartbeat 3 s), so its idle and takeover figures are the ones users get.

Progress goes to stderr; the last line of stdout is one JSON object with
every figure.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import multiprocessing
import multiprocessing.connection
import os
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from benchmarks.bench_decorators import chain
from benchmarks.bench_steps import pct
from benchmarks.multiproc import REPLY_TIMEOUT, CountingStore, Meter, Proc, recv, until_first
from durable import Engine
from durable.store.objects import LocalObjectStore

#: S3 list prices, dollars per request (us-east-1, standard storage class).
PRICE_WRITE = 0.005 / 1000  # PUT, COPY, POST, LIST
PRICE_READ = 0.0004 / 1000  # GET and all other reads
#: Priced per operation of `ObjectStore` (a `create` is a conditional PUT).
PRICES = {"get": PRICE_READ, "put": PRICE_WRITE, "create": PRICE_WRITE, "list": PRICE_WRITE}
OPS = ("get", "put", "create", "list", "delete")


@dataclass(frozen=True)
class Backend:
    """Where the processes meet: a directory, with or without latency."""

    name: str
    latency: float  # seconds per object call
    host_lock: bool  # the directory's flock (a bucket has none)

    def open(self, path: str) -> CountingStore:
        """The counting store over ``path`` (in the calling process)."""
        inner = LocalObjectStore(path)
        return CountingStore(inner, latency=self.latency, host_lock=self.host_lock)


BACKENDS = {
    "local": Backend("local", 0.0, True),
    "latency": Backend("latency", 0.02, False),
}


# --------------------------------------------------------------------- child


async def _throughput(prefix: str, runs: int, steps: int, chunk: int) -> dict[str, Any]:
    """Start ``runs`` runs (``chunk`` starts at once), wait for every result."""
    ids = [f"{prefix}-{i:06d}" for i in range(runs)]
    t0 = time.monotonic()
    handles = []
    for i in range(0, runs, chunk):
        handles += await asyncio.gather(
            *(chain.options(run_id=r).start(steps) for r in ids[i : i + chunk])
        )
    started = time.monotonic()
    results = await asyncio.gather(*(h.result() for h in handles))
    t1 = time.monotonic()
    expected = steps * (steps - 1) // 2
    if any(r != expected for r in results):
        raise RuntimeError(f"a run of {prefix} returned a wrong result")
    return {"t0": t0, "started": started, "t1": t1}


async def _latency(prefix: str, runs: int) -> list[float]:
    """Seconds from ``start`` to result of ``runs`` one-step runs, one at a time."""
    out = []
    for i in range(runs):
        t0 = time.perf_counter()
        handle = await chain.options(run_id=f"{prefix}-{i:06d}").start(1)
        if await handle.result() != 0:
            raise RuntimeError(f"run {prefix}-{i} returned a wrong result")
        out.append(time.perf_counter() - t0)
    return out


async def _serve_commands(engine: Engine, store: CountingStore, conn: Connection) -> None:
    meter = Meter(store)
    while True:
        cmd, *args = await recv(conn)
        reply: Any
        if cmd == "stop":
            return
        if cmd == "throughput":
            reply = await _throughput(*args)
        elif cmd == "latency":
            reply = await _latency(*args)
        elif cmd == "meter_begin":
            meter.begin()
            reply = None
        elif cmd == "meter_end":
            reply = meter.end()
        elif cmd == "owner":
            reply = engine.owner
        elif cmd == "wait_owner":
            await engine.wait_owner(True, timeout=args[0])
            reply = time.monotonic()
        else:
            raise ValueError(f"unknown command {cmd!r}")
        conn.send(reply)


async def _child(
    role: str, backend: Backend, path: str, timing: tuple[float, float], conn: Connection
) -> None:
    store = backend.open(path)
    ttl, heartbeat = timing
    engine_role = "client" if role == "client" else "worker"
    async with Engine(store, role=engine_role, ttl=ttl, heartbeat=heartbeat) as engine:  # type: ignore[arg-type]
        conn.send(("ready", engine.owner))
        commands = asyncio.create_task(_serve_commands(engine, store, conn))
        waits: set[asyncio.Task[None]] = {commands}
        if engine_role == "worker":
            waits.add(asyncio.create_task(engine.serve()))
        await until_first(waits)
    await store.close()


def child_main(
    role: str, backend: Backend, path: str, timing: tuple[float, float], conn: Connection
) -> None:
    """A spawned process: one `Engine` in ``role`` on the store at ``path``."""
    asyncio.run(_child(role, backend, path, timing, conn))


# -------------------------------------------------------------------- parent


def _current_owner(worker: Proc, standby: Proc, log: Callable[[str], None]) -> tuple[Proc, Proc]:
    """(the process that owns the store now, the other one)."""
    deadline = time.monotonic() + REPLY_TIMEOUT
    while time.monotonic() < deadline:
        if worker.call("owner"):
            return worker, standby
        if standby.call("owner"):
            log("ownership moved to the standby before the kill: the owner renewed late")
            return standby, worker
        time.sleep(0.05)  # between a self-fence and the standby's acquire
    raise TimeoutError(f"neither worker nor standby owns the store after {REPLY_TIMEOUT} s")


def _calls_per_s(figures: dict[str, Any]) -> dict[str, float]:
    seconds = figures["seconds"]
    return {op: figures["calls"].get(op, 0) / seconds for op in OPS}


def _idle_figures(role: str, figures: dict[str, Any]) -> dict[str, Any]:
    rates = _calls_per_s(figures)
    per_day = sum(rates[op] * PRICES.get(op, 0.0) for op in OPS) * 86_400
    out: dict[str, Any] = {f"idle_{role}_{op}_per_s": round(rates[op], 3) for op in OPS}
    out[f"idle_{role}_requests_per_s"] = round(sum(rates.values()), 3)
    out[f"idle_{role}_usd_per_day"] = round(per_day, 4)
    out[f"idle_{role}_cpu_pct"] = round(figures["cpu_s"] / figures["seconds"] * 100, 2)
    for key, n in sorted(figures["by_category"].items()):
        out[f"idle_{role}_{key}_per_s"] = round(n / figures["seconds"], 3)
    return out


def run_backend(ctx: Any, backend: Backend, tmp: Path, sizes: dict[str, Any]) -> dict[str, Any]:
    """Every figure of one backend (not prefixed)."""
    began = time.monotonic()

    def log(msg: str) -> None:
        print(
            f"[{time.monotonic() - began:6.1f} s] {backend.name}: {msg}",
            file=sys.stderr,
            flush=True,
        )

    path = tmp / backend.name
    timing = sizes["timing"]
    procs: list[Proc] = []

    def spawn(role: str) -> Proc:
        p = Proc(ctx, role, child_main, (role, backend, str(path), timing))
        procs.append(p)
        return p

    figures: dict[str, Any] = {"ttl_s": timing[0], "heartbeat_s": timing[1]}

    def meter_all(cmd: str) -> dict[str, float]:
        """Send ``cmd`` to every live process; on ``meter_end``, CPU seconds by role."""
        live = [p for p in procs if p.proc.is_alive()]
        for p in live:
            p.send(cmd)
        replies = [(p.role, p.recv()) for p in live]
        cpu: dict[str, float] = collections.defaultdict(float)
        for role, reply in replies:
            if reply is not None:
                cpu["clients" if role == "client" else role] += round(reply["cpu_s"], 3)
        return dict(cpu)

    try:
        worker = spawn("worker")
        if not worker.ready():
            raise RuntimeError("the first worker does not own the store")
        standby = spawn("standby")
        clients = [spawn("client") for _ in range(4)]
        if standby.ready():
            raise RuntimeError("the second worker owns the store")
        for c in clients:
            c.ready()
        log("worker, standby and 4 clients ready")

        # Throughput: rounds of in-process, then the four clients together.
        runs, steps, chunk = sizes["runs"], sizes["steps"], sizes["chunk"]
        rounds = sizes["rounds"]
        worker.call("throughput", "warm", chunk, steps, chunk)
        for i, c in enumerate(clients):
            c.send("throughput", f"warm{i}", 2, steps, chunk)
        for c in clients:
            c.recv()
        quarter = runs // len(clients)
        seconds = {"inproc": 0.0, "client": 0.0}
        cpu: dict[str, collections.Counter[str]] = {
            "inproc": collections.Counter(),
            "client": collections.Counter(),
        }
        for n in range(rounds):
            meter_all("meter_begin")
            r = worker.call("throughput", f"inproc{n}", quarter * len(clients), steps, chunk)
            seconds["inproc"] += r["t1"] - r["t0"]
            cpu["inproc"].update(meter_all("meter_end"))
            meter_all("meter_begin")
            for i, c in enumerate(clients):
                c.send("throughput", f"client{n}-{i}", quarter, steps, chunk)
            rs = [c.recv() for c in clients]
            seconds["client"] += max(x["t1"] for x in rs) - min(x["t0"] for x in rs)
            cpu["client"].update(meter_all("meter_end"))
        inproc = rounds * quarter * len(clients) / seconds["inproc"]
        client = rounds * quarter * len(clients) / seconds["client"]
        for phase, used in cpu.items():
            for role in ("worker", "standby", "clients"):
                figures[f"{phase}_throughput_cpu_s_{role}"] = round(used[role], 3)
        figures.update(
            {
                "throughput_runs": rounds * quarter * len(clients),
                "throughput_steps_per_run": steps,
                "inproc_runs_per_s": round(inproc, 1),
                "client_runs_per_s": round(client, 1),
                "client_vs_inproc_runs_per_s": round(client / inproc, 3),
            }
        )
        log(
            f"throughput {rounds} rounds of {runs} x {steps} steps: in-process {inproc:.1f}/s, "
            f"4 clients {client:.1f}/s; process CPU s {dict(cpu['inproc'])} / "
            f"{dict(cpu['client'])}"
        )

        # Latency: alternating blocks, one client and the worker.
        blocks, per_block = sizes["latency_blocks"], sizes["latency_block"]
        inproc_lat: list[float] = []
        client_lat: list[float] = []
        worker.call("latency", "warm-lat", 5)
        clients[0].call("latency", "warm-lat-c", 5)
        for b in range(blocks):
            inproc_lat += worker.call("latency", f"lat-w{b}", per_block)
            client_lat += clients[0].call("latency", f"lat-c{b}", per_block)
        inproc_lat.sort()
        client_lat.sort()
        figures.update(
            {
                "latency_runs": len(client_lat),
                "inproc_p50_ms": pct(inproc_lat, 50),
                "inproc_p99_ms": pct(inproc_lat, 99),
                "client_p50_ms": pct(client_lat, 50),
                "client_p99_ms": pct(client_lat, 99),
            }
        )
        ratio = figures["client_p50_ms"] / figures["inproc_p50_ms"]
        figures["client_vs_inproc_p50"] = round(ratio, 3)
        log(
            f"1-step latency p50/p99 ms: in-process "
            f"{figures['inproc_p50_ms']}/{figures['inproc_p99_ms']}, client "
            f"{figures['client_p50_ms']}/{figures['client_p99_ms']}"
        )

        # Idle: every process, after the pacing backed off.
        time.sleep(sizes["idle_settle"])
        watched = {"worker": worker, "standby": standby, "client": clients[0]}
        for p in procs:
            p.call("meter_begin")
        time.sleep(sizes["idle_window"])
        idle = {role: p.call("meter_end") for role, p in watched.items()}
        for p in procs:
            if p not in watched.values():
                p.call("meter_end")
        for role in watched:
            figures.update(_idle_figures(role, idle[role]))
        figures["idle_window_s"] = sizes["idle_window"]
        log(
            "idle requests/s (cpu %): "
            + ", ".join(
                f"{r} {figures[f'idle_{r}_requests_per_s']} ({figures[f'idle_{r}_cpu_pct']})"
                for r in watched
            )
        )

        # Takeover after kill -9 of the owner. On a loaded machine, with the
        # quick run's 1 s TTL, the owner may have been replaced already (a late
        # renewal self-fences it): kill whichever process owns now.
        worker, standby = _current_owner(worker, standby, log)
        standby.send("wait_owner", 120.0)
        t_kill = time.monotonic()
        worker.proc.kill()
        owned = standby.recv()
        figures["takeover_after_kill_s"] = round(owned - t_kill, 3)
        worker.kill()
        joined = spawn("worker")
        if joined.ready():
            raise RuntimeError("a worker joining a live owner owns the store")
        # Takeover after SIGTERM: drain, checkpoint, release, a standby acquires.
        joined.send("wait_owner", 120.0)
        t_term = time.monotonic()
        os.kill(standby.proc.pid, signal.SIGTERM)
        owned, exited = None, None
        while owned is None or exited is None:  # whichever comes first
            ready = multiprocessing.connection.wait([joined.conn, standby.proc.sentinel], 120)
            if not ready:
                raise TimeoutError("no takeover within 120 s of SIGTERM")
            if standby.proc.sentinel in ready and exited is None:
                exited = time.monotonic()
            if joined.conn in ready and owned is None:
                owned = joined.recv()
        standby.proc.join(60)
        figures["takeover_after_sigterm_s"] = round(owned - t_term, 3)
        figures["sigterm_exit_s"] = round(exited - t_term, 3)
        if standby.proc.exitcode != 0:
            raise RuntimeError(f"the owner exited {standby.proc.exitcode} on SIGTERM")
        after = clients[1].call("latency", "after-takeover", 1)
        figures["first_run_after_takeover_ms"] = round(after[0] * 1000, 3)
        log(
            f"takeover after kill -9 {figures['takeover_after_kill_s']} s, after "
            f"SIGTERM {figures['takeover_after_sigterm_s']} s (old owner exited after "
            f"{figures['sigterm_exit_s']} s)"
        )
    finally:
        for p in reversed(procs):
            p.stop()
    return figures


#: Sizes by ``--quick``, then by (``--quick``, backend) where they differ.
SIZES: dict[Any, dict[str, Any]] = {
    False: {
        "runs": 200,  # 10-step runs per round, split between the 4 clients
        "rounds": 3,  # alternating in-process and client rounds
        "steps": 10,
        "chunk": 50,  # concurrent starts per process
        "latency_blocks": 10,  # alternating blocks of one-step runs ...
        "latency_block": 20,  # ... of this many, in-process then client
        "idle_settle": 10.0,  # seconds before the idle window (pacing backs off)
        "idle_window": 30.0,
        "timing": (15.0, 3.0),  # ttl, heartbeat: the Engine defaults
    },
    (False, "latency"): {"runs": 100, "rounds": 2, "latency_blocks": 5, "latency_block": 10},
    True: {
        "runs": 40,
        "rounds": 1,
        "steps": 10,
        "chunk": 10,
        "latency_blocks": 2,
        "latency_block": 10,
        "idle_settle": 1.0,
        "idle_window": 1.0,
        # Slack for a loaded CI machine: an owner whose event loop stalls for
        # 0.8 ttl self-fences (1 s was too tight under the parallel suite).
        "timing": (4.0, 0.5),
    },
    (True, "latency"): {
        "runs": 16,
        "chunk": 4,
        "latency_blocks": 1,
        "latency_block": 3,
        "timing": (3.0, 0.5),  # a 20 ms heartbeat put under load needs slack
    },
}


def main(argv: list[str]) -> dict[str, Any]:
    """Run the benchmark and return its figures."""
    p = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    p.add_argument("--quick", action="store_true", help="tiny sizes, for CI smoke tests")
    p.add_argument(
        "--backend",
        action="append",
        choices=sorted(BACKENDS),
        help="repeat for several (default: all; with --quick: local)",
    )
    args = p.parse_args(argv)
    quick: bool = args.quick
    figures: dict[str, Any] = {"quick": quick}
    ctx = multiprocessing.get_context("spawn")
    tmp = Path(tempfile.mkdtemp(prefix="durable-bench-clients-"))
    try:
        for name in args.backend or (["local"] if quick else list(BACKENDS)):
            sizes = {**SIZES[quick], **SIZES.get((quick, name), {})}
            r = run_backend(ctx, BACKENDS[name], tmp, sizes)
            figures.update({f"{name}_{k}": v for k, v in r.items()})
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return figures


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1:])))
