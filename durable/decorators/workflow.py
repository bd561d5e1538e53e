"""``@workflow``: an async function whose runs are durable.

A workflow is identified by its name (`durable.decorators.registry`) and
runs on its queue (``"workflows"`` unless ``queue=`` names another, with
its own concurrency limit on the `Engine`). Its runs:

- ``await wf.start(*args, **kwargs)`` starts one and returns its
  `WorkflowHandle` (durable when it returns);
- ``await wf.options(run_id=..., priority=..., headers=..., run_at=..., attributes=...,
  dedup_key=..., debounce=..., key=...).start(...)`` starts one with options;
- ``await wf(*args, **kwargs)`` outside a workflow starts one and waits for
  its result; inside a workflow it runs a *child* workflow
  (`durable.decorators.children`).

Each of them checks the arguments against the function's signature first:
a missing or unexpected argument raises `ArgumentMismatch` (a `TypeError`)
naming the workflow, and nothing starts.

The function's code must be deterministic in the order it calls steps,
waits and child workflows: a run re-executes it after every wait and every
crash, and the journal answers the calls it already made.
"""

from __future__ import annotations

import datetime as _dt
import functools
from collections.abc import Callable, Coroutine, Mapping
from typing import Any, Generic, ParamSpec, TypeVar, overload

from durable.decorators.attributes import start_attributes
from durable.decorators.children import call_child
from durable.decorators.context import active_run
from durable.decorators.current import current_engine
from durable.decorators.debounce import check_debounce, debounced_start
from durable.decorators.dedup import check_dedup_key, dedup_records, dedup_run_id, owner_decision
from durable.decorators.handles import WorkflowHandle
from durable.decorators.invocation import bind_arguments, encode_invocation
from durable.decorators.ratelimit import RateLimit
from durable.decorators.registry import (
    DEFAULT_QUEUE,
    REGISTRY,
    WorkflowDefinition,
    check_async,
    default_name,
)
from durable.decorators.run_limits import check_limits, check_start_options, set_limits
from durable.decorators.schedules import declare_schedule
from durable.decorators.submit import submit_run
from durable.decorators.typed import from_plain, return_hint
from durable.decorators.versions import check_version, code_version
from durable.engine.records import input_digest
from durable.engine.runs import RunOptions, validate_run_id
from durable.errors import DecoratorError, InvalidArgument
from durable.store.queue.options import validate_queue_name

__all__ = ["Workflow", "WorkflowStarter", "workflow"]

P = ParamSpec("P")
R = TypeVar("R")


class WorkflowStarter(Generic[P, R]):
    """Starts runs of one workflow with fixed options (``workflow.options(...)``)."""

    def __init__(
        self,
        definition: WorkflowDefinition,
        *,
        run_id: str | None = None,
        priority: int | None = None,
        headers: Mapping[str, str] | None = None,
        run_at: int | _dt.datetime | None = None,
        attributes: Mapping[str, str] | None = None,
        timeout: float | None = None,
        concurrency_key: str | None = None,
        dedup_key: str | None = None,
        debounce: float | None = None,
        key: str | None = None,
    ) -> None:
        if run_id is not None:
            validate_run_id(run_id)
        self.timeout = check_start_options(definition.name, timeout, concurrency_key)
        self.concurrency_key = concurrency_key
        name = definition.name
        if dedup_key is not None:
            check_dedup_key(dedup_key, name)
        if debounce is not None:
            debounce = check_debounce(debounce, key, name)
            if run_id is not None or run_at is not None or dedup_key is not None:
                raise InvalidArgument(
                    f"workflow {name!r}: debounce cannot be combined with run_id, run_at "
                    "or dedup_key"
                )
        elif key is not None:
            raise InvalidArgument(f"workflow {name!r}: key= names a debounce key: give debounce=")
        # Checked now, not when the run starts.
        RunOptions(headers=dict(headers or {}), priority=priority, run_at=run_at)
        what = f"run {run_id!r}" if run_id else f"a run of workflow {definition.name!r}"
        self.attributes = start_attributes(attributes or {}, what)
        self.definition = definition
        self.run_id = run_id
        self.priority = priority
        self.headers = dict(headers or {})
        self.run_at = run_at
        self.dedup_key = dedup_key
        self.debounce = debounce
        self.key = key

    async def start(self, *args: P.args, **kwargs: P.kwargs) -> WorkflowHandle[R]:
        """Start a run with these arguments; its handle (durable when this returns).
        Arguments that do not fit the workflow's signature raise
        `ArgumentMismatch` (a `TypeError`) naming it, and start nothing."""
        return await self._start(args, kwargs, None)

    async def start_with_signal(
        self, *args: Any, key: str, value: object = None, **kwargs: Any
    ) -> WorkflowHandle[R]:
        """Start the run of this starter's ``run_id`` if it is absent and
        deliver the signal ``value`` under ``key`` to it (what
        ``durable.wait_for_signal(key)`` returns), in one call: the first
        message of a chat and the later ones go the same way. Where the
        key's home is the run's partition (always on one store) a new run
        and its signal commit together; see `durable.decorators.start_signal`.
        Its handle; `WrongRunState` for a run that has ended (nothing sent).
        (``key`` and ``value`` are keyword-only, so the arguments are not
        type-checked against the workflow here: `ArgumentMismatch` at the call.)"""
        from durable.decorators.start_signal import start_with_signal

        return await start_with_signal(self, args, kwargs, key, value)

    async def _start(
        self,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        extra: Mapping[bytes, bytes] | None,
    ) -> WorkflowHandle[R]:
        """`start`, committing the reserved KV puts ``extra`` with a new run."""
        definition = self.definition
        bind_arguments(definition.fn, "workflow", definition.name, args, kwargs)
        engine = current_engine(f"starting workflow {definition.name!r}")
        payload = encode_invocation(engine.codec, definition.name, args, kwargs)
        if self.debounce is not None:  # durable.decorators.debounce
            debounced = await debounced_start(
                engine,
                definition,
                payload,
                self.debounce,
                self.key,
                priority=self.priority,
                headers=self.headers,
                attributes=self.attributes,
            )
            # The last start's arguments win.
            return WorkflowHandle(engine, debounced, result_type=return_hint(definition.fn))
        run_id, records = self.run_id, dict(extra) if extra else None
        if self.dedup_key is not None:  # durable.decorators.dedup
            run_id = dedup_run_id(engine, definition.name, self.dedup_key, run_id)
            records = {**(records or {}), **dedup_records(definition.name, self.dedup_key, run_id)}
        run_id = await submit_run(
            engine,
            self.definition,
            payload,
            run_id=run_id,
            priority=self.priority,
            headers=self.headers,
            run_at=self.run_at,
            attributes=self.attributes,
            timeout=self.timeout,
            concurrency_key=self.concurrency_key,
            records=records,
        )
        if self.dedup_key is not None:
            runtime = engine.for_run(run_id).workflows.runtime_for(definition.queue)
            await owner_decision(runtime, definition.name, self.dedup_key, run_id)
        return WorkflowHandle(
            engine,
            run_id,
            input_digest=input_digest(payload),
            result_type=return_hint(definition.fn),
        )

    def __repr__(self) -> str:
        return f"<starter of workflow {self.definition.name} run_id={self.run_id!r}>"


class Workflow(Generic[P, R]):
    """A ``@workflow`` function; see the module docstring."""

    def __init__(
        self,
        fn: Callable[P, Coroutine[Any, Any, R]],
        *,
        name: str,
        queue: str,
        version: str | None = None,
        rate_limit: RateLimit | None = None,
    ) -> None:
        self.fn = fn
        #: Name, function, queue, version and rate limit, as registered.
        self.definition = WorkflowDefinition(
            name, fn, queue, version or code_version(fn), rate_limit=rate_limit
        )
        functools.update_wrapper(self, fn)

    @property
    def name(self) -> str:
        """The durable name of the workflow."""
        return self.definition.name

    @property
    def queue(self) -> str:
        """The queue its runs execute on."""
        return self.definition.queue

    @property
    def version(self) -> str:
        """The code's version, recorded with each run started here: the pinned
        ``version=``, else derived from the function's code
        (`durable.decorators.versions`)."""
        return self.definition.version or ""

    def options(
        self,
        *,
        run_id: str | None = None,
        priority: int | None = None,
        headers: Mapping[str, str] | None = None,
        run_at: int | _dt.datetime | None = None,
        attributes: Mapping[str, str] | None = None,
        timeout: float | None = None,
        concurrency_key: str | None = None,
        dedup_key: str | None = None,
        debounce: float | None = None,
        key: str | None = None,
    ) -> WorkflowStarter[P, R]:
        """A starter with options: ``run_id`` (one run per id: starting it again
        returns that run), ``priority`` (lower runs first), ``headers``
        (str -> str, reported with the outcome), ``run_at`` (not before:
        epoch ms or an aware datetime), ``attributes`` (a few searchable
        str -> str pairs: ``engine.runs(attributes=...)``;
        `durable.decorators.attributes`), ``timeout`` (seconds this run has
        to end, instead of the workflow's ``timeout``;
        `durable.decorators.run_timeout`), ``concurrency_key`` (the key whose
        slots the run takes: at most the workflow's ``concurrency_per_key``
        runs of one key are active at once;
        `durable.decorators.keyed_concurrency`), ``dedup_key`` (no start while
        an active run of this workflow holds the key: `DuplicateStart`;
        `durable.decorators.dedup`), ``debounce`` seconds with ``key`` (starts
        of a key collapse into one run that begins ``debounce`` seconds after
        the last of them, with its arguments; `durable.decorators.debounce`)."""
        return WorkflowStarter(
            self.definition,
            run_id=run_id,
            priority=priority,
            headers=headers,
            run_at=run_at,
            attributes=attributes,
            timeout=timeout,
            concurrency_key=concurrency_key,
            dedup_key=dedup_key,
            debounce=debounce,
            key=key,
        )

    async def start(self, *args: P.args, **kwargs: P.kwargs) -> WorkflowHandle[R]:
        """Start a run; its handle (durable when this returns)."""
        return await self.options().start(*args, **kwargs)

    def handle(self, run_id: str) -> WorkflowHandle[R]:
        """A typed handle on run ``run_id`` of this workflow (after a restart,
        or in another process): ``result()`` returns an ``R``, validated into
        the workflow's return annotation. No I/O: the run is not looked up
        (an unknown one raises `RunNotFound` when the handle is used); needs
        a running engine (`NoEngine`)."""
        engine = current_engine(f"a handle on a run of workflow {self.name!r}")
        return WorkflowHandle(engine, run_id, result_type=return_hint(self.fn))

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> Coroutine[Any, Any, R]:
        # Checked here, at the call (also of a child workflow, before it takes
        # a journal position): `ArgumentMismatch` naming the workflow.
        bind_arguments(self.fn, "workflow", self.name, args, kwargs)
        run = active_run()
        if run is not None:
            return self._typed_child(call_child(run, self.definition, args, kwargs))
        return self._start_and_wait(*args, **kwargs)

    async def _typed_child(self, child: Coroutine[Any, Any, Any]) -> R:
        """A child run's result, validated into the return annotation."""
        value: R = from_plain(
            await child, return_hint(self.fn), f"the result of child workflow {self.name!r}"
        )
        return value

    async def _start_and_wait(self, *args: P.args, **kwargs: P.kwargs) -> R:
        handle = await self.start(*args, **kwargs)
        return await handle.result()

    def __repr__(self) -> str:
        return f"<workflow {self.name} on queue {self.queue!r}>"


@overload
def workflow(fn: Callable[P, Coroutine[Any, Any, R]], /) -> Workflow[P, R]: ...


@overload
def workflow(
    *,
    name: str | None = None,
    queue: str | None = None,
    version: str | None = None,
    schedule: str | None = None,
    schedule_timezone: str = "UTC",
    timeout: float | None = None,
    concurrency_per_key: int | None = None,
    rate_limit: tuple[int, float] | None = None,
) -> Callable[[Callable[P, Coroutine[Any, Any, R]]], Workflow[P, R]]: ...


def workflow(
    fn: Callable[P, Coroutine[Any, Any, R]] | None = None,
    /,
    *,
    name: str | None = None,
    queue: str | None = None,
    version: str | None = None,
    schedule: str | None = None,
    schedule_timezone: str = "UTC",
    timeout: float | None = None,
    concurrency_per_key: int | None = None,
    rate_limit: tuple[int, float] | None = None,
) -> Workflow[P, R] | Callable[[Callable[P, Coroutine[Any, Any, R]]], Workflow[P, R]]:
    """Make an async function a durable workflow.

    Bare (``@workflow``) or with options: ``name`` pins the durable name
    (default ``module.qualname``; keep it when you move or rename the
    function, or runs in flight cannot find it), ``queue`` runs it on a
    queue of its own (with its own concurrency limit on the `Engine`),
    ``version`` pins the version recorded with each run (default: derived
    from the function's code; `durable.decorators.versions`).
    ``schedule`` (a five-field cron expression, read in IANA zone
    ``schedule_timezone``) starts a run, without arguments, at each fire
    once an engine that knows the workflow owns the store
    (`durable.decorators.schedules`; a bad expression or zone, or a
    workflow that needs arguments, is refused here).
    ``timeout`` (seconds, > 0): a run not ended that long after it started
    is cancelled, its children too, and ``result()`` raises `RunTimedOut`
    (`durable.decorators.run_timeout`). ``concurrency_per_key`` (n >= 1):
    at most n runs started with one ``.options(concurrency_key=...)`` are
    active at once (`durable.decorators.keyed_concurrency`).
    ``rate_limit=(n, period_s)``: at most ``n`` runs start executing per
    ``period_s`` seconds, across every process on the store; the others wait
    (`durable.decorators.ratelimit`; a bad value is refused here).
    A non-async function, or a name another workflow has, raises
    `DecoratorError` here, at decoration time.
    """
    if isinstance(fn, str):
        raise DecoratorError(f"write @workflow(name={fn!r}), not @workflow({fn!r})")
    if name is not None and (not isinstance(name, str) or not name):
        raise DecoratorError(f"a workflow name must be a non-empty str, got {name!r}")
    if queue is not None:
        try:
            validate_queue_name(queue)
        except ValueError as e:
            raise DecoratorError(f"@workflow(queue=...): {e}") from None
    version = check_version(version)

    def decorate(f: Callable[P, Coroutine[Any, Any, R]]) -> Workflow[P, R]:
        check_async(f, "@workflow")
        wf_name = name or default_name(f)
        limits = check_limits(wf_name, timeout, concurrency_per_key)
        rate = None if rate_limit is None else RateLimit.parse(rate_limit, wf_name)
        wf = Workflow(
            f, name=wf_name, queue=queue or DEFAULT_QUEUE, version=version, rate_limit=rate
        )
        REGISTRY.register(wf.definition)
        set_limits(wf_name, limits)
        declare_schedule(wf.definition, schedule, schedule_timezone)
        return wf

    if fn is not None:
        return decorate(fn)
    return decorate
