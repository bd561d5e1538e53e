"""Executors: where the body of a ``@step`` or ``@job`` runs.

The engine keeps the orchestration (it numbers each step, journals it,
replays it, waits durably and settles the run); an *executor* only calls
the body. ``@step(executor="dask")`` names one, and the engine maps the name
to an object of the `StepExecutor` protocol:

```python
async with Engine(url, executors={"dask": client}) as engine: ...
```

``"inline"`` (the default, `INLINE`) awaits the body in this process, as
every step ran before executors existed; it needs no entry and its name is
reserved. A ``distributed.Client`` given in ``executors=`` is wrapped in
`durable.executors.dask.DaskExecutor` (recognised by its module, so
``distributed`` is imported only when a client is given).

The protocol is one method, ``await executor.run(fn, args, kwargs,
key=key)``: call ``fn(*args, **kwargs)`` (awaiting it when it is a
coroutine function) and return its result, or raise the exception the body
raised. ``key`` names the attempt, unique per attempt (``run/position/
attempt-token``): an executor may use it to name its task. When the call
is lost without an answer from the body (a worker, a connection or a
scheduler went away) the executor raises `durable.errors.WorkerLost`; the
step names its run, step and executor in it and attempts the step again
per its retry policy. When the awaiting task is cancelled (the run is
cancelled, its delivery ends, the step times out) the executor abandons the
call and discards its result.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from typing import Any, Protocol, runtime_checkable

from durable.errors import DecoratorError, InvalidArgument, UnknownExecutor, WorkerLost

__all__ = [
    "INLINE",
    "InlineExecutor",
    "StepExecutor",
    "call_on",
    "check_executor_name",
    "check_executors",
    "executor_for",
]

#: The name of the in-process executor: the default, reserved.
INLINE = "inline"


@runtime_checkable
class StepExecutor(Protocol):
    """Calls step and job bodies; see the module docstring."""

    async def run(
        self,
        fn: Callable[..., Any],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        *,
        key: str,
    ) -> Any:
        """``fn(*args, **kwargs)``'s result (awaited if it is a coroutine), or its exception."""
        ...


class InlineExecutor:
    """Awaits the body in this process, on the engine's event loop (the default)."""

    async def run(
        self,
        fn: Callable[..., Any],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        *,
        key: str,
    ) -> Any:
        """Call ``fn`` here; ``key`` is unused."""
        result = fn(*args, **kwargs)
        if inspect.isawaitable(result):
            return await result
        return result

    def __repr__(self) -> str:
        return "<InlineExecutor>"


def check_executor_name(name: object, where: str) -> str:
    """``name`` if it is a usable executor name for a decorator, else `DecoratorError`."""
    if not isinstance(name, str) or not name:
        raise DecoratorError(
            f"{where}: executor must be a non-empty str naming an entry of "
            f"Engine(executors=...) (or 'inline'), got {name!r}"
        )
    return name


def _is_dask_client(value: object) -> bool:
    cls = type(value)
    return cls.__module__.split(".")[0] == "distributed" and cls.__name__ == "Client"


def check_executors(executors: Mapping[str, object] | None) -> dict[str, StepExecutor]:
    """The executors of ``Engine(executors=...)``, checked (`InvalidArgument`
    naming the bad entry); a ``distributed.Client`` becomes a `DaskExecutor`."""
    if executors is None:
        return {}
    if not isinstance(executors, Mapping):
        raise InvalidArgument(
            f"executors must be a mapping of names to executors, got {executors!r}"
        )
    checked: dict[str, StepExecutor] = {}
    for name, value in executors.items():
        if not isinstance(name, str) or not name:
            raise InvalidArgument(f"executors keys are non-empty names (str), got {name!r}")
        if name == INLINE:
            raise InvalidArgument(
                f"executors[{INLINE!r}]: the name is reserved for the in-process executor "
                "(the default); name yours otherwise"
            )
        if _is_dask_client(value):
            from durable.executors.dask import DaskExecutor

            checked[name] = DaskExecutor(value)
        elif isinstance(value, StepExecutor) and inspect.iscoroutinefunction(value.run):
            checked[name] = value
        else:
            raise InvalidArgument(
                f"executors[{name!r}] must be a distributed.Client or an object with "
                f"`async def run(fn, args, kwargs, *, key)` (durable.StepExecutor), got {value!r}"
            )
    return checked


def executor_for(executors: Mapping[str, StepExecutor], name: str, what: str) -> StepExecutor:
    """The executor called ``name``; `UnknownExecutor` (naming ``what`` and the
    names the engine has) when the engine was not given it."""
    if name == INLINE:
        return _INLINE
    found = executors.get(name)
    if found is None:
        raise UnknownExecutor(name, what, sorted([INLINE, *executors]))
    return found


async def call_on(
    executor: StepExecutor,
    fn: Callable[..., Any],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    *,
    key: str,
    run_id: str,
    step: str,
    name: str,
) -> Any:
    """``executor.run(fn, args, kwargs, key=key)``; a `WorkerLost` it raises
    is raised again naming run ``run_id``, step ``step`` and executor ``name``."""
    try:
        return await executor.run(fn, args, kwargs, key=key)
    except WorkerLost as lost:
        raise WorkerLost(lost.reason, run_id=run_id, step=step, executor=name) from lost.__cause__


_INLINE = InlineExecutor()
