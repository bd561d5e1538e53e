"""How calls of a ``@job`` function become job inputs, and the rules inside workflows.

Arguments are bound to the function's signature before they are encoded
(`bind_call`), so a missing or unexpected argument raises
`ArgumentMismatch` (a `TypeError`) at the call, and ``f(1, b=2)``,
``f(a=1, b=2)`` and ``f(1, 2)`` are one input: duplicate submissions under
one idempotency key compare equal bytes.

The items of ``map`` (`item_call`): a function of exactly one parameter
takes each item as that argument, whatever it is; any other function takes
a tuple as its positional arguments and a dict as its keyword arguments.

Inside a running ``@workflow`` (`in_workflow`) a submission without an
idempotency key gets one from the run id, the order of the run's job
submissions and the job's name (`workflow_key`), so a replay of the
workflow finds the job it submitted instead of submitting another. Waiting
for a job there is refused (`refuse_wait`): it would hold the run's worker
and is not journaled.
"""

from __future__ import annotations

import inspect
import itertools
import weakref
from collections.abc import Callable, Mapping
from typing import Any

from durable.decorators.context import RunContext, active_run
from durable.decorators.invocation import bind_arguments
from durable.errors import DecoratorError

__all__ = [
    "bind_call",
    "in_workflow",
    "item_call",
    "refuse_wait",
    "single_parameter",
    "workflow_key",
]

_counters: weakref.WeakKeyDictionary[RunContext, itertools.count[int]] = weakref.WeakKeyDictionary()


def bind_call(
    fn: Callable[..., Any], name: str, args: tuple[Any, ...], kwargs: Mapping[str, Any]
) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """``args`` and ``kwargs`` in their canonical form for the signature of
    ``fn`` (defaults not applied); `ArgumentMismatch` (a `TypeError`) naming
    job ``name`` and the argument if they do not fit."""
    bound = bind_arguments(fn, "job", name, args, kwargs)
    return bound.args, dict(bound.kwargs)


def single_parameter(signature: inspect.Signature) -> bool:
    """True if the function takes exactly one parameter, which can be positional."""
    params = list(signature.parameters.values())
    return len(params) == 1 and params[0].kind in (
        inspect.Parameter.POSITIONAL_ONLY,
        inspect.Parameter.POSITIONAL_OR_KEYWORD,
        inspect.Parameter.VAR_POSITIONAL,
    )


def item_call(
    item: object, single: bool, name: str, index: int
) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """The arguments of ``map`` item ``index``; see the module docstring."""
    if single:
        return (item,), {}
    if isinstance(item, tuple):
        return item, {}
    if isinstance(item, dict):
        return (), dict(item)
    raise TypeError(
        f"job {name!r}: map item {index} is a {type(item).__name__}; give each item as a "
        "tuple of positional arguments or a dict of keyword arguments (a single value "
        "only for a function of one parameter)"
    )


def in_workflow() -> bool:
    """True while workflow code runs here (not inside a step's body)."""
    return active_run() is not None


def workflow_key(name: str) -> str | None:
    """The idempotency key of the next submission of job ``name`` by the running
    workflow; None outside a workflow."""
    run = active_run()
    if run is None:
        return None
    counter = _counters.get(run)
    if counter is None:
        counter = _counters[run] = itertools.count()
    return f"{run.run_id}/jobs/{next(counter)}/{name}"


def refuse_wait(what: str) -> None:
    """`DecoratorError` if workflow code runs here: waiting for a job is not
    durable there."""
    if in_workflow():
        raise DecoratorError(
            f"{what} inside a @workflow would hold the run's worker until the job ends, "
            "and the wait is not journaled: call the work as a @step (or a child "
            "@workflow) instead, or submit the job with `.submit(...)` (idempotent "
            "per run) and wait for it outside the workflow"
        )
