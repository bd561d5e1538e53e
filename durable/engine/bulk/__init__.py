"""Bulk runs: one pipeline over many inputs, each item one single-step run.

Write the pipeline (an async function of a `BulkContext`, returning the
item's output), build a `Bulk` on a queue, give it a sink and run it over
the inputs::

    async def enrich(ctx: BulkContext) -> dict[str, Any]:
        text = await ctx.memoized("fetch", lambda: fetch(ctx.input["url"]))
        ctx.record_cost("bytes", len(text))
        return {"url": ctx.input["url"], "words": len(text.split())}

    bulk = Bulk(queue, enrich, BulkOptions(fail_threshold=5)).output(JsonlSink("out.jsonl"))
    report = await bulk.run(read_jsonl("in.jsonl"))
    print(report.succeeded, report.failed, report.cost.get("bytes"))

The batch is a run group (`durable.engine.groups`): running the same inputs
again skips the items that succeeded and re-runs the others, whose memoized
stages are read back instead of being run again.

Modules: `bulk` (the run), `options`, `pipeline` (the step runner),
`context` (what the pipeline sees), `cost`, `codec` (how items and
results are stored), `progress` (counts and the report), `sinks` and
`sources` (JSONL in and out).
"""

from durable.engine.bulk.bulk import Bulk, batch_group_id
from durable.engine.bulk.codec import InvalidItem
from durable.engine.bulk.context import BulkContext
from durable.engine.bulk.cost import CostReport
from durable.engine.bulk.options import (
    DEFAULT_BULK_MEMO_PREFIX,
    DEFAULT_BULK_QUEUE,
    BulkOptions,
    KeyFunction,
)
from durable.engine.bulk.pipeline import Pipeline, PipelineFunction, PipelineLike
from durable.engine.bulk.progress import BulkProgress, BulkReport
from durable.engine.bulk.sinks import JsonlSink, NullSink, OutputRecord, Sink
from durable.engine.bulk.sources import read_jsonl

__all__ = [
    "DEFAULT_BULK_MEMO_PREFIX",
    "DEFAULT_BULK_QUEUE",
    "Bulk",
    "BulkContext",
    "BulkOptions",
    "BulkProgress",
    "BulkReport",
    "CostReport",
    "InvalidItem",
    "JsonlSink",
    "KeyFunction",
    "NullSink",
    "OutputRecord",
    "Pipeline",
    "PipelineFunction",
    "PipelineLike",
    "Sink",
    "batch_group_id",
    "read_jsonl",
]
