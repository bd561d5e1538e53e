"""A multi-step run: fetch -> parse -> summarize, each step a durable checkpoint.

    python -m examples.multi_step [STORE_DIR]

Each step returns `Continue(payload)`: the settlement acks the step and
enqueues the next one with that payload, in one transaction. So the
payload is the state a run carries from step to step, and a restarted
process resumes at the first step that had not committed.

Inside a step, `step.memo.memoized(key, compute)` records the result of an
expensive or non-idempotent call (here: "downloading" the document), so a
retry of the same step reads it back instead of calling again.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from durable.engine import (
    DEFAULT_QUEUE_NAME,
    RunSpec,
    Step,
    StepError,
    StepOutcome,
    Succeed,
    Terminated,
    WorkflowRuntime,
)
from durable.store.queue import OpenOptions, Queue, QueueConfig
from examples._store_dir import run_with_store

STEPS = ["fetch", "parse", "summarize"]
DOCUMENT = "Durable runs keep their state in object storage.\nNo server. No database.\n"


class Pipeline:
    """Dispatches on the step number; JSON payloads carry the run's state."""

    def __init__(self) -> None:
        self.downloads = 0  # how often the "network" was really called

    async def download(self, url: str) -> str:
        self.downloads += 1
        await asyncio.sleep(0.05)  # pretend this is slow (and costs money)
        return DOCUMENT

    async def run_step(self, step: Step) -> StepOutcome:
        name = STEPS[step.step_number]
        print(f"  step {step.step_number} ({name}), attempt {step.attempts}")
        state = json.loads(step.payload)

        if name == "fetch":
            # Memoized: a retry of this step (after a crash, say) reuses the body.
            body = await step.memo.memoized(
                f"GET {state['url']}", lambda: self.download(state["url"])
            )
            if step.attempts == 1:
                # A transient error: the step is retried (its payload unchanged),
                # and the retry finds the body in the memo: no second download.
                raise StepError.transient("the cache server timed out, try again")
            return StepOutcome.continue_now(json.dumps({"body": body}).encode())

        if name == "parse":
            lines = [line for line in state["body"].splitlines() if line.strip()]
            words = sum(len(line.split()) for line in lines)
            return StepOutcome.continue_now(json.dumps({"lines": lines, "words": words}).encode())

        summary = f"{len(state['lines'])} lines, {state['words']} words: {state['lines'][0]!r}"
        return Succeed(summary.encode())


async def main(store: Path) -> None:
    # Retry failed steps after 0.1 s (the default backoff starts at 1 s).
    config = QueueConfig(retry_backoff_base=0.1)
    options = OpenOptions(queue_configs={DEFAULT_QUEUE_NAME: config}, scheduler_interval=0.1)
    async with await Queue.open(store, options) as queue:
        pipeline = Pipeline()
        runtime = WorkflowRuntime(queue, pipeline)
        start = json.dumps({"url": "https://example.com/doc.txt"}).encode()
        run = (await runtime.submit(RunSpec(start, run_id="summarize-doc"))).run_id
        print(f"submitted run {run!r}")

        worker = runtime.spawn()
        try:
            end = await asyncio.wait_for(runtime.wait(run), timeout=30)
        finally:
            await worker.shutdown()

        assert end is not None
        assert end.outcome is not None
        print(f"outcome: {end.outcome.status.as_str()} at step {end.outcome.final_step}")
        print(f"result: {end.outcome.result.decode() if end.outcome.result else None}")
        # The status is read from the store: any process (or a QueueReader) sees it.
        status = runtime.status(run)
        assert status is not None
        assert isinstance(status.state, Terminated)
        print(f"status: {type(status.state).__name__}, current step {status.current_step}")
        print(f"downloads: {pipeline.downloads} (the retry of fetch read the memo)")


if __name__ == "__main__":
    run_with_store(main)
