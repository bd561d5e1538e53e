"""A workflow worker process for the engine kill -9 test (run as a script).

    python engine_child.py URL OPTIONS_JSON LOG

Opens the store as its writer, then runs a `WorkflowRuntime` worker until it
is killed. The runner appends ``start RUN STEP ATTEMPT`` to LOG before a
step's work and ``done RUN STEP`` when the step returns (its settlement
commits after that). Every step of a run appends ``>STEP`` to the payload;
step `STEPS - 1` succeeds with it, so a run's result is `expected_result`.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import sys
from pathlib import Path

from durable.engine import (
    DEFAULT_QUEUE_NAME,
    RunOptions,
    RunSpec,
    Step,
    StepOutcome,
    Succeed,
    WorkflowRuntime,
)
from durable.store.queue import OpenOptions, Queue, QueueConfig

STEPS = 6
#: Interrupted claims count as attempts: never let kills exhaust a step.
CONFIG = QueueConfig(max_attempts=1000, retry_backoff_base=0.0)
OPTIONS = OpenOptions(queue_configs={DEFAULT_QUEUE_NAME: CONFIG})


def spec(run_id: str) -> RunSpec:
    """The submission of run ``run_id``."""
    return RunSpec(run_id.encode(), run_id=run_id, options=RunOptions(max_attempts_per_step=1000))


def expected_result(run_id: str) -> bytes:
    """The result of run ``run_id`` when every step's outcome was applied once."""
    return run_id.encode() + b"".join(b">%d" % k for k in range(STEPS))


class LoggingRunner:
    """Appends one line per event to ``log`` (one ``write`` each, O_APPEND)."""

    def __init__(self, log: Path, max_delay: float = 0.03) -> None:
        self.fd = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        self.max_delay = max_delay

    def say(self, line: str) -> None:
        os.write(self.fd, f"{line}\n".encode())

    def close(self) -> None:
        os.close(self.fd)

    async def run_step(self, step: Step) -> StepOutcome:
        self.say(f"start {step.run_id} {step.step_number} {step.attempts}")
        await asyncio.sleep(random.uniform(0, self.max_delay))  # the "work"
        payload = step.payload + b">%d" % step.step_number
        outcome: StepOutcome = (
            Succeed(payload) if step.step_number == STEPS - 1 else StepOutcome.continue_now(payload)
        )
        self.say(f"done {step.run_id} {step.step_number}")
        return outcome


async def main(url: str, storage_options: str, log: str) -> None:
    q = await Queue.open(url, OPTIONS, storage_options=json.loads(storage_options))
    runner = LoggingRunner(Path(log))
    WorkflowRuntime(q, runner).spawn()
    runner.say("ready")
    await asyncio.Event().wait()  # until killed


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:]))
