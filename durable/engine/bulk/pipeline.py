"""The pipeline of a bulk run, and the step runner that runs it on each item.

A pipeline is an async function taking a `BulkContext` and returning the
item's output (plain data), or an object with such a ``run`` method
(`Pipeline`). `BulkStepRunner` is the `StepRunner` of the bulk run's
runtime; for each item's single step it:

1. decodes the item (a payload that is not a bulk item fails the run
   permanently, and so does an `InvalidItem`, without running the pipeline);
2. runs the pipeline with the item's `BulkContext`;
3. succeeds with the envelope ``{output, cost}`` (`encode_result`); an
   output that is not plain data fails the run permanently.

An exception from the pipeline maps to a step error by its kind
(`StepError.from_exception`): a `StepError` keeps its kind, a
`DurableError` follows its ``transient`` flag, anything else is transient
(retried up to the queue's attempt limit, then the item fails).
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable
from typing import Any, Protocol, TypeAlias, runtime_checkable

from durable.engine.bulk.codec import decode_item, encode_result
from durable.engine.bulk.context import BulkContext
from durable.engine.delivery import Step
from durable.engine.outcomes import StepError, StepOutcome, Succeed
from durable.errors import InvalidArgument

__all__ = ["BulkStepRunner", "Pipeline", "PipelineFunction", "PipelineLike", "pipeline_function"]

#: An async function from an item's context to its output.
PipelineFunction: TypeAlias = Callable[[BulkContext], Awaitable[Any]]


@runtime_checkable
class Pipeline(Protocol):
    """An object whose ``run`` processes one item."""

    async def run(self, ctx: BulkContext) -> Any:
        """Process ``ctx.input``; return the item's output (plain data) or raise."""
        ...


#: What `Bulk` accepts as its pipeline.
PipelineLike: TypeAlias = Pipeline | PipelineFunction


def pipeline_function(pipeline: PipelineLike) -> PipelineFunction:
    """The function to call for each item: ``pipeline.run`` or ``pipeline`` itself.

    `InvalidArgument` for something that is neither, or for a function or
    method defined without ``async`` (a lambda returning a coroutine is
    fine; any other callable is checked when it runs: an item whose
    pipeline returns no awaitable fails permanently).
    """
    if isinstance(pipeline, type):
        raise InvalidArgument(
            f"the pipeline is the class {pipeline.__qualname__}: pass an instance of it"
        )
    run = getattr(pipeline, "run", None)
    function: Any = run if callable(run) else pipeline
    if not callable(function):
        raise InvalidArgument(
            f"a pipeline is an async function of a BulkContext, or an object with such a "
            f"run method; got {pipeline!r:.80}"
        )
    named = getattr(function, "__name__", "") != "<lambda>"  # a lambda may return a coroutine
    if (
        named
        and (inspect.isfunction(function) or inspect.ismethod(function))
        and not inspect.iscoroutinefunction(function)
    ):
        raise InvalidArgument(
            f"the pipeline {getattr(function, '__qualname__', function)!r} is not async: "
            "define it with `async def`"
        )
    return function  # type: ignore[no-any-return]  # checked callable above


class BulkStepRunner:
    """The `StepRunner` of a bulk run; see the module docstring."""

    __slots__ = ("_pipeline",)

    def __init__(self, pipeline: PipelineLike) -> None:
        self._pipeline = pipeline_function(pipeline)

    async def run_step(self, step: Step) -> StepOutcome:
        """Run the pipeline on the item carried by ``step``."""
        item = decode_item(step.payload, step.run_id)  # CorruptEngineRecord: permanent
        if item.invalid is not None:
            raise StepError.permanent(f"bulk item {item.key!r} is invalid: {item.invalid}")
        ctx = BulkContext(step, item.key, item.input)
        pending = self._pipeline(ctx)
        if not inspect.isawaitable(pending):
            raise StepError.permanent(
                f"bulk item {item.key!r}: the pipeline returned {pending!r:.80} instead of an "
                "awaitable; define it with `async def`"
            )
        output = await pending  # its exceptions map to step errors in the worker
        try:
            return Succeed(encode_result(output, ctx.cost))
        except TypeError as e:
            raise StepError.permanent(f"bulk item {item.key!r}: {e}") from e
