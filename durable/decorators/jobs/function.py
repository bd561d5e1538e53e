"""``@job``: a function run as a background job on the engine's workers.

An ``async def`` function is awaited on the engine's event loop; a plain
``def`` one runs in a thread of the engine's pool
(``Engine(sync_threads=...)``, `durable.decorators.threads`).

```python
@job
async def send_email(to: str, subject: str) -> str: ...

async with Engine(...):
    handle = await send_email.submit("a@b.c", "hi")         # durable when it returns
    print(await handle.result())
    await send_email.options(idempotency_key="welcome-42").submit("a@b.c", "hi")
    results = await send_email.map([("a@b.c", "hi"), ("c@d.e", "yo")])
    async for index, result in send_email.map_as_completed(items): ...
    mapped = await send_email.submit_map(items)             # a MapHandle, at once
    print(await mapped.progress()); results = await mapped.results()
```

- ``await fn.submit(*args, **kwargs)`` submits one job and returns its
  `JobHandle`; ``fn.options(idempotency_key=..., priority=..., headers=...,
  run_at=..., max_attempts=...)`` returns a `JobSubmitter` with options.
- An idempotency key collapses duplicate submissions, while the job runs
  and after it ended (while its result is stored): the second submission
  returns a handle on the first job, ``newly_submitted=False``. The same
  key with other arguments raises `InputMismatch`.
- ``await fn.map(items)`` runs one job per item as a job group and returns
  their results in item order; ``fn.map_as_completed(items)`` yields
  ``(index, result)`` as they end (`durable.decorators.jobs.mapping`).
- ``await fn(*args, **kwargs)`` outside a workflow submits and waits for
  the result.

Inside a ``@workflow`` a job may be submitted (idempotently per run,
`durable.decorators.jobs.calls`) but not waited for.
"""

from __future__ import annotations

import datetime as _dt
import functools
import inspect
from collections.abc import AsyncIterator, Callable, Coroutine, Iterable, Mapping
from typing import Any, Generic, Literal, ParamSpec, Protocol, TypeVar, cast, overload

from durable.decorators.attempts import RetryPolicy
from durable.decorators.context import journaled_here
from durable.decorators.current import current_engine
from durable.decorators.executors import INLINE, check_executor_name
from durable.decorators.invocation import encode_invocation
from durable.decorators.jobs.calls import (
    bind_call,
    item_call,
    refuse_wait,
    single_parameter,
    workflow_key,
)
from durable.decorators.jobs.handle import JobHandle
from durable.decorators.jobs.kind import FunctionJob, JobSettings, make_job_type
from durable.decorators.jobs.mapping import MapHandle, MappedJobs, group_id_for_key
from durable.decorators.jobs.registry import JOBS
from durable.decorators.jobs.service import check_job_queue, runner_for
from durable.decorators.registry import check_callable, default_name
from durable.decorators.typed import return_hint
from durable.engine.jobs import DEFAULT_JOBS_QUEUE, job_id_for_key
from durable.engine.runs import RunOptions, validate_run_id
from durable.engine.runtime import WorkflowRuntime
from durable.errors import DecoratorError, InvalidArgument
from durable.store.queue.options import validate_queue_name

__all__ = ["JobDecorator", "JobFunction", "JobSubmitter", "job"]

P = ParamSpec("P")
R = TypeVar("R")
P2 = ParamSpec("P2")
R2 = TypeVar("R2")


class JobSubmitter(Generic[P, R]):
    """Submits jobs of one ``@job`` function with fixed options (``fn.options(...)``)."""

    def __init__(
        self,
        function: JobFunction[P, R],
        *,
        idempotency_key: str | None = None,
        priority: int | None = None,
        headers: Mapping[str, str] | None = None,
        run_at: int | _dt.datetime | None = None,
        max_attempts: int | None = None,
    ) -> None:
        if idempotency_key is not None:
            try:
                job_id_for_key(idempotency_key)
            except InvalidArgument as e:
                raise InvalidArgument(f"job {function.name!r}: {e}") from None
        # Checked now, not when the job is submitted.
        RunOptions(
            headers=dict(headers or {}),
            priority=priority,
            run_at=run_at,
            max_attempts_per_step=max_attempts,
        )
        self.function = function
        self.idempotency_key = idempotency_key
        self.priority = priority
        self.headers = dict(headers or {})
        self.run_at = run_at
        self.max_attempts = max_attempts

    def _options(self) -> dict[str, Any]:
        return {
            "max_attempts": self.max_attempts,
            "priority": self.priority,
            "run_at": self.run_at,
            "headers": self.headers,
        }

    def submit(self, *args: P.args, **kwargs: P.kwargs) -> Coroutine[Any, Any, JobHandle[R]]:
        """Submit a job calling the function with these arguments; its handle
        (durable when the await returns). Arguments that do not fit the
        signature raise `ArgumentMismatch` (a `TypeError`) here."""
        fn = self.function
        call = bind_call(fn.fn, fn.name, args, kwargs)
        key = self.idempotency_key if self.idempotency_key is not None else workflow_key(fn.name)
        return self._submit(call, key)

    async def _submit(
        self, call: tuple[tuple[Any, ...], dict[str, Any]], key: str | None
    ) -> JobHandle[R]:
        fn = self.function
        engine = current_engine(f"submitting job {fn.name!r}")
        await journaled_here()  # from a run: what it journaled is durable first
        job_id: str | None = None
        if key is not None:
            runner = runner_for(engine.for_run(job_id_for_key(key)), fn.job_type)
        elif engine.partitioned:  # the id routes the job: minted here, not by the runtime
            job_id = engine.new_run_id()
            runner = runner_for(engine.for_run(job_id), fn.job_type)
        else:
            runner = runner_for(engine, fn.job_type)
        job = fn.job_type(encode_invocation(engine.codec, fn.name, *call, kind="job"))
        submitted = await runner.submit(job, idempotency_key=key, job_id=job_id, **self._options())
        return JobHandle(
            engine,
            fn.job_type,
            submitted.id,
            fn.name,
            submitted.newly_submitted,
            return_hint(fn.fn),
        )

    # ---------------------------------------------------------------- map

    async def _map(self, items: Iterable[Any], keys: Iterable[str] | None) -> MappedJobs | None:
        fn = self.function
        engine = current_engine(f"mapping job {fn.name!r}")
        given = list(items)
        key_list = None if keys is None else list(keys)
        if key_list is not None and len(key_list) != len(given):
            raise InvalidArgument(
                f"job {fn.name!r}: map got {len(given)} items but {len(key_list)} keys; "
                "give one key per item"
            )
        if not given:
            return None
        single = single_parameter(fn.signature)
        calls = [
            bind_call(fn.fn, fn.name, *item_call(item, single, fn.name, i))
            for i, item in enumerate(given)
        ]
        if self.idempotency_key is not None:
            group_id = group_id_for_key(fn.name, self.idempotency_key)
        else:
            group_id = engine.new_run_id()
        # The group's manifest in the group id's partition; each member in its own.
        runner = runner_for(engine.for_run(group_id), fn.job_type)
        route = None
        if engine.partitioned:
            job_type = fn.job_type

            def route(job_id: str) -> WorkflowRuntime:
                return runner_for(engine.for_run(job_id), job_type).runtime

        jobs = [
            fn.job_type(encode_invocation(engine.codec, fn.name, *c, kind="job")) for c in calls
        ]
        return await MappedJobs.submit(
            engine.codec, runner, jobs, key_list, group_id, self._options(), route
        )

    @overload
    async def map(
        self,
        items: Iterable[Any],
        *,
        keys: Iterable[str] | None = None,
        return_exceptions: Literal[False] = False,
    ) -> list[R]: ...
    @overload
    async def map(
        self,
        items: Iterable[Any],
        *,
        keys: Iterable[str] | None = None,
        return_exceptions: bool,
    ) -> list[R | Exception]: ...
    async def map(
        self,
        items: Iterable[Any],
        *,
        keys: Iterable[str] | None = None,
        return_exceptions: bool = False,
    ) -> list[Any]:
        """Run one job per item, as a job group; their results in item order.

        Each item is the argument of a one-parameter function, else a tuple
        of positional or a dict of keyword arguments. ``keys`` (one per
        item, unique) name the members instead of their positions. The
        first job to fail raises its exception (the others keep running),
        unless ``return_exceptions``: then each failed job's exception
        takes its place in the list, as with `asyncio.gather`.
        """
        refuse_wait(f"{self.function.name}.map(...)")
        mapped = await self._map(items, keys)
        if mapped is None:
            return []
        return await mapped.gather(return_exceptions)

    async def submit_map(
        self, items: Iterable[Any], *, keys: Iterable[str] | None = None
    ) -> MapHandle:
        """Submit one job per item, as `map` does, and return at once: a
        `MapHandle` to follow the group's progress and gather the results.
        At least one item (`InvalidArgument`)."""
        mapped = await self._map(items, keys)
        if mapped is None:
            raise InvalidArgument(f"job {self.function.name!r}: submit_map needs at least one item")
        return MapHandle(mapped, self.function.name)

    async def map_as_completed(
        self,
        items: Iterable[Any],
        *,
        keys: Iterable[str] | None = None,
        return_exceptions: bool = False,
    ) -> AsyncIterator[tuple[int, Any]]:
        """`map`, yielding ``(index, result)`` of each job as it ends. A failed
        job raises its exception, or is yielded as the result with
        ``return_exceptions``."""
        refuse_wait(f"{self.function.name}.map_as_completed(...)")
        mapped = await self._map(items, keys)
        if mapped is None:
            return
        async for pair in mapped.completed(return_exceptions):
            yield pair

    def __repr__(self) -> str:
        return f"<submitter of job {self.function.name} key={self.idempotency_key!r}>"


class JobFunction(Generic[P, R]):
    """A ``@job`` function; see the module docstring."""

    def __init__(
        self, fn: Callable[P, Coroutine[Any, Any, R]] | Callable[P, R], settings: JobSettings
    ) -> None:
        self.fn = fn
        #: Name, queue, attempts, retried errors and timeout.
        self.settings = settings
        #: The engine job type that carries its calls.
        self.job_type: type[FunctionJob] = make_job_type(fn, settings)
        self.signature = inspect.signature(fn)
        functools.update_wrapper(self, fn)

    @property
    def name(self) -> str:
        """The durable name of the job function."""
        return self.settings.name

    @property
    def queue(self) -> str:
        """The queue its jobs run on."""
        return self.settings.queue

    def options(
        self,
        *,
        idempotency_key: str | None = None,
        priority: int | None = None,
        headers: Mapping[str, str] | None = None,
        run_at: int | _dt.datetime | None = None,
        max_attempts: int | None = None,
    ) -> JobSubmitter[P, R]:
        """A submitter with options: ``idempotency_key`` (collapses duplicate
        submissions, before and after the job ends; with ``map``, names the
        group), ``priority`` (lower runs first), ``headers`` (str -> str),
        ``run_at`` (not before: epoch ms or an aware datetime),
        ``max_attempts`` (instead of the decorator's)."""
        return JobSubmitter(
            self,
            idempotency_key=idempotency_key,
            priority=priority,
            headers=headers,
            run_at=run_at,
            max_attempts=max_attempts,
        )

    def submit(self, *args: P.args, **kwargs: P.kwargs) -> Coroutine[Any, Any, JobHandle[R]]:
        """Submit a job; its handle (see `JobSubmitter.submit`)."""
        return self.options().submit(*args, **kwargs)

    @overload
    async def map(
        self,
        items: Iterable[Any],
        *,
        keys: Iterable[str] | None = None,
        return_exceptions: Literal[False] = False,
    ) -> list[R]: ...
    @overload
    async def map(
        self,
        items: Iterable[Any],
        *,
        keys: Iterable[str] | None = None,
        return_exceptions: bool,
    ) -> list[R | Exception]: ...
    async def map(
        self,
        items: Iterable[Any],
        *,
        keys: Iterable[str] | None = None,
        return_exceptions: bool = False,
    ) -> list[Any]:
        """One job per item; their results in item order (see `JobSubmitter.map`)."""
        return await self.options().map(items, keys=keys, return_exceptions=return_exceptions)

    def submit_map(
        self, items: Iterable[Any], *, keys: Iterable[str] | None = None
    ) -> Coroutine[Any, Any, MapHandle]:
        """Submit one job per item; a `MapHandle` (see `JobSubmitter.submit_map`)."""
        return self.options().submit_map(items, keys=keys)

    def map_as_completed(
        self,
        items: Iterable[Any],
        *,
        keys: Iterable[str] | None = None,
        return_exceptions: bool = False,
    ) -> AsyncIterator[tuple[int, Any]]:
        """``(index, result)`` of each job as it ends (see `JobSubmitter.map_as_completed`)."""
        return self.options().map_as_completed(
            items, keys=keys, return_exceptions=return_exceptions
        )

    def handle(self, job_id: str) -> JobHandle[R]:
        """A handle on job ``job_id`` of this function (after a restart, or in
        another process); needs a running engine."""
        engine = current_engine(f"a handle on job {self.name!r}")
        job_id = validate_run_id(job_id)
        runner_for(engine.for_run(job_id), self.job_type)  # JobTypeError now if not run here
        return JobHandle(engine, self.job_type, job_id, self.name, result_type=return_hint(self.fn))

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> Coroutine[Any, Any, R]:
        refuse_wait(f"await {self.name}(...)")
        return self._submit_and_wait(*args, **kwargs)

    async def _submit_and_wait(self, *args: P.args, **kwargs: P.kwargs) -> R:
        handle = await self.submit(*args, **kwargs)
        return await handle.result()

    def __repr__(self) -> str:
        return f"<job {self.name} on queue {self.queue!r}>"


class JobDecorator(Protocol):
    """What ``@job(...)`` with options returns: decorates an ``async def``
    or a plain ``def`` function."""

    @overload
    def __call__(self, fn: Callable[P2, Coroutine[Any, Any, R2]], /) -> JobFunction[P2, R2]: ...
    @overload
    def __call__(self, fn: Callable[P2, R2], /) -> JobFunction[P2, R2]: ...
    def __call__(self, fn: Callable[..., Any], /) -> JobFunction[..., Any]:
        """Make ``fn`` a job function."""
        ...


@overload
def job(fn: Callable[P, Coroutine[Any, Any, R]], /) -> JobFunction[P, R]: ...


@overload
def job(fn: Callable[P, R], /) -> JobFunction[P, R]: ...


@overload
def job(
    *,
    name: str | None = None,
    queue: str | None = None,
    max_attempts: int | None = None,
    retry_on: type[Exception] | tuple[type[Exception], ...] = (Exception,),
    timeout: float | None = None,
    executor: str = INLINE,
) -> JobDecorator: ...


def job(
    fn: Callable[..., Any] | None = None,
    /,
    *,
    name: str | None = None,
    queue: str | None = None,
    max_attempts: int | None = None,
    retry_on: type[Exception] | tuple[type[Exception], ...] = (Exception,),
    timeout: float | None = None,
    executor: str = INLINE,
) -> JobFunction[..., Any] | JobDecorator:
    """Make a function a background job run by the engine's workers: an
    ``async def`` one on the event loop, a plain ``def`` one in a thread of
    the engine's pool (`durable.decorators.threads`; a timeout abandons it
    there, its outcome discarded).

    Bare (``@job``) or with options: ``name`` pins the durable name
    (default ``module.qualname``), ``queue`` runs its jobs on a queue of
    their own (default ``"jobs"``; not a workflow queue), ``max_attempts``
    bounds the claims of one job (default: the queue's, 3; a crash counts),
    ``retry_on`` the exceptions worth another attempt (any other fails the
    job at once), ``timeout`` the seconds one attempt may run. Retries wait
    the queue's backoff (1 s, doubling) without holding a worker. A
    non-function, or a name another job has, raises `DecoratorError`
    here, at decoration time. ``executor`` names the entry of
    ``Engine(executors=...)`` that calls the function (default ``"inline"``:
    in the engine's process; see `durable.decorators.executors`).
    """
    if isinstance(fn, str):
        raise DecoratorError(f"write @job(name={fn!r}), not @job({fn!r})")
    if name is not None and (not isinstance(name, str) or not name):
        raise DecoratorError(f"a job name must be a non-empty str, got {name!r}")
    queue = DEFAULT_JOBS_QUEUE if queue is None else queue
    try:
        validate_queue_name(queue)
    except ValueError as e:
        raise DecoratorError(f"@job(queue=...): {e}") from None
    if max_attempts is not None and (
        isinstance(max_attempts, bool) or not isinstance(max_attempts, int) or max_attempts < 1
    ):
        raise DecoratorError(f"max_attempts must be None or an int >= 1, got {max_attempts!r}")
    check_executor_name(executor, "@job")
    # The same checks as a step's retry_on and timeout.
    policy = RetryPolicy(
        retry_on=retry_on if isinstance(retry_on, tuple) else (retry_on,), timeout=timeout
    )

    def decorate(f: Callable[..., Any]) -> JobFunction[..., Any]:
        check_callable(f, "@job")
        settings = JobSettings(
            name=name or default_name(f),
            queue=queue,
            max_attempts=max_attempts,
            retry_on=policy.retry_on,
            timeout=policy.timeout,
            executor=executor,
        )
        check_job_queue(settings.queue, f"@job {settings.name!r}")
        function = JobFunction(f, settings)
        JOBS.register(function.job_type)
        return function

    if fn is not None:
        return decorate(fn)
    return cast(JobDecorator, decorate)
