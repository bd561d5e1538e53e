"""Durable approvals: runs that wait for a decision, across process restarts.

    python -m examples.durable_approvals [DIR]

Three refund claims each propose a refund, then wait for an approval with
``StepOutcome.continue_on_signal`` (correlation key ``approval:{run id}``).
A waiting run is a scheduled job in the store: no process needs to be up
while the decision is pending. Each phase below is a separate worker
process on the same local store, started after the previous one exited:

1. ``decide-early``: the decision for ``refund-C`` arrives before the run
   exists. ``signal`` buffers it (``BUFFERED``).
2. ``work``: submits the three runs. ``refund-C``'s wait consumes the
   buffered decision when it registers, so it completes at once; the other
   two are left waiting when the process exits.
3. ``approve``: a new process signals ``refund-A`` (``DELIVERED``): the
   waiting step is woken and the run completes here.
4. ``after-timeout``: nobody decides on ``refund-B``; once its timeout has
   passed, the next process runs its step with ``Step.signal`` None and the
   claim escalates. A decision sent after that finds no waiter: it is
   buffered, and ``clear_signal`` discards it.

Finally this process reads the three outcomes from the store.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from durable.engine import (
    RunSpec,
    RuntimeOptions,
    Step,
    StepOutcome,
    Succeed,
    WorkflowRuntime,
)
from durable.engine.signals import SignalOutcome
from durable.store.queue import OpenOptions, Queue

#: The claims: run id -> (refund amount, seconds to wait for a decision).
CLAIMS = {"refund-A": (40, 60.0), "refund-B": (75, 1.5), "refund-C": (25, 60.0)}
OPEN = OpenOptions(scheduler_interval=0.1)
OPTIONS = RuntimeOptions(poll_interval=0.05)


def approval_key(run_id: str) -> str:
    """The correlation key of a claim's decision."""
    return f"approval:{run_id}"


def say(text: str) -> None:
    """Print a line tagged with this process's id."""
    print(f"[pid {os.getpid()}] {text}", flush=True)


class RefundAgent:
    """Step 0 proposes the refund and waits; step 1 acts on the decision."""

    def __init__(self, waiting: dict[str, asyncio.Event] | None = None) -> None:
        self.waiting = waiting or {}

    async def run_step(self, step: Step) -> StepOutcome:
        claim = json.loads(step.payload)
        amount, timeout = claim["amount"], claim["timeout"]
        if step.step_number == 0:
            say(f"{step.run_id}: proposing a refund of {amount} EUR; asking for approval")
            if step.run_id in self.waiting:
                self.waiting[step.run_id].set()
            return StepOutcome.continue_on_signal(step.payload, approval_key(step.run_id), timeout)
        if step.signal is None:
            verdict = f"escalated: no decision within {timeout} s"
        elif step.signal == b"approve":
            verdict = f"refund of {amount} EUR issued"
        else:
            verdict = f"refund denied: {step.signal.decode()}"
        say(f"{step.run_id}: {verdict}")
        return Succeed(verdict.encode())


async def until_done(runtime: WorkflowRuntime, *run_ids: str) -> None:
    """Run a worker until every run of ``run_ids`` has terminated."""
    worker = runtime.spawn()
    try:
        for run_id in run_ids:
            await asyncio.wait_for(runtime.wait(run_id), timeout=30)
    finally:
        await worker.shutdown()


async def decide(runtime: WorkflowRuntime, run_id: str, decision: bytes) -> SignalOutcome:
    """Send a decision; say what happened to it."""
    outcome = await runtime.signal(approval_key(run_id), decision)
    say(f"decision {decision.decode()!r} for {run_id} -> {outcome.value}")
    return outcome


async def phase(name: str, store: Path) -> None:
    """One worker process: one phase of the demo."""
    waiting = {run_id: asyncio.Event() for run_id in ("refund-A", "refund-B")}
    async with await Queue.open(store, OPEN) as queue:
        runtime = WorkflowRuntime(queue, RefundAgent(waiting), options=OPTIONS)
        if name == "decide-early":
            await decide(runtime, "refund-C", b"approve")
        elif name == "work":
            for run_id, (amount, timeout) in CLAIMS.items():
                claim = json.dumps({"amount": amount, "timeout": timeout}).encode()
                await runtime.submit(RunSpec(claim, run_id=run_id))
            worker = runtime.spawn()
            try:
                await asyncio.wait_for(runtime.wait("refund-C"), timeout=30)
                for event in waiting.values():
                    await asyncio.wait_for(event.wait(), timeout=30)
            finally:
                await worker.shutdown()  # the two waits register as it drains
            say("refund-A and refund-B are waiting; this process exits")
        elif name == "approve":
            if await decide(runtime, "refund-A", b"approve") is SignalOutcome.DELIVERED:
                await until_done(runtime, "refund-A")
        elif name == "after-timeout":
            await until_done(runtime, "refund-B")
            await decide(runtime, "refund-B", b"approve")
            cleared = await runtime.clear_signal(approval_key("refund-B"))
            say(f"late decision for refund-B discarded: {cleared}")


async def report(store: Path) -> None:
    """Read every claim's outcome from the store."""
    async with await Queue.open(store, OPEN) as queue:
        runtime = WorkflowRuntime(queue, RefundAgent(), options=OPTIONS)
        for run_id in CLAIMS:
            outcome = await runtime.outcome(run_id)
            assert outcome is not None
            assert outcome.result is not None
            print(f"{run_id}: {outcome.status.as_str()}: {outcome.result.decode()}")


def main() -> None:
    if len(sys.argv) > 2 and sys.argv[1] == "--phase":  # a worker process
        asyncio.run(phase(sys.argv[2], Path(sys.argv[3])))
        return
    base = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(tempfile.mkdtemp(prefix="durable-"))
    shutil.rmtree(base, ignore_errors=True)
    store = base / "store"
    store.mkdir(parents=True)
    for name in ("decide-early", "work", "approve", "after-timeout"):
        print(f"--- phase {name}: a new worker process", flush=True)
        cmd = [sys.executable, "-m", "examples.durable_approvals", "--phase", name, str(store)]
        subprocess.run(cmd, check=True)
    print("--- outcomes, read from the store", flush=True)
    asyncio.run(report(store))
    if len(sys.argv) == 1:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
