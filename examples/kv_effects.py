"""Application KV effects: state that commits atomically with a run's progress.

    python -m examples.kv_effects [STORE_DIR]

Besides the queue, a store holds a key-value namespace for the application.
A run writes to it on two surfaces, and each write is part of a commit the
runtime makes anyway, so it can never be half-applied:

- `RunSpec.effects`: KV operations committed with the enqueue of step 0
  (a duplicate submission drops them);
- `step.effects.put(...)` / `.delete(...)`: staged during a step and
  committed with that step's settlement (its ack and the next step, or the
  run's termination). A step that fails with an error commits nothing, so a
  retry simply stages its writes again.

Anyone reads the committed values: the writer process through
`queue.kv.get`, a step through `step.kv.get`, and any other process through
a `QueueReader`, a read-only view of the store that never disturbs the writer.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

from durable.engine import RunSpec, Step, StepOutcome, Succeed, WorkflowRuntime
from durable.store.queue import Queue, QueueReader, SettlementEffects
from examples._store_dir import run_with_store

STAGES = ["reserve", "charge", "ship"]
DONE = ["reserved", "charged", "shipped"]
ORDER = "order-42"
KEYS = [f"orders/{ORDER}/status", f"orders/{ORDER}/reserved", f"orders/{ORDER}/receipt"]


class OrderSteps:
    """One stage per step; each records its progress as a KV effect."""

    async def run_step(self, step: Step) -> StepOutcome:
        stage = STAGES[step.step_number]
        # step.kv reads committed values only (never this step's staged writes).
        before = step.kv.get(f"orders/{ORDER}/status")
        print(f"  step {step.step_number} ({stage}): status was {before!r}")
        step.effects.put(f"orders/{ORDER}/status", DONE[step.step_number].encode())
        if stage == "reserve":
            step.effects.put(f"orders/{ORDER}/reserved", b"3 widgets")
        if stage == "charge":
            step.effects.put(f"orders/{ORDER}/receipt", b"receipt #1001: 29.97 EUR")
        if step.step_number + 1 < len(STAGES):
            return StepOutcome.continue_now(step.payload)
        return Succeed(b"delivered")


def show(title: str, get: Callable[[bytes], bytes | None]) -> None:
    print(title)
    for key in KEYS:
        print(f"  {key} = {get(key.encode())!r}")


async def main(store: Path) -> None:
    async with await Queue.open(store) as queue:
        runtime = WorkflowRuntime(queue, OrderSteps())

        # Surface 1: RunSpec.effects commit in the same transaction as step 0.
        submitted = SettlementEffects().kv_put(f"orders/{ORDER}/status".encode(), b"submitted")
        await runtime.submit(RunSpec(ORDER.encode(), run_id=ORDER, effects=submitted))

        # A read-only view from "another process": it sees the submission already.
        reader = await QueueReader.open(store)
        show("a QueueReader after submit:", reader.kv.get)

        # Surface 2: each step's staged effects commit with its settlement.
        worker = runtime.spawn()
        try:
            await asyncio.wait_for(runtime.wait(ORDER), timeout=30)
        finally:
            await worker.shutdown()  # every settlement has committed when this returns

        show("queue.kv after the run:", queue.kv.get)
        await reader.refresh()  # catch up with the writer's commits since it opened
        show("the QueueReader after refresh:", reader.kv.get)
        await reader.close()


if __name__ == "__main__":
    run_with_store(main)
