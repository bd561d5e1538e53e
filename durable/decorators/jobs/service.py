"""`JobsService`: the job workers of one `Engine`.

Every `Engine` gets one (a default service, `durable.decorators.services`).
When the engine starts, the service builds a `durable.engine.jobs.JobRunner`
per queue named by the ``@job`` functions registered then (``"jobs"``
unless ``queue=`` says otherwise), registers their job types, gives them the
engine's codec and clock (`JobEnv`) and spawns one worker per runner,
running up to `DEFAULT_CONCURRENCY` (8) jobs at once. When the engine
stops, each worker stops claiming and waits for the jobs it runs to finish.

Submissions go through the same runners (`runner_for`), so a job is
submitted, run and read back by one runtime per queue. A ``@job`` decorated
after its engine started is refused at submission with the fix (import it
before entering the engine): the workers started without it.
"""

from __future__ import annotations

import asyncio
import weakref
from typing import TYPE_CHECKING

from durable.decorators.jobs.kind import FunctionJob, JobEnv
from durable.decorators.jobs.registry import JOBS
from durable.decorators.registry import DEFAULT_QUEUE, REGISTRY
from durable.decorators.runtimes import DEFAULT_CONCURRENCY
from durable.engine.jobs import JobRunner, JobRunnerOptions
from durable.engine.runtime import WorkerHandle, WorkflowRuntime
from durable.errors import DecoratorError, JobTypeError

if TYPE_CHECKING:
    from durable.decorators.base import EngineBase

__all__ = ["JobsService", "check_job_queue", "runner_for"]

_services: weakref.WeakKeyDictionary[EngineBase, JobsService] = weakref.WeakKeyDictionary()


def check_job_queue(queue: str, what: str) -> None:
    """`DecoratorError` if workflows run on ``queue`` (a queue holds one kind of work)."""
    if queue == DEFAULT_QUEUE or queue in REGISTRY.queues():
        raise DecoratorError(
            f"{what} runs on queue {queue!r}, where workflows run; give jobs a queue of "
            f"their own (the default is @job(queue='jobs'))"
        )


class JobsService:
    """The job runners and workers of one engine; see the module docstring."""

    def __init__(self) -> None:
        self._runners: dict[str, JobRunner] = {}
        self._workers: list[WorkerHandle] = []
        self._engine: EngineBase | None = None

    def __repr__(self) -> str:
        return f"<JobsService queues={sorted(self._runners)}>"

    def queues(self) -> frozenset[str]:
        """The job queues this service runs: the queues of every registered `@job`."""
        return frozenset(JOBS.by_queue())

    async def start(self, engine: EngineBase) -> None:
        """Build a runner per job queue, register its job types and spawn its worker."""
        env = JobEnv(engine.codec, engine.clock, engine.executors, engine.threads)
        mode = engine.mode
        self._runners = {}
        for queue, job_types in sorted(JOBS.by_queue().items()):
            for job_type in job_types:
                check_job_queue(queue, f"@job {job_type.NAME!r}")
            limit = engine.concurrency_of(queue, DEFAULT_CONCURRENCY)
            runner = JobRunner(
                mode.queue,
                JobRunnerOptions(
                    queue_name=queue,
                    max_concurrent_jobs=max(limit, 1),
                    clock=engine.clock,
                    slots=engine.slots_for(queue, limit),
                ),
                make_runtime=lambda r, o: mode.runtime(r, None, o),
            )
            runner.provide(env)
            for job_type in job_types:
                runner.register(job_type)
            self._runners[queue] = runner
            if limit > 0 and mode.owner:  # 0 or a client: submits jobs, runs none
                self._workers.append(runner.spawn())
        self._engine = engine
        _services[engine] = self

    async def stop(self) -> None:
        """Stop every worker once the jobs it runs have settled."""
        workers, self._workers = self._workers, []
        await asyncio.gather(*(worker.shutdown() for worker in workers))
        self._forget()

    async def abort(self) -> None:
        """Stop every worker at once, as a crash would (the engine lost its
        store: the jobs in flight cannot settle anyway)."""
        workers, self._workers = self._workers, []
        await asyncio.gather(*(worker.abort() for worker in workers))
        self._forget()

    def runtime_of(self, queue: str) -> WorkflowRuntime | None:
        """The runtime of job queue ``queue``, if this service runs it."""
        runner = self._runners.get(queue)
        return runner.runtime if runner is not None else None

    def _forget(self) -> None:
        if self._engine is not None:
            _services.pop(self._engine, None)
            self._engine = None

    def runner(self, job_type: type[FunctionJob]) -> JobRunner:
        """The runner of ``job_type``'s queue; `JobTypeError` if it started without it."""
        runner = self._runners.get(job_type.SETTINGS.queue)
        if runner is None or runner.job_type(job_type.NAME) is None:
            raise JobTypeError(
                f"@job {job_type.NAME!r} was decorated after this Engine started, so no "
                "worker runs it: import the module that defines it before "
                "`async with Engine(...)`"
            )
        return runner


def runner_for(engine: EngineBase, job_type: type[FunctionJob]) -> JobRunner:
    """The runner of ``job_type`` on the running ``engine``; `JobTypeError` with
    the fix if the engine does not run it."""
    service = _services.get(engine)
    if service is None:
        raise JobTypeError(
            f"{engine!r} runs no jobs: it was created before `durable.decorators.jobs` was "
            f"imported; import the module that defines @job {job_type.NAME!r} before "
            "creating the Engine"
        )
    return service.runner(job_type)
