"""Crash and resume: kill -9 a worker process mid-run, restart, and finish the run.

    python -m examples.crash_resume [DIR]

The run has six steps. Each step's settlement (ack + enqueue of the next
step) is one atomic commit, so the store always says exactly which steps
finished. The demo:

1. submits the run, then starts a worker *process* on the store;
2. waits until that process has started step 3, and kills it with SIGKILL;
3. runs a worker in this process until the run terminates.

Steps 0-2 had committed before the kill: they never run again. Step 3 was
in flight: its claim is requeued when the new worker opens the store, so
it runs again (attempt 2). That is at-least-once execution of the step in
flight, and exactly-once progress of the run.
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
from pathlib import Path

from durable.engine import RunSpec, Step, StepOutcome, Succeed, WorkflowRuntime
from durable.store.queue import Queue

RUN_ID = "six-steps"
STEPS = 6
KILL_AT = 3  # kill the worker process once this step has started


class SlowSteps:
    """Each step logs "run_id step attempt" to ``log``, works a little, continues."""

    def __init__(self, log: Path) -> None:
        self.log = log

    async def run_step(self, step: Step) -> StepOutcome:
        with self.log.open("a") as f:  # an outside side effect: at least once
            f.write(f"{step.run_id} {step.step_number} {step.attempts}\n")
        await asyncio.sleep(0.3)  # the "work"
        payload = step.payload + b" %d" % step.step_number
        if step.step_number + 1 < STEPS:
            return StepOutcome.continue_now(payload)
        return Succeed(payload)


async def submit(store: Path) -> None:
    async with await Queue.open(store) as queue:
        await WorkflowRuntime(queue, SlowSteps(store.parent / "steps.log")).submit(
            RunSpec(b"steps:", run_id=RUN_ID)
        )


async def work_forever(store: Path) -> None:
    """The child process: a worker on ``store`` until it is killed."""
    async with await Queue.open(store) as queue:
        WorkflowRuntime(queue, SlowSteps(store.parent / "steps.log")).spawn()
        await asyncio.Event().wait()


async def work_until_done(store: Path) -> bytes | None:
    """A worker on ``store`` until the run terminates; returns its result."""
    # Opening the store fences the previous writer and requeues its claims.
    async with await Queue.open(store) as queue:
        runtime = WorkflowRuntime(queue, SlowSteps(store.parent / "steps.log"))
        status = runtime.status(RUN_ID)
        assert status is not None
        print(f"restarted: the store says the run is at step {status.current_step}")
        worker = runtime.spawn()
        try:
            end = await asyncio.wait_for(runtime.wait(RUN_ID), timeout=60)
        finally:
            await worker.shutdown()
        assert end is not None
        assert end.outcome is not None
        print(f"run {RUN_ID!r} {end.outcome.status.as_str()} at step {end.outcome.final_step}")
        return end.outcome.result


def steps_in(lines: list[str]) -> list[tuple[str, str]]:
    """(step, attempt) of each "run_id step attempt" log line."""
    return [(step, attempt) for _, step, attempt in map(str.split, lines)]


def main() -> None:
    if len(sys.argv) > 2 and sys.argv[1] == "--worker":  # the child process
        asyncio.run(work_forever(Path(sys.argv[2])))
        return
    base = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(tempfile.mkdtemp(prefix="durable-"))
    shutil.rmtree(base, ignore_errors=True)
    store, log = base / "store", base / "steps.log"
    store.mkdir(parents=True)
    log.touch()
    asyncio.run(submit(store))
    print(f"submitted run {RUN_ID!r} ({STEPS} steps) to {store}")

    # 1. A worker process; poll its log until it has started step KILL_AT.
    child = subprocess.Popen(
        [sys.executable, "-m", "examples.crash_resume", "--worker", str(store)]
    )
    while not any(line.split()[1:2] == [str(KILL_AT)] for line in log.read_text().splitlines()):
        if child.poll() is not None:
            raise SystemExit("the worker process exited early")
        time.sleep(0.01)
    # 2. kill -9: no clean shutdown, the step in flight is simply cut off.
    os.kill(child.pid, signal.SIGKILL)
    child.wait()
    before = log.read_text().splitlines()
    print(f"killed worker process {child.pid} (kill -9) during step {KILL_AT}")

    # 3. A new worker (in this process) carries on where the store says the run is.
    result = asyncio.run(work_until_done(store))
    print(f"result: {result!r}")
    killed = steps_in(before)
    restarted = steps_in(log.read_text().splitlines()[len(before) :])
    print("steps run by the killed process: " + ", ".join(f"{s} (attempt {a})" for s, a in killed))
    print(
        "steps run after the restart:     " + ", ".join(f"{s} (attempt {a})" for s, a in restarted)
    )
    twice = sorted({s for s, _ in killed} & {s for s, _ in restarted})
    print(f"steps run twice: {', '.join(twice) or 'none'} (only the one in flight at the kill)")
    if len(sys.argv) == 1:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
