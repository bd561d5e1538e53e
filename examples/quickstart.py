"""Quickstart: a workflow that survives kill -9 and resumes where it stopped.

    python -m examples.quickstart [DIR]

An order goes through four steps (reserve -> charge -> ship -> notify).
Each ``@step``'s result is journaled in the store before the workflow goes
on, so a process that picks the run up after a crash replays the finished
steps from the journal instead of running them again.

The demo starts the run in a worker *process*, kills that process with
SIGKILL while it is in the middle of the ``charge`` step, then opens the
same store in this process: the run completes, and only the step that was
in flight when the process died ran twice.
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

from durable import Engine, step, workflow

RUN_ID = "order-42"
STEPS = ["reserve", "charge", "ship", "notify"]
LOG: list[Path] = []  # where each step execution is logged (a side effect)


def executed(name: str) -> None:
    """Record one execution of step ``name`` (appends are atomic)."""
    with LOG[0].open("a") as f:
        f.write(f"{name}\n")


@step
async def reserve(order: str) -> str:
    executed("reserve")
    await asyncio.sleep(0.1)  # the "work"
    return "reserved"


@step
async def charge(order: str) -> str:
    executed("charge")
    await asyncio.sleep(0.5)  # long enough for the kill to land in it
    return "charged"


@step
async def ship(order: str) -> str:
    executed("ship")
    await asyncio.sleep(0.1)
    return "shipped"


@step
async def notify(order: str, summary: str) -> str:
    executed("notify")
    return f"mailed {order}"


@workflow(name="quickstart.order")
async def process_order(order: str) -> str:
    """The order pipeline: each step runs once, whatever happens to the process."""
    done = [await reserve(order), await charge(order), await ship(order)]
    summary = f"{order}: {', '.join(done)}"
    await notify(order, summary)
    return summary


async def work(store: Path) -> None:
    """The worker process: start the run (once: the run id names it) and work."""
    async with Engine(store):
        await process_order.options(run_id=RUN_ID).start(RUN_ID)
        await asyncio.Event().wait()  # until killed


async def resume(store: Path) -> str:
    """This process: open the same store and wait for the run to finish."""
    async with Engine(store) as engine:
        result: str = await engine.handle(RUN_ID).result(timeout=60)
        return result


def run_until_charging(store: Path, log: Path) -> None:
    """Start the worker process, kill -9 it in the middle of ``charge``."""
    child = subprocess.Popen([sys.executable, "-m", "examples.quickstart", "--worker", str(store)])
    deadline = time.monotonic() + 30
    while "charge" not in log.read_text().split():
        if child.poll() is not None or time.monotonic() > deadline:
            child.kill()
            raise SystemExit("the worker process did not reach the charge step")
        time.sleep(0.01)
    os.kill(child.pid, signal.SIGKILL)
    child.wait()


def main() -> None:
    """Run the demo."""
    if len(sys.argv) > 2 and sys.argv[1] == "--worker":  # the child process
        store = Path(sys.argv[2])
        LOG.append(store.parent / "executions.log")
        asyncio.run(work(store))
        return
    given = len(sys.argv) > 1
    base = Path(sys.argv[1]) if given else Path(tempfile.mkdtemp(prefix="durable-"))
    shutil.rmtree(base, ignore_errors=True)
    store = base / "store"
    store.mkdir(parents=True)
    LOG.append(base / "executions.log")
    LOG[0].touch()
    print(f"store: {store}")

    run_until_charging(store, LOG[0])
    before = LOG[0].read_text().split()
    print(f"killed the worker process (kill -9) during step {before[-1]!r}")
    print(f"  steps it had started: {', '.join(before)}")

    result = asyncio.run(resume(store))
    print(f"resumed in this process: run {RUN_ID!r} returned {result!r}")
    counts = Counter(LOG[0].read_text().split())
    print("step executions: " + ", ".join(f"{name} {counts[name]}" for name in STEPS))
    again = [name for name in STEPS if counts[name] > 1]
    print(f"ran again: {', '.join(again) or 'none'} (only the step in flight at the kill)")
    if not given:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
