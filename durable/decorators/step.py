"""``@step``: a journaled call inside a workflow.

Inside a running ``@workflow``, calling a step takes the next journal
position at once (before the first ``await``, so ``asyncio.gather(a(),
b())`` numbers ``a`` before ``b``) and returns an awaitable that:

- at a position the journal already holds (a replay), returns the recorded
  result, or raises the recorded exception, without running the step; a
  different step recorded there raises `NonDeterminismError`;
- otherwise runs the step per its `RetryPolicy` and journals the final
  result or exception: the entry's commit is not awaited here but at the
  run's next effectful point (before the next step's body, a durable wait,
  a signal...; `RunContext.journaled`), so it is durable before anything
  builds on it, and the entry of a run's last step rides one group commit
  with the run's terminal record.

A step's result comes back as the codec decodes it, on the first run as on
a replay, so both see the same value. With ``at_most_once=True`` the step
journals its start first; a replay that finds a start without a result
(a crash while the step ran) raises `StepMaybeExecutedError` instead of
running it again.

Outside a workflow, and inside another step's body, a step is a plain call
of its function: no journal, no retries, no timeout.

A plain ``def`` function is a step too: its body runs in a thread of the
engine's pool (`durable.decorators.threads`), with the same journal,
retries, timeout and ``at_most_once``, and is awaited like any step
(outside a workflow too: ``await`` runs it in a thread).
"""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import Callable, Coroutine
from contextlib import AbstractContextManager, nullcontext
from typing import Any, Generic, ParamSpec, Protocol, TypeVar, cast, overload

from durable import events
from durable.decorators import step_cache
from durable.decorators.attempts import RetryPolicy, run_attempts
from durable.decorators.backoff import Backoff
from durable.decorators.context import RunContext, active_run, in_step
from durable.decorators.current import engine_or_none
from durable.decorators.executors import INLINE, call_on, check_executor_name, executor_for
from durable.decorators.journal import START, STEP, Entry
from durable.decorators.registry import check_callable, default_name
from durable.decorators.step_cache import CachePolicy, cache_key_of, check_cache
from durable.decorators.streams import StepWriter, step_writer
from durable.decorators.suspend import Suspend
from durable.decorators.threads import is_sync
from durable.decorators.typed import converts, from_plain, return_hint
from durable.engine.outcomes import Immediate
from durable.errors import (
    CacheKeyError,
    CodecError,
    DecoratorError,
    StepMaybeExecutedError,
    UntrustedPayload,
)

__all__ = ["StepDecorator", "StepFunction", "step"]

P = ParamSpec("P")
R = TypeVar("R")
P2 = ParamSpec("P2")
R2 = TypeVar("R2")

#: The span of a step while tracing is off (`nullcontext` is reusable).
_NO_SPAN: AbstractContextManager[object] = nullcontext()
_KINDS = frozenset({STEP, START})


class StepFunction(Generic[P, R]):
    """A ``@step`` function; call it like the function it wraps."""

    def __init__(
        self,
        fn: Callable[P, Coroutine[Any, Any, R]] | Callable[P, R],
        *,
        name: str,
        policy: RetryPolicy,
        at_most_once: bool,
        executor: str = INLINE,
        cache: CachePolicy | None = None,
    ) -> None:
        self.fn = fn
        #: The name journaled with each call (default ``module.qualname``).
        self.name = name
        #: Attempts, backoff, retried errors and timeout.
        self.policy = policy
        #: Journal the start first; never run twice (`StepMaybeExecutedError`).
        self.at_most_once = at_most_once
        #: The name of the executor that calls the body (`durable.decorators.executors`).
        self.executor = executor
        #: A plain ``def`` body: run in a thread of the engine's pool.
        self.sync = is_sync(fn)
        #: Results cached across runs (`durable.decorators.step_cache`), or None.
        self.cache = cache
        functools.update_wrapper(self, fn)

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> Coroutine[Any, Any, R]:
        run = active_run()
        if run is None:
            if self.sync:
                return self._in_thread(args, kwargs)
            return self.fn(*args, **kwargs)  # type: ignore[return-value]
        position = run.next_position()
        return self._journaled(run, position, args, kwargs)

    async def _in_thread(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> R:
        """The plain call of a ``def`` body outside a workflow: in the current
        engine's pool, else in asyncio's default one."""
        engine = engine_or_none()
        if engine is None:
            result: R = await asyncio.to_thread(self.fn, *args, **kwargs)  # type: ignore[arg-type]
            return result
        result = await engine.threads.call(self.fn, args, kwargs)
        return result

    def __repr__(self) -> str:
        return f"<step {self.name}>"

    @property
    def result_type(self) -> Any:
        """The return annotation its results are validated into (read when
        first needed; `durable.decorators.typed`)."""
        return return_hint(self.fn)

    async def _journaled(
        self, run: RunContext, position: int, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> R:
        task = run.track()
        try:
            entry = run.entry_at(position, _KINDS, self.name, self.name)
            if entry is not None:
                if entry.resolved:
                    return self._typed(await run.replay(position, entry), run, position)
                raise StepMaybeExecutedError(run.run_id, position, self.name)
            await run.journaled()  # the steps before it are durable before it runs
            if run.draining.is_set():  # the engine stops: go on in the next process
                raise Suspend(Immediate())
            if self.cache is not None:
                return await self._cached(run, position, self.cache, args, kwargs)
            return await self._execute(run, position, args, kwargs)
        finally:
            run.untrack(task)

    async def _cached(
        self,
        run: RunContext,
        position: int,
        policy: CachePolicy,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
    ) -> R:
        """A step with a cache policy reached for the first time: its key,
        then the stored result journaled (a hit) or the body run (a miss);
        `durable.decorators.step_cache`."""
        what = f"step {self.name!r} (position {position} of run {run.run_id!r})"
        now = run.clock.now_ms()
        try:
            key = cache_key_of(policy, self.name, args, kwargs, run.run_id, position)
        except CacheKeyError as error:  # permanent: journaled like the body's error
            err = run.codec.dumps_error(error, what=f"the exception of {what}")
            await run.record(position, Entry(self.name, STEP, err=err, time=now, started=now))
            raise
        hit = await step_cache.lookup(run.engine, self.name, key, now)
        if hit is not None:
            try:
                value = run.codec.loads(hit, what=f"the cached result of {what}")
            except (CodecError, UntrustedPayload):  # another engine's codec: a miss
                pass
            else:
                began = time.perf_counter()
                done = Entry(self.name, STEP, ok=hit, time=run.clock.now_ms(), started=now)
                await run.record(position, done)
                self._ended(run.run_id, position, began, None)
                return self._typed(value, run, position)
        await step_cache.sweep(run.engine, now)
        return await self._execute(run, position, args, kwargs, (policy, key))

    def _delegated(
        self,
        run: RunContext,
        position: int,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        what: str,
    ) -> Callable[[], Coroutine[Any, Any, R]]:
        """The call of the body on the step's executor, one key per attempt;
        `UnknownExecutor` (permanent) when the engine was not given it."""
        executor = executor_for(run.engine.executors, self.executor, what)
        attempt = 0

        async def call() -> R:
            nonlocal attempt
            attempt += 1
            result: R = await call_on(
                executor,
                self.fn,
                args,
                kwargs,
                key=f"{run.run_id}/{run.incarnation}/{position}/{attempt}"
                if run.incarnation
                else f"{run.run_id}/{position}/{attempt}",
                run_id=run.run_id,
                step=self.name,
                name=self.executor,
            )
            return result

        return call

    def _ended(self, run_id: str, position: int, began: float, error: BaseException | None) -> None:
        """Emit the ``step_end`` event of the step at ``position``."""
        if not events.enabled("step_end"):
            return
        events.emit(
            "step_end",
            run_id=run_id,
            step=self.name,
            position=position,
            duration_ms=round((time.perf_counter() - began) * 1000, 3),
            ok=error is None,
            **({} if error is None else {"error": type(error).__name__}),
        )

    async def _execute(
        self,
        run: RunContext,
        position: int,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        cache: tuple[CachePolicy, str] | None = None,
    ) -> R:
        codec, clock = run.codec, run.clock
        what = f"step {self.name!r} (position {position} of run {run.run_id!r})"
        started = clock.now_ms()
        attempts = 0
        writer = StepWriter(run, position, self.name)  # its stream writes (`streams`)
        if self.at_most_once:
            await run.record(position, Entry(self.name, START, time=started))
        tracing, began = events.TRACING, time.perf_counter()
        if events.enabled("step_start"):
            events.emit("step_start", run_id=run.run_id, step=self.name, position=position)
        try:
            if self.executor == INLINE and self.sync:  # a `def` body: in the engine's pool
                threads = run.engine.threads

                async def call() -> R:
                    result: R = await threads.call(self.fn, args, kwargs)
                    return result

            elif self.executor == INLINE:  # awaited here, in the workflow's task

                def call() -> Coroutine[Any, Any, R]:
                    return self.fn(*args, **kwargs)  # type: ignore[return-value]

            else:
                call = self._delegated(run, position, args, kwargs, what)

            def before() -> None:
                nonlocal attempts
                run.check_writable(position, self.name)
                writer.begin()
                attempts += 1

            def on_retry(attempt: int, delay: float, error: Exception) -> None:
                writer.discard()
                events.emit(
                    "retry",
                    run_id=run.run_id,
                    step=self.name,
                    position=position,
                    attempt=attempt,
                    retry_in=delay,
                    error=repr(error),
                )

            span = (
                tracing.step_span(run.run_id, self.name, position)
                if tracing is not None
                else _NO_SPAN
            )
            with span, in_step(self.name), run.executing(position, self.name), step_writer(writer):
                result = await run_attempts(
                    self.policy, clock, call, what, before=before, on_retry=on_retry
                )
            ok = codec.dumps(result, what=f"the result of {what}")
        except Exception as error:
            err = codec.dumps_error(error, what=f"the exception of {what}")
            now = clock.now_ms()
            failed = Entry(self.name, STEP, err=err, time=now, started=started, attempts=attempts)
            writer.discard()  # its last attempt's stream values, before the journal entry
            await run.record_later(position, failed)
            self._ended(run.run_id, position, began, error)
            raise
        extra = None
        if cache is not None:  # the cache record commits with the journal entry
            policy, key = cache
            extra = await step_cache.stage_record(
                run.engine, self.name, key, policy, ok, run.run_id, position
            )
        now = clock.now_ms()
        done = Entry(self.name, STEP, ok=ok, time=now, started=started, attempts=attempts)
        writer.finish()  # its stream values are durable before its result
        await run.record_later(position, done, extra)
        writer.finished()
        self._ended(run.run_id, position, began, None)
        return self._typed(codec.loads(ok, what=f"the result of {what}"), run, position)

    def _typed(self, value: Any, run: RunContext, position: int) -> R:
        """The step's result validated into its return annotation
        (`durable.decorators.typed`; `TypeMismatch` naming run and step)."""
        hint = self.result_type
        if not converts(hint):
            return value  # type: ignore[no-any-return]
        what = f"the result of step {self.name!r} (position {position} of run {run.run_id!r})"
        typed: R = from_plain(value, hint, what)
        return typed


class StepDecorator(Protocol):
    """What ``@step(...)`` with options returns: decorates an ``async def``
    or a plain ``def`` function."""

    @overload
    def __call__(self, fn: Callable[P2, Coroutine[Any, Any, R2]], /) -> StepFunction[P2, R2]: ...
    @overload
    def __call__(self, fn: Callable[P2, R2], /) -> StepFunction[P2, R2]: ...
    def __call__(self, fn: Callable[..., Any], /) -> StepFunction[..., Any]:
        """Make ``fn`` a step."""
        ...


@overload
def step(fn: Callable[P, Coroutine[Any, Any, R]], /) -> StepFunction[P, R]: ...


@overload
def step(fn: Callable[P, R], /) -> StepFunction[P, R]: ...


@overload
def step(
    *,
    name: str | None = None,
    max_attempts: int = 1,
    backoff: Backoff | None = None,
    retry_on: type[Exception] | tuple[type[Exception], ...] = (Exception,),
    timeout: float | None = None,
    at_most_once: bool = False,
    executor: str = INLINE,
    cache_key: Callable[..., str] | None = None,
    cache_ttl: float | None = None,
) -> StepDecorator: ...


def step(
    fn: Callable[..., Any] | None = None,
    /,
    *,
    name: str | None = None,
    max_attempts: int = 1,
    backoff: Backoff | None = None,
    retry_on: type[Exception] | tuple[type[Exception], ...] = (Exception,),
    timeout: float | None = None,
    at_most_once: bool = False,
    executor: str = INLINE,
    cache_key: Callable[..., str] | None = None,
    cache_ttl: float | None = None,
) -> StepFunction[..., Any] | StepDecorator:
    """Make a function a journaled step of the workflows that call it.

    An ``async def`` body is awaited in the workflow's task; a plain
    ``def`` body runs in a thread of the engine's pool
    (``Engine(sync_threads=...)``; `durable.decorators.threads`) and is
    awaited the same way: ``await fetch(url)``.

    Bare (``@step``) or with options: ``name`` (journaled with each call;
    default ``module.qualname``), ``max_attempts`` (default 1: no retry),
    ``backoff`` between attempts (`Backoff`), ``retry_on`` (the exceptions
    worth another attempt; others end the step at once), ``timeout``
    (seconds per attempt; `TimeoutError` after it; a ``def`` body that
    overruns is abandoned in its thread, its outcome discarded) and
    ``at_most_once`` (never run twice, even across a crash; not with
    ``max_attempts > 1``) and ``executor`` (the name of an entry of
    ``Engine(executors=...)`` that calls the body, e.g. on a Dask cluster;
    default ``"inline"``: in the engine's process; see
    `durable.decorators.executors`). A step whose engine lacks its executor
    fails with `UnknownExecutor` without running; a lost worker
    (`WorkerLost`) is retried within ``max_attempts``.

    ``cache_key`` (a function of the step's arguments returning a ``str``)
    caches its results across runs, as Prefect's cache policies: a later
    run whose call of this step computes the same key reuses the stored
    result without running the body, until ``cache_ttl`` seconds of the
    engine clock have passed since it was stored (None: never expires);
    errors are never cached (`durable.decorators.step_cache`).

    Misuse raises `DecoratorError` here, at decoration time.
    """
    if fn is not None and not callable(fn) and isinstance(fn, str):
        raise DecoratorError(f"write @step(name={fn!r}), not @step({fn!r})")
    if name is not None and (not isinstance(name, str) or not name):
        raise DecoratorError(f"a step name must be a non-empty str, got {name!r}")
    if not isinstance(at_most_once, bool):
        raise DecoratorError(f"at_most_once must be True or False, got {at_most_once!r}")
    check_executor_name(executor, "@step")
    policy = RetryPolicy(
        max_attempts=max_attempts,
        backoff=backoff if backoff is not None else Backoff(),
        retry_on=retry_on if isinstance(retry_on, tuple) else (retry_on,),
        timeout=timeout,
    )
    if at_most_once and policy.max_attempts > 1:
        raise DecoratorError(
            "an at_most_once step runs at most once: drop max_attempts (or at_most_once)"
        )

    def decorate(f: Callable[..., Any]) -> StepFunction[..., Any]:
        check_callable(f, "@step")
        step_name = name or default_name(f)
        return StepFunction(
            f,
            name=step_name,
            policy=policy,
            at_most_once=at_most_once,
            executor=executor,
            cache=check_cache(step_name, cache_key, cache_ttl),
        )

    if fn is not None:
        return decorate(fn)
    return cast(StepDecorator, decorate)
