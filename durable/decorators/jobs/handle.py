"""`JobHandle`: a submitted ``@job`` call, to await, poll or cancel.

``submit`` returns one; ``fn.handle(job_id)`` rebuilds one after a restart
or in another process. Everything it reports is read from the store.
`read_job` turns a terminated job into its value or exception; ``map``
reads its members with it too.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from durable.decorators.codec import Codec
from durable.decorators.jobs.calls import refuse_wait
from durable.decorators.jobs.service import runner_for
from durable.decorators.moves import across_moves
from durable.decorators.outcome import RunResult, read_result
from durable.decorators.typed import from_plain
from durable.engine.jobs.codec import decode_output
from durable.engine.runs import RunEnd, RunStatus
from durable.engine.runtime import WorkflowRuntime
from durable.errors import CorruptEngineRecord, JobNotFound

if TYPE_CHECKING:
    from durable.decorators.base import EngineBase
    from durable.decorators.jobs.kind import FunctionJob

__all__ = ["JobHandle", "job_value", "read_job"]

R = TypeVar("R")


async def read_job(
    codec: Codec, runtime: WorkflowRuntime, job_id: str, end: RunEnd, result_type: Any = Any
) -> Any:
    """The result of the job that ended with ``end`` validated into
    ``result_type`` (`durable.decorators.typed`), or raise its exception
    (its own type when the codec rebuilds it, else `WorkflowFailed`;
    `RunCancelled` if it was cancelled)."""
    value = job_value(codec, await read_result(codec, runtime, end, job_id))
    return from_plain(value, result_type, f"the result of job {job_id!r}")


def job_value(codec: Codec, result: RunResult) -> Any:
    """The value of a terminated job's ``result``, or raise its exception;
    `CorruptEngineRecord` if its stored result is not the codec's frame."""
    if result.ok is not None:  # the jobs runtime stores the codec's bytes as MessagePack bytes
        ok = decode_output(result.ok, None)
        if not isinstance(ok, bytes):
            raise CorruptEngineRecord(
                f"result of job {result.run_id!r}", f"a {type(ok).__name__}, not the codec's bytes"
            )
        result = dataclasses.replace(result, ok=ok)
    return result.value(codec)


class JobHandle(Generic[R]):
    """A submitted job: wait for its result, read its status, cancel it."""

    __slots__ = ("_engine", "_job_type", "job_id", "name", "newly_submitted", "result_type")

    def __init__(
        self,
        engine: EngineBase,
        job_type: type[FunctionJob],
        job_id: str,
        name: str,
        newly_submitted: bool = False,
        result_type: Any = Any,
    ) -> None:
        self._engine = engine
        self._job_type = job_type
        #: The annotation the result is validated into (`durable.decorators.typed`).
        self.result_type = result_type
        #: The job's id (its run id; the hex SHA-256 of its idempotency key if it has one).
        self.job_id = job_id
        #: The name of the ``@job`` function.
        self.name = name
        #: False when the submission was a duplicate of an earlier one (same key).
        self.newly_submitted = newly_submitted

    def _runtime(self, part: EngineBase) -> WorkflowRuntime:
        """The job's runtime on ``part``, the engine as its partition sees it now."""
        return runner_for(part, self._job_type).runtime

    async def result(self, timeout: float | None = None) -> R:  # noqa: ASYNC109
        """Wait for the job to end (at most ``timeout`` seconds of the engine's
        clock: `TimeoutError` after); its return value.

        Raises what the function raised (its own type when the exception can
        be rebuilt, else `WorkflowFailed` with its type and message),
        `RunCancelled` if the job was cancelled, `JobNotFound` if no such job
        is stored. Refused inside a workflow (`DecoratorError`).
        """
        refuse_wait(f"waiting for job {self.name!r}")
        value: R = await across_moves(self._engine, self.job_id, timeout, self._result)
        return value

    async def _result(self, part: EngineBase, timeout: float | None) -> Any:  # noqa: ASYNC109
        """`result` on the mode of the job's store now (`across_moves`)."""
        runtime = self._runtime(part)
        end = await runtime.wait_timeout(self.job_id, timeout)
        if end is None:
            raise JobNotFound(self.job_id)
        return await read_job(part.codec, runtime, self.job_id, end, self.result_type)

    async def status(self) -> RunStatus | None:
        """Where the job is (`durable.engine.RunStatus`); None if unknown."""

        async def status(part: EngineBase, _: float | None) -> RunStatus | None:
            return self._runtime(part).status(self.job_id)

        return await across_moves(self._engine, self.job_id, None, status)

    async def cancel(self) -> bool:
        """Cancel the job; False if it was unknown or had already ended. A job
        waiting to run ends at once; a running one has its task cancelled
        and ends as cancelled."""
        return await self._runtime(self._engine.for_run(self.job_id)).cancel(self.job_id)

    def __repr__(self) -> str:
        return (
            f"JobHandle({self.name!r}, job_id={self.job_id!r}, "
            f"newly_submitted={self.newly_submitted})"
        )

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, JobHandle):
            return NotImplemented
        return self.job_id == other.job_id and self._engine is other._engine

    def __hash__(self) -> int:
        return hash(self.job_id)
