"""A one-step run: the smallest use of the workflow runtime.

    python -m examples.single_step [STORE_DIR]

A `StepRunner` turns a step's payload (bytes) into a `StepOutcome`. This
one upper-cases its input and returns `Succeed`, so every run has exactly
one step. The runtime stores the run (its record, its step job and its
outcome) in a local directory; a cloud bucket URL works the same way.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from durable.engine import RunSpec, Step, StepOutcome, Succeed, WorkflowRuntime
from durable.store.queue import Queue
from examples._store_dir import run_with_store


class Shout:
    """The step runner: bytes in, an outcome out."""

    async def run_step(self, step: Step) -> StepOutcome:
        print(f"step {step.step_number} of run {step.run_id!r} got {step.payload!r}")
        return Succeed(step.payload.upper() + b"!")  # the run's result


async def main(store: Path) -> None:
    # The queue is the runtime's storage: every run lives in it.
    async with await Queue.open(store) as queue:
        runtime = WorkflowRuntime(queue, Shout())

        # Submit a run: its first step is enqueued with the run's record, atomically.
        submitted = await runtime.submit(RunSpec(b"hello, durable", run_id="greeting"))
        print(f"submitted run {submitted.run_id!r} (new: {submitted.newly_submitted})")

        # A worker claims steps and settles each outcome; wait for the run to end.
        worker = runtime.spawn()
        try:
            end = await asyncio.wait_for(runtime.wait("greeting"), timeout=30)
        finally:
            await worker.shutdown()  # stop claiming, drain the steps in flight

        assert end is not None
        assert end.outcome is not None
        print(f"run {end.outcome.run_id!r} {end.termination.status.as_str()}")
        print(f"final step: {end.termination.final_step}")
        print(f"result: {end.outcome.result!r}")


if __name__ == "__main__":
    run_with_store(main)
