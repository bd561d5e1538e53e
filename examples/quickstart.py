"""Quickstart: an order pipeline that survives kill -9, on a local directory store.

    python -m examples.quickstart [STORE_DIR]

Each order goes through three stages (reserve -> charge -> ship). A stage
is a queue job; finishing it acks the job, records the stage in the KV
namespace and enqueues the next stage, all in one atomic transaction.

The demo starts a worker *process*, kills it with SIGKILL in the middle of
the run, then finishes the work in this process. Every order completes, and
no stage that had finished runs again: its result and its successor were
committed together with its ack.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

from durable.store.objects import LocalObjectStore
from durable.store.queue import (
    Claim,
    LeaseHandle,
    OpenOptions,
    Queue,
    SettlementEffects,
)
from durable.store.queue.worker import run_worker_concurrent

QUEUE = "orders"
STAGES = ["reserve", "charge", "ship"]
ORDERS = 12


def next_stage_effects(order: str, stage: str, result: str) -> SettlementEffects:
    """What finishing ``stage`` of ``order`` commits, atomically with its ack."""
    effects = SettlementEffects().kv_put(f"order/{order}/{stage}".encode(), result.encode())
    i = STAGES.index(stage)
    if i + 1 < len(STAGES):
        payload = json.dumps({"order": order, "stage": STAGES[i + 1]}).encode()
        effects.enqueue(QUEUE, payload)
    return effects


class StageWorker:
    """Runs one stage of one order; logs each execution to ``executions``."""

    def __init__(self, executions: Path, delay: float) -> None:
        self.executions = executions
        self.delay = delay

    async def process(self, job: Claim, lease: LeaseHandle) -> SettlementEffects:
        """Do the stage's work, then hand back what to commit with the ack."""
        task = json.loads(job.record.payload)
        with self.executions.open("a") as f:  # an outside side effect, at least once
            f.write(f"{task['order']} {task['stage']}\n")
        await asyncio.sleep(self.delay)  # the "work"
        return next_stage_effects(task["order"], task["stage"], f"{task['stage']} ok")


async def work(store: Path, delay: float, until_done: bool) -> None:
    """Run the stage worker until every order is shipped (or forever)."""
    async with await Queue.open(LocalObjectStore(store), OpenOptions()) as q:
        shutdown = asyncio.Event()
        worker = StageWorker(store.parent / "executions.log", delay)
        runner = asyncio.create_task(
            run_worker_concurrent(
                q, worker, name=QUEUE, concurrency=4, poll_interval=0.2, shutdown=shutdown
            )
        )
        while until_done:
            shipped = sum(q.kv.get(f"order/{o}/ship".encode()) is not None for o in range(ORDERS))
            if shipped == ORDERS:
                break
            await asyncio.sleep(0.05)
        else:
            await runner
        shutdown.set()
        await runner


async def submit(store: Path) -> None:
    """Enqueue the first stage of every order."""
    async with await Queue.open(LocalObjectStore(store), OpenOptions()) as q:
        for o in range(ORDERS):
            await q.enqueue(QUEUE, json.dumps({"order": o, "stage": STAGES[0]}).encode())


def main() -> None:
    """Run the demo."""
    if len(sys.argv) > 2 and sys.argv[1] == "--worker":  # the child process
        asyncio.run(work(Path(sys.argv[2]), delay=0.02, until_done=False))
        return
    base = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(tempfile.mkdtemp(prefix="durable-"))
    store = base / "store"
    shutil.rmtree(base, ignore_errors=True)
    store.mkdir(parents=True)
    asyncio.run(submit(store))
    print(f"store: {store}\nsubmitted {ORDERS} orders x {len(STAGES)} stages")

    log = base / "executions.log"
    log.touch()
    child = subprocess.Popen([sys.executable, "-m", "examples.quickstart", "--worker", str(store)])
    while len(log.read_text().splitlines()) < ORDERS:  # let it get some way in
        if child.poll() is not None:
            raise SystemExit("worker process exited early")
        asyncio.run(asyncio.sleep(0.01))
    os.kill(child.pid, signal.SIGKILL)
    child.wait()
    before = len(log.read_text().splitlines())
    print(f"killed the worker process (kill -9) after {before} stage executions")

    asyncio.run(work(store, delay=0.0, until_done=True))
    runs = log.read_text().splitlines()
    repeated = len(runs) - len(set(runs))
    print(f"restarted in this process: all {ORDERS} orders shipped")
    print(f"stage executions: {len(runs)} for {ORDERS * len(STAGES)} stages ({repeated} re-run:")
    print("  only stages that were in flight when the process died run again)")
    if not sys.argv[1:]:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
