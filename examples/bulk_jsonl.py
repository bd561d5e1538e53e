"""A bulk run: one pipeline over every line of a JSONL file, outputs to JSONL.

    python -m examples.bulk_jsonl [STORE_DIR]

`Bulk` runs a pipeline over many inputs, each input one single-step run of
a run group. Here the inputs are product reviews read with `read_jsonl`
(one line is not JSON: it becomes a failed item, not a crash), the
pipeline scores each review's sentiment (an "LLM call", memoized together
with its token cost) and translates the non-English ones, and `JsonlSink`
writes one output record per review.

On the first pass the translator is over quota: those reviews fail.
Running the same file again resumes the batch: the reviews that succeeded
are skipped (their records are written again, so the new output file is
complete), the failed ones run again, and their memoized sentiment is read
back with its cost instead of being paid for twice.
"""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from pathlib import Path
from typing import Any

from durable.engine import StepError
from durable.engine.bulk import (
    Bulk,
    BulkContext,
    BulkOptions,
    BulkReport,
    CostReport,
    JsonlSink,
    read_jsonl,
)
from durable.store.queue import Queue
from examples._store_dir import run_with_store

REVIEWS = [
    {"id": "r1", "lang": "en", "text": "Boils water fast and looks great on the counter."},
    {"id": "r2", "lang": "de", "text": "Der Deckel klemmt, aber sonst gut."},
    {"id": "r3", "lang": "en", "text": "Stopped working after a week. Terrible."},
    {"id": "r4", "lang": "en", "text": "Quiet, quick, easy to clean. Love it."},
    {"id": "r5", "lang": "fr", "text": "Excellent rapport qualite prix."},
    {"id": "r6", "lang": "en", "text": "The handle gets hot. Disappointing."},
]
GOOD = {"great", "love", "excellent", "gut", "quick"}


class ReviewPipeline:
    """sentiment (memoized with its cost) -> translate (non-English only)."""

    def __init__(self) -> None:
        self.translator_over_quota = True
        self.calls: Counter[str] = Counter()  # what really ran

    async def run(self, ctx: BulkContext) -> dict[str, Any]:
        review = ctx.input

        async def sentiment() -> tuple[str, CostReport]:
            self.calls["sentiment"] += 1
            await asyncio.sleep(0.005)  # the LLM call
            words = {w.strip(".,").lower() for w in review["text"].split()}
            tokens = 30 + len(review["text"]) // 4
            label = "positive" if words & GOOD else "negative"
            return label, CostReport({"llm_tokens": tokens})

        label = await ctx.memoized_with_cached_cost("sentiment", sentiment)
        text = review["text"]
        if review["lang"] != "en":
            if self.translator_over_quota:
                raise StepError.permanent("translator: quota exceeded")
            self.calls["translate"] += 1
            ctx.record_cost("translations", 1)
            text = f"[{review['lang']}->en] {text}"
        return {"id": review["id"], "sentiment": label, "text": text}


def print_report(name: str, report: BulkReport) -> None:
    print(
        f"{name}: total {report.total}, succeeded {report.succeeded}, "
        f"failed {report.failed}, skipped {report.skipped}"
    )
    if report.failed_keys:
        print(f"  failed: {', '.join(report.failed_keys)}")
    costs = ", ".join(f"{metric} {value:g}" for metric, value in report.cost.entries())
    print(f"  cost: {costs or 'none'}")


async def main(store: Path) -> None:
    store.parent.mkdir(parents=True, exist_ok=True)
    source, output = store.parent / "reviews.jsonl", store.parent / "scored.jsonl"
    lines = [json.dumps(review) for review in REVIEWS]
    lines[3:3] = ["", '{"id": "r-broken", "lang": "en", "text": unterminated']
    source.write_text("\n".join(lines) + "\n")
    print(f"input: {len(REVIEWS)} reviews, a blank line and a line that is not JSON")

    async with await Queue.open(store) as queue:
        pipeline = ReviewPipeline()
        options = BulkOptions(key_fn=lambda i, review: str(review["id"]))
        bulk = Bulk(queue, pipeline, options).output(JsonlSink(output))

        first = await asyncio.wait_for(bulk.run(read_jsonl(source)), 30)
        print_report("pass 1", first)
        for record in map(json.loads, output.read_text().splitlines()):
            detail = record["output"]["sentiment"] if "output" in record else record["error"]
            print(f"  {record['key']}: {record['status']} ({detail})")

        pipeline.translator_over_quota = False  # the quota is back: run the file again
        calls = pipeline.calls["sentiment"]
        bulk.output(JsonlSink(output))  # a new sink writes the file anew
        second = await asyncio.wait_for(bulk.run(read_jsonl(source)), 30)
        print_report("pass 2", second)
        print(f"  sentiment calls in pass 2: {pipeline.calls['sentiment'] - calls}")

    written = [json.loads(line) for line in output.read_text().splitlines()]
    ok = sum(record["status"] == "succeeded" for record in written)
    print(f"output file: {len(written)} records, {ok} succeeded")
    print(
        f"calls: sentiment {pipeline.calls['sentiment']}, translate "
        f"{pipeline.calls['translate']} for {len(REVIEWS)} reviews"
    )


if __name__ == "__main__":
    run_with_store(main)
