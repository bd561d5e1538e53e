"""A run group: one run per document, each through memoized stages.

    python -m examples.group_document_pipeline [STORE_DIR]

`runtime.group("ingest-batch-1")` names a durable set of runs. `submit`
writes the group's manifest (every document's key and input) before it
submits one run per document, so the set survives a crash at any point.
Each run processes its document in three stages inside one step; every
stage is memoized with `step.memo.memoized`, so a stage that finished is
never paid for twice, whatever happens after it.

The caller reads `group.results()` as documents finish, prints progress
and rolls up the counters itself (pages, tokens, cost): a group has no
built-in aggregation, it is a fold over the results.

The summarizer refuses some documents on the first pass (quota exceeded).
Those runs fail; the others succeed. Once the quota is back,
`group.resume()` (from the manifest alone, as a new process would) submits
again only the failed members, and their memoized extraction is reused.
"""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from pathlib import Path

from durable.engine import (
    DEFAULT_QUEUE_NAME,
    Fail,
    Step,
    StepOutcome,
    Succeed,
    WorkflowRuntime,
)
from durable.engine.groups import GroupMember, RunGroup
from durable.store.queue import OpenOptions, Queue, QueueConfig
from examples._store_dir import run_with_store

DOCUMENTS = {
    "contract-a": "This agreement is made between Alice and Bob. " * 40,
    "contract-b": "Terms and conditions apply to every purchase. " * 25,
    "invoice-7": "Invoice 7: three widgets at 9.99 EUR each. " * 5,
    "invoice-8": "Invoice 8: one gadget at 19.99 EUR. " * 4,
    "memo-q3": "Quarterly numbers look good; hiring continues. " * 60,
    "report-2024": "The annual report covers revenue, costs and outlook. " * 90,
}
#: Documents the summarizer refuses on the first pass.
OVER_QUOTA = {"contract-b", "report-2024"}
CENTS_PER_1K_TOKENS = 3


class DocumentPipeline:
    """extract -> summarize -> classify, each stage memoized in the step's memo."""

    def __init__(self) -> None:
        self.quota_exceeded = True
        self.stage_runs: Counter[str] = Counter()  # what really ran

    async def run_step(self, step: Step) -> StepOutcome:
        doc = json.loads(step.payload)
        name, text = doc["name"], doc["text"]

        async def extract() -> dict[str, int]:
            self.stage_runs["extract"] += 1
            await asyncio.sleep(0.01)  # an OCR call
            words = len(text.split())
            return {"words": words, "pages": 1 + words // 250}

        async def summarize() -> dict[str, int]:
            if self.quota_exceeded and name in OVER_QUOTA:
                raise QuotaExceeded(name)
            self.stage_runs["summarize"] += 1
            await asyncio.sleep(0.01)  # an LLM call, the expensive one
            return {"tokens": 40 + len(text) // 4}

        async def classify() -> str:
            self.stage_runs["classify"] += 1
            label: str = name.split("-")[0]
            return label

        extracted = await step.memo.memoized("extract", extract)
        try:
            summary = await step.memo.memoized("summarize", summarize)
        except QuotaExceeded as e:
            return Fail(str(e))  # a verdict: the run fails, its memo stays
        kind = await step.memo.memoized("classify", classify)
        result = {**extracted, **summary, "kind": kind}
        return Succeed(json.dumps(result).encode())


class QuotaExceeded(Exception):
    def __init__(self, name: str) -> None:
        super().__init__(f"summarizer quota exceeded for {name}")


async def collect(group: RunGroup, total: int) -> tuple[Counter[str], Counter[str]]:
    """Fold the group's results as they come: a progress line each, the
    statuses counted and the counters of succeeded documents summed."""
    statuses: Counter[str] = Counter()
    totals: Counter[str] = Counter()
    async for result in group.results():
        status = result.termination.status.as_str()
        statuses[status] += 1
        done = sum(statuses.values())
        if result.outcome is not None and result.outcome.result is not None:
            counters = json.loads(result.outcome.result)
            totals["pages"] += counters["pages"]
            totals["tokens"] += counters["tokens"]
            detail = f"{counters['pages']} pages, {counters['tokens']} tokens"
        else:
            detail = result.termination.error or "no outcome"
        print(f"  [{done}/{total}] {result.key}: {status} ({detail})")
    return statuses, totals


async def main(store: Path) -> None:
    config = QueueConfig(retry_backoff_base=0.1)
    options = OpenOptions(queue_configs={DEFAULT_QUEUE_NAME: config}, scheduler_interval=0.1)
    async with await Queue.open(store, options) as queue:
        pipeline = DocumentPipeline()
        runtime = WorkflowRuntime(queue, pipeline)
        group = runtime.group("ingest-batch-1")
        members = [
            GroupMember(name, json.dumps({"name": name, "text": text}).encode())
            for name, text in DOCUMENTS.items()
        ]
        submitted = await group.submit(members)
        print(f"submitted {len(submitted)} documents to group {group.group_id!r}")

        worker = runtime.spawn()
        try:
            print("pass 1:")
            statuses, _ = await asyncio.wait_for(collect(group, len(members)), 30)
            status = await group.status()
            print(
                f"pass 1 done: {status.succeeded} succeeded, {status.failed} failed "
                f"({dict(sorted(statuses.items()))})"
            )

            pipeline.quota_exceeded = False  # the quota is back
            resumed = await group.resume()  # from the stored manifest alone
            again = [m.key for m, s in zip(members, resumed, strict=True) if s.newly_submitted]
            print(f"resume submitted again: {', '.join(again)}")
            print("pass 2 (finished documents first, at once):")
            _, totals = await asyncio.wait_for(collect(group, len(members)), 30)
        finally:
            await worker.shutdown()

        status = await group.status()
        cost = totals["tokens"] * CENTS_PER_1K_TOKENS / 1000
        print(f"all documents: {status.succeeded}/{status.total} succeeded")
        print(f"totals: {totals['pages']} pages, {totals['tokens']} tokens, {cost:.2f} cents")
        runs = pipeline.stage_runs
        print(
            f"stage runs: extract {runs['extract']}, summarize {runs['summarize']}, "
            f"classify {runs['classify']} for {len(members)} documents "
            f"(the resumed documents reused their memoized extraction)"
        )


if __name__ == "__main__":
    run_with_store(main)
