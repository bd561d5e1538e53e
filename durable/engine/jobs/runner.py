"""`JobRunner`: typed jobs on one `WorkflowRuntime`, each job a single-step run.

`JobRunner.register` the job types a worker runs, `JobRunner.provide` the
shared state their `JobContext.state` reads, `JobRunner.spawn` a worker and
`JobRunner.submit` jobs. The runner's runtime (`JobRunner.runtime`) runs
every job as one step on its queue (``"jobs"`` unless configured); the job's
output is the run's result, so it is read back from the store, from any
runner on the same store and after a restart.

Submission without an idempotency key starts a new job (a ULID id). With
one, the job id is the hex SHA-256 of the key and duplicates collapse: a
submission while the job is active, or after it finished (answered from
the terminal record while it is retained), returns a handle to the same job
with ``newly_submitted=False``; a different input under the same key raises
`InputMismatch`. Once result retention has removed the finished job, the
key submits a new run.

A job's exception is classified by its type's `Job.classify`: transient
errors retry with the queue's backoff up to the attempt limit, permanent
ones fail the job at once. A delivered job whose type is not registered
fails permanently with a `JobTypeError` message naming the type.
"""

from __future__ import annotations

import asyncio
import datetime as _dt
import hashlib
import weakref
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, overload

from durable.engine._checks import U32_MAX, check_int, check_str
from durable.engine.access import RunQueue
from durable.engine.delivery import Step, StepRunner
from durable.engine.jobs.codec import decode_job, encode_job, encode_output
from durable.engine.jobs.context import JobContext
from durable.engine.jobs.groups import JobGroup
from durable.engine.jobs.handle import JobHandle
from durable.engine.jobs.job import Job, OutputT, check_job_type
from durable.engine.outcomes import StepError, StepOutcome, Succeed
from durable.engine.records import input_digest
from durable.engine.runs import RunOptions, RunSpec
from durable.engine.runtime import RuntimeOptions, WorkerHandle, WorkflowRuntime
from durable.errors import InputMismatch, InvalidArgument, JobTypeError
from durable.store.clock import Clock
from durable.store.queue.worker import Slots

__all__ = ["DEFAULT_JOBS_QUEUE", "JobRunner", "JobRunnerOptions", "job_id_for_key"]

#: The queue a `JobRunner` runs its jobs on unless configured.
DEFAULT_JOBS_QUEUE = "jobs"


def job_id_for_key(idempotency_key: str) -> str:
    """The job id of an idempotency key: its hex SHA-256."""
    key = check_str("idempotency_key", idempotency_key, non_empty=True)
    return hashlib.sha256(key.encode()).hexdigest()


def _retention(name: str, value: float | None) -> None:
    if value is not None and (
        isinstance(value, bool) or not isinstance(value, int | float) or value < 0.001
    ):
        raise InvalidArgument(f"{name} must be None or at least 0.001 seconds, got {value!r}")


@dataclass(frozen=True, slots=True)
class JobRunnerOptions:
    """How a `JobRunner` runs its jobs."""

    #: The queue of the runner's jobs.
    queue_name: str = DEFAULT_JOBS_QUEUE
    #: Where job memos, results too large for the terminal record and group
    #: manifests go; None: ``"{queue_name}-memo"``.
    memo_prefix: str | None = None
    #: Jobs run at once by `JobRunner.spawn`.
    max_concurrent_jobs: int = 16
    #: How long an idle worker waits before polling again (seconds).
    poll_interval: float = 0.1
    #: Remove a finished job's result (and memo) this many seconds after it
    #: finished; None keeps them. The runtime's memo retention.
    result_retention: float | None = None
    #: Forget a job group this many seconds after a consumer saw its last
    #: result (`RuntimeOptions.group_retention`); None keeps groups.
    group_retention: float | None = None
    #: The clock; None: the queue's.
    clock: Clock | None = field(default=None)
    #: A limit shared with other runners of this process (`RuntimeOptions.slots`).
    slots: Slots | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        check_int("JobRunnerOptions.max_concurrent_jobs", self.max_concurrent_jobs, 1, U32_MAX)
        _retention("JobRunnerOptions.result_retention", self.result_retention)
        _retention("JobRunnerOptions.group_retention", self.group_retention)
        self.runtime_options()  # the rest is checked as the runtime checks it

    def runtime_options(self) -> RuntimeOptions:
        """The options of the runner's `WorkflowRuntime`."""
        return RuntimeOptions(
            queue_name=self.queue_name,
            memo_prefix=self.memo_prefix,
            max_concurrent_steps=self.max_concurrent_jobs,
            poll_interval=self.poll_interval,
            memo_retention=self.result_retention,
            group_retention=self.group_retention,
            clock=self.clock,
            slots=self.slots,
        )


class JobDispatcher:
    """The runner's `StepRunner`: decodes the job of a step, runs it, and
    turns its output or exception into the step's outcome."""

    __slots__ = ("_runner", "_state", "_types")

    def __init__(
        self,
        runner: JobRunner,
        types: Mapping[str, type[Job[Any]]],
        state: Mapping[type, object],
    ) -> None:
        self._runner = runner
        self._types = types
        self._state = state

    async def run_step(self, step: Step) -> StepOutcome:
        """Run the job carried by ``step``; see the module docstring."""
        job = decode_job(step.payload, self._types)  # JobTypeError: permanent
        job_type = type(job)
        try:
            output = await job.run(JobContext(step, self._runner, self._state))
        except Exception as e:
            message = StepError.from_exception(e).message
            raise StepError(message, job_type.classify(e)) from e
        return Succeed(encode_output(job_type.NAME, output))


class JobRunner:
    """Typed jobs on one `WorkflowRuntime`; see the module docstring."""

    def __init__(
        self,
        queue: RunQueue,
        options: JobRunnerOptions | None = None,
        *,
        make_runtime: Callable[[StepRunner, RuntimeOptions], WorkflowRuntime] | None = None,
    ) -> None:
        """``make_runtime(runner, options)`` builds the runtime the jobs run on
        (default: a `WorkflowRuntime` over ``queue``; a process that does not
        own the store passes one that sends requests instead)."""
        self.options = options or JobRunnerOptions()
        self._types: dict[str, type[Job[Any]]] = {}
        self._state: dict[type, object] = {}
        self._started = False
        self._locks: weakref.WeakValueDictionary[str, asyncio.Lock] = weakref.WeakValueDictionary()
        dispatcher = JobDispatcher(self, self._types, self._state)
        runtime_options = self.options.runtime_options()
        #: The runtime the jobs run on.
        self.runtime = (
            make_runtime(dispatcher, runtime_options)
            if make_runtime is not None
            else WorkflowRuntime(queue, dispatcher, options=runtime_options)
        )

    # ---------------------------------------------------------- configuring

    def register(self, job_type: type[Job[OutputT]]) -> type[Job[OutputT]]:
        """Run jobs of ``job_type`` on this runner's workers; returns it.

        `JobTypeError` for a class that is not a dataclass `Job` with a NAME,
        a NAME already registered, or a runner already spawned.
        """
        cls = check_job_type(job_type)
        if self._started:
            raise JobTypeError(
                f"job type {cls.NAME!r} registered after spawn(): register every type first"
            )
        other = self._types.get(cls.NAME)
        if other is not None and other is not cls:
            raise JobTypeError(
                f"job type name {cls.NAME!r} is taken by {other.__qualname__}; "
                f"give {cls.__qualname__} its own NAME"
            )
        if other is cls:
            raise JobTypeError(f"job type {cls.NAME!r} is already registered")
        self._types[cls.NAME] = cls
        return job_type

    def job_type(self, name: str) -> type[Job[Any]] | None:
        """The registered job type named ``name``, or None."""
        return self._types.get(name)

    def provide(self, value: object) -> None:
        """Share ``value`` with every job: `JobContext.state` of its type returns it.

        One value per type: `InvalidArgument` for a second one.
        """
        kind = type(value)
        if kind in self._state:
            raise InvalidArgument(f"a {kind.__qualname__} was already provided; one value per type")
        self._state[kind] = value

    def spawn(self) -> WorkerHandle:
        """Start a worker running the registered job types (no registration after this)."""
        self._started = True
        return self.runtime.spawn()

    # ------------------------------------------------------------ submitting

    async def submit(
        self,
        job: Job[OutputT],
        *,
        idempotency_key: str | None = None,
        max_attempts: int | None = None,
        priority: int | None = None,
        run_at: int | _dt.datetime | None = None,
        headers: Mapping[str, str] | None = None,
        job_id: str | None = None,
    ) -> JobHandle[OutputT]:
        """Submit ``job``; see the module docstring for idempotency.

        ``job_id`` is the id of a job without an idempotency key (default: a
        new ULID the runtime mints): a caller that must know the id before
        submitting (to route it to a partition) mints it; `InvalidArgument`
        with an idempotency key, whose digest is the id.
        ``idempotency_key`` defaults to ``job.idempotency_key()``;
        ``max_attempts`` to the type's ``MAX_ATTEMPTS``, then the queue's.
        ``run_at`` (epoch milliseconds or an aware datetime) holds the job
        until then. Submission does not need the type registered here.
        """
        job_type = check_job_type(type(job))
        payload = encode_job(job)
        options = RunOptions(
            headers=headers or {},
            priority=priority,
            max_attempts_per_step=max_attempts
            if max_attempts is not None
            else job_type.MAX_ATTEMPTS,
            run_at=run_at,
        )
        key = idempotency_key if idempotency_key is not None else job.idempotency_key()
        if key is None:
            out = await self.runtime.submit(RunSpec(payload, run_id=job_id, options=options))
            return JobHandle(self.runtime, out.run_id, job_type, out.newly_submitted)
        if job_id is not None:
            raise InvalidArgument(
                f"job {job_type.NAME!r}: job_id={job_id!r} with an idempotency key; the key's "
                "digest is the job id: pass one or the other"
            )
        job_id = job_id_for_key(key)
        lock = self._locks.get(job_id)
        if lock is None:
            lock = self._locks[job_id] = asyncio.Lock()
        async with lock:
            if self._finished(job_id, payload):
                return JobHandle(self.runtime, job_id, job_type, False)
            # No await between the check above and the runtime's own look at
            # the run record (its lock is free: submissions of this id queue
            # on ours), so a job that finishes meanwhile is not run again.
            out = await self.runtime.submit(RunSpec(payload, run_id=job_id, options=options))
        return JobHandle(self.runtime, job_id, job_type, out.newly_submitted)

    def _finished(self, job_id: str, payload: bytes) -> bool:
        """True if job ``job_id`` finished with this input (still retained);
        `InputMismatch` if it finished with another."""
        view = self.runtime.view
        if view.run_record(job_id) is not None:
            return False  # active: the runtime answers the duplicate
        terminal = view.terminal_record(job_id)
        if terminal is None:
            return False
        if terminal.input_sha256 is not None and terminal.input_sha256 != input_digest(payload):
            raise InputMismatch(job_id)
        return True

    # ------------------------------------------------------------- handles

    @overload
    def handle(self, job_id: str, job_type: type[Job[OutputT]]) -> JobHandle[OutputT]: ...
    @overload
    def handle(self, job_id: str, job_type: None = None) -> JobHandle[Any]: ...
    def handle(self, job_id: str, job_type: type[Job[Any]] | None = None) -> JobHandle[Any]:
        """A handle on job ``job_id`` (from another runner, or before a restart);
        ``job_type`` rebuilds a dataclass output."""
        return JobHandle(self.runtime, job_id, job_type, False)

    @overload
    def group(
        self,
        group_id: str,
        job_type: type[Job[OutputT]],
        *,
        route: Callable[[str], WorkflowRuntime] | None = None,
    ) -> JobGroup[OutputT]: ...
    @overload
    def group(
        self,
        group_id: str,
        job_type: None = None,
        *,
        route: Callable[[str], WorkflowRuntime] | None = None,
    ) -> JobGroup[Any]: ...
    def group(
        self,
        group_id: str,
        job_type: type[Job[Any]] | None = None,
        *,
        route: Callable[[str], WorkflowRuntime] | None = None,
    ) -> JobGroup[Any]:
        """The job group ``group_id``: a run group of jobs of one type.

        ``job_type`` is taken from the submitted jobs, or from the registered
        type named in the group's manifest, when not given. ``route`` (a job
        id -> the runtime holding it) spreads the members over the
        partitions of a partitioned store (`JobGroup`).
        """
        return JobGroup(self, group_id, job_type, route=route)
