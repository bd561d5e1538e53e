"""The engine job type of a ``@job`` function.

Each ``@job`` function becomes a subclass of `FunctionJob`, a
`durable.engine.jobs.Job` whose ``NAME`` is the function's durable name and
whose one field, ``call``, is the invocation: the arguments encoded by the
engine's codec (`durable.decorators.invocation`), bound to the function's
signature first, so equal calls are equal bytes (which is what duplicate
detection compares). Its output is the codec-encoded result.

`FunctionJob.run` checks the stored call against the function's signature
(a job whose arguments no longer fit, the code having changed while it
was queued, fails at once with `ArgumentMismatch`), decodes it and awaits
the function, while:

- the delivery's lease is extended in the background (`keep_leased`), so a
  long job is not taken for a crashed one;
- a cancellation of the job (`JobHandle.cancel`) cancels the function's
  task;
- ``timeout`` (seconds of the engine's clock per attempt) cancels it with
  `TimeoutError`.

A plain ``def`` function runs in a thread of the engine's pool
(`durable.decorators.threads`): a timeout or a cancellation abandons it
there (it runs on, unobserved; its outcome is discarded).

With ``executor=`` the function is called by that executor of the engine
(`durable.decorators.executors`): a lost worker (`WorkerLost`) is
transient, an executor the engine lacks (`UnknownExecutor`) permanent.

An exception becomes a `StepError`: transient (the queue retries the job
after its backoff) when it is one of ``retry_on`` and not a non-transient
durable error, else permanent. A stored argument this engine cannot verify
(`UntrustedPayload`) is logged and retried, whatever ``retry_on`` says,
within the job's attempts. When no attempt follows, the error's reason
carries the exception encoded by the codec (`durable.decorators.outcome`),
so ``handle.result()`` raises it again.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable, Coroutine, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

from durable._logging import get_logger
from durable.decorators.attempts import call_with_timeout
from durable.decorators.codec import Codec
from durable.decorators.executors import INLINE, StepExecutor, call_on, executor_for
from durable.decorators.invocation import decode_invocation
from durable.decorators.outcome import encode_failure
from durable.decorators.threads import SyncThreads, is_sync
from durable.engine.jobs import Job, JobContext
from durable.engine.outcomes import StepError, StepErrorKind
from durable.errors import RunCancelled, UnknownExecutor, UntrustedPayload, WorkerLost
from durable.store.clock import Clock
from durable.store.queue import LeaseHandle

__all__ = ["LEASE_MARGIN", "FunctionJob", "JobEnv", "JobSettings", "keep_leased", "make_job_type"]

log = get_logger("durable.decorators")

#: Seconds of lease kept ahead of the clock while a job runs; it is renewed
#: every third of that.
LEASE_MARGIN = 30.0


@dataclass(frozen=True, slots=True)
class JobSettings:
    """A ``@job`` function's options, as the decorator checked them."""

    #: The durable name: the job type's ``NAME``.
    name: str
    #: The queue its jobs run on.
    queue: str
    #: Claims a job may take (None: the queue's limit).
    max_attempts: int | None
    #: The exceptions worth another attempt.
    retry_on: tuple[type[BaseException], ...]
    #: Seconds one attempt may run (None: no limit).
    timeout: float | None
    #: The name of the executor that calls the function (`durable.decorators.executors`).
    executor: str = INLINE


@dataclass(frozen=True, slots=True)
class JobEnv:
    """What a running job needs from its engine (`JobRunner.provide`)."""

    codec: Codec
    clock: Clock
    #: The engine's executors by name.
    executors: Mapping[str, StepExecutor] = field(default_factory=dict)
    #: The engine's pool of plain ``def`` bodies.
    threads: SyncThreads = field(default_factory=SyncThreads)


@contextlib.asynccontextmanager
async def keep_leased(lease: LeaseHandle, clock: Clock) -> AsyncIterator[None]:
    """Keep ``lease`` at least `LEASE_MARGIN` seconds ahead of ``clock`` inside the block."""

    async def renew() -> None:
        while True:
            lease.ensure_at_least(LEASE_MARGIN)
            await clock.sleep(LEASE_MARGIN / 3)

    task = asyncio.create_task(renew(), name="durable-job-lease")
    try:
        yield
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


async def _cancellable(call: Coroutine[Any, Any, Any], ctx: JobContext) -> Any:
    """Await ``call`` in its own task, cancelled when the job is; `RunCancelled` then."""
    task = asyncio.ensure_future(call)
    cancelled = asyncio.ensure_future(ctx.cancel_token.wait())
    try:
        await asyncio.wait({task, cancelled}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        if not task.done():
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        cancelled.cancel()
        await asyncio.gather(cancelled, return_exceptions=True)
    if task.cancelled() and ctx.cancel_token.is_cancelled():
        raise RunCancelled(ctx.job_id, "cancelled while it ran")
    return task.result()


def _text(error: BaseException) -> str:
    return f"{type(error).__name__}: {error}" if str(error) else type(error).__name__


@dataclass
class FunctionJob(Job[bytes]):
    """A call of a ``@job`` function; ``call`` is its encoded invocation."""

    #: The function's options (set on each subclass).
    SETTINGS: ClassVar[JobSettings]
    #: The ``async def`` or plain ``def`` function (set on each subclass).
    FUNCTION: ClassVar[Callable[..., Any]]

    call: bytes

    def __post_init__(self) -> None:
        self._member_key: str | None = None

    def idempotency_key(self) -> str | None:
        """The member key of this job in a `map` group (None: by position)."""
        return self._member_key

    def with_member_key(self, key: str | None) -> FunctionJob:
        """This job, keyed ``key`` in a group; returns it."""
        self._member_key = key
        return self

    @classmethod
    def classify(cls, error: Exception) -> StepErrorKind:
        """Transient for an error of ``retry_on`` (unless it says it is not) and
        for a lost worker; permanent for an executor the engine lacks."""
        if isinstance(error, UnknownExecutor):
            return StepErrorKind.PERMANENT
        if isinstance(error, WorkerLost):
            return StepErrorKind.TRANSIENT
        if not isinstance(error, StepError) and not isinstance(error, cls.SETTINGS.retry_on):
            return StepErrorKind.PERMANENT
        return super().classify(error)

    async def run(self, ctx: JobContext) -> bytes:
        """Decode the call, run the function, encode its result; see the module docstring."""
        env = ctx.state(JobEnv)
        name = self.SETTINGS.name
        try:
            invocation = decode_invocation(self.call, ctx.job_id)
            # Permanent: the code changed under a queued job.
            invocation.check_fits(self.FUNCTION, ctx.job_id, kind="job")
            args, kwargs = invocation.decode_args(env.codec, ctx.job_id, self.FUNCTION)
            call = self._call(env, ctx, tuple(args), kwargs)
            async with keep_leased(ctx.lease, env.clock):
                result = await _cancellable(
                    call_with_timeout(
                        env.clock,
                        call,
                        self.SETTINGS.timeout,
                        f"job {name!r} ({ctx.job_id})",
                    ),
                    ctx,
                )
            return env.codec.dumps(result, what=f"the result of job {name!r} ({ctx.job_id})")
        except Exception as error:
            kind = self.classify(error)
            if isinstance(error, UntrustedPayload):  # no fault of the job's: retried
                kind = StepErrorKind.TRANSIENT
                log.error(
                    "job released: a stored payload cannot be verified with this Engine's "
                    "signing_key",
                    job_id=ctx.job_id,
                    what=error.what,
                    reason=error.reason,
                )
            final = kind is StepErrorKind.PERMANENT or ctx.delivery.is_last_attempt()
            reason = encode_failure(env.codec, ctx.job_id, error) if final else _text(error)
            raise StepError(reason, kind) from error

    def _call(
        self, env: JobEnv, ctx: JobContext, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> Callable[[], Coroutine[Any, Any, Any]]:
        """The call of the function on the job's executor (`UnknownExecutor`
        when the engine was not given it)."""
        name = self.SETTINGS.executor
        if name == INLINE and is_sync(self.FUNCTION):
            return lambda: env.threads.call(self.FUNCTION, args, kwargs)
        if name == INLINE:
            return lambda: self.FUNCTION(*args, **kwargs)
        what = f"job {self.SETTINGS.name!r} ({ctx.job_id})"
        executor = executor_for(env.executors, name, what)

        def call() -> Coroutine[Any, Any, Any]:
            return call_on(
                executor,
                self.FUNCTION,
                args,
                kwargs,
                key=f"{ctx.job_id}/0/{ctx.attempt}",
                run_id=ctx.job_id,
                step=self.SETTINGS.name,
                name=name,
            )

        return call


def make_job_type(fn: Callable[..., Any], settings: JobSettings) -> type[FunctionJob]:
    """A new `FunctionJob` subclass running ``fn`` with ``settings``."""
    namespace = {
        "NAME": settings.name,
        "MAX_ATTEMPTS": settings.max_attempts,
        "SETTINGS": settings,
        "FUNCTION": staticmethod(fn),
        "__module__": fn.__module__,
        "__qualname__": f"FunctionJob[{settings.name}]",
    }
    cls: type[FunctionJob] = type(f"FunctionJob[{settings.name}]", (FunctionJob,), namespace)
    return cls  # a dataclass: it inherits FunctionJob's fields
