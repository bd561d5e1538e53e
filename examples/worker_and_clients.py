"""Many processes on one store: two workers (an owner and a standby) and a client.

    python -m examples.worker_and_clients [DIR]

Two worker processes open the same store with ``Engine(store)`` and run
``engine.serve()``: the first owns the store, the second stands by. This
process opens it as a client (``Engine(store, role="client")``), as a web
app would: it starts three order runs, approves the one that waits for a
manager with ``engine.signal``, and waits for every result. None of it
fences the worker: a client's calls reach the owner through the store's
inbox, and it reads results through its own view of the store.

Then it starts one more order and kills the owner (SIGKILL) while that
order's ``ship`` step runs: the standby takes over (at once on a local
directory: the owner's lock died with it), the order completes there, and
only the step that was in flight ran twice. Last, it sends SIGTERM to the
new owner, which drains, hands the store over and exits 0.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import IO

from durable import Engine, step, wait_for_signal, workflow

LOG: list[Path] = []  # where each step execution is logged (a side effect)


def executed(name: str, order: str) -> None:
    """Record one execution of step ``name`` for ``order`` (appends are atomic)."""
    with LOG[0].open("a") as f:
        f.write(f"{name}:{order}\n")


@step
async def pack(order: str) -> str:
    executed("pack", order)
    return f"{order} packed"


@step
async def ship(order: str) -> str:
    executed("ship", order)
    await asyncio.sleep(1.0 if order == "order-9" else 0.05)  # order-9: the kill lands here
    return f"{order} shipped"


@workflow(name="worker_and_clients.fulfil")
async def fulfil(order: str, needs_approval: bool) -> str:
    """Pack, (wait for a manager's approval,) ship."""
    packed = await pack(order)
    if needs_approval and not await wait_for_signal(f"approve:{order}", timeout=60):
        return f"{order} rejected"
    return f"{packed}, {await ship(order)}"


# ------------------------------------------------------------------ workers


async def serve(store: Path) -> None:
    """A worker process: owner or standby; says which, and when it takes over."""
    # A short ttl and heartbeat so that the demo takes seconds (defaults: 15 s, 3 s).
    async with Engine(store, ttl=4.0, heartbeat=0.5) as engine:
        print("owner" if engine.owner else "standby", flush=True)
        if not engine.owner:
            took_over = asyncio.create_task(engine.wait_owner())
            took_over.add_done_callback(lambda _: print("took over", flush=True))
        await engine.serve()  # until SIGTERM or SIGINT
    print("handed over", flush=True)


class Worker:
    """A worker process of this demo, and the lines it printed."""

    def __init__(self, store: Path) -> None:
        cmd = [sys.executable, "-m", "examples.worker_and_clients", "--worker", str(store)]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)

    def expect(self, line: str) -> None:
        """Wait until the worker prints ``line``."""
        out: IO[str] | None = self.proc.stdout
        assert out is not None
        for got in out:
            if got.strip() == line:
                return
        raise SystemExit(f"worker {self.proc.pid} exited {self.proc.wait()} before {line!r}")


# ------------------------------------------------------------------- client


def wait_for_execution(what: str) -> None:
    """Wait until the execution log names ``what`` (``step:order``)."""
    while what not in LOG[0].read_text().split():
        time.sleep(0.01)


async def client(store: Path, owner: Worker, standby: Worker) -> None:
    """This process, as a client: start, approve, wait; then survive a kill."""
    async with Engine(store, role="client") as engine:
        handles = [
            await fulfil.options(run_id=f"order-{i}").start(f"order-{i}", i == 2) for i in (1, 2, 3)
        ]
        print(f"client started {', '.join(h.run_id for h in handles)} (order-2 needs approval)")
        # Sent at once: a signal that comes before its wait is kept for it.
        outcome = await engine.signal("approve:order-2", True)
        print(f"client approved order-2 (signal {outcome.value})")
        for h in handles:
            print(f"  {h.run_id}: {await h.result(timeout=60)!r}")

        last = await fulfil.options(run_id="order-9").start("order-9", False)
        await asyncio.to_thread(wait_for_execution, "ship:order-9")
        killed = time.monotonic()
        os.kill(owner.proc.pid, signal.SIGKILL)
        owner.proc.wait()
        print("killed the owner (kill -9) during order-9's ship step")
        standby.expect("took over")
        print(f"the standby took over after {time.monotonic() - killed:.2f} s")
        print(f"  order-9: {await last.result(timeout=60)!r}")


def main() -> None:
    """Run the demo."""
    if len(sys.argv) > 2 and sys.argv[1] == "--worker":  # a worker process
        store = Path(sys.argv[2])
        LOG.append(store.parent / "executions.log")
        asyncio.run(serve(store))
        return
    given = len(sys.argv) > 1
    base = Path(sys.argv[1]) if given else Path(tempfile.mkdtemp(prefix="durable-"))
    shutil.rmtree(base, ignore_errors=True)
    store = base / "store"
    store.mkdir(parents=True)
    LOG.append(base / "executions.log")
    LOG[0].touch()
    print(f"store: {store}")

    owner = Worker(store)
    owner.expect("owner")
    standby = Worker(store)
    standby.expect("standby")
    print(f"worker {owner.proc.pid} owns the store; worker {standby.proc.pid} stands by")
    try:
        asyncio.run(client(store, owner, standby))
        term = time.monotonic()
        standby.proc.send_signal(signal.SIGTERM)
        standby.expect("handed over")
        code = standby.proc.wait(60)
        took = time.monotonic() - term
        print(f"SIGTERM: the new owner drained and exited {code} in {took:.2f} s")
    finally:
        for w in (owner, standby):
            if w.proc.poll() is None:
                w.proc.kill()
                w.proc.wait()

    counts = Counter(LOG[0].read_text().split())
    twice = sorted(name for name, n in counts.items() if n > 1)
    print(f"step executions: {sum(counts.values())}; ran twice: {', '.join(twice) or 'none'}")
    if not given:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
