"""`JobHandle`: a submitted job, to await, poll or cancel.

``await handle`` (or `JobHandle.result`) waits until the job's run
terminates and returns its output, or raises `JobFailed`: ``kind`` is
``"transient"`` or ``"permanent"`` for a failure (how the last error was
classified) and ``"cancelled"`` for a cancelled job. Everything is read
from the store, so a handle rebuilt in another runner or after a restart
(`JobRunner.handle`) answers the same.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import TYPE_CHECKING, Any, Generic

from durable.engine.jobs.codec import decode_output
from durable.engine.jobs.job import Job, OutputT
from durable.engine.runs import RunOutcome, RunStatus, RunTermination, TerminalStatus, Terminated
from durable.errors import JobFailed, JobNotFound

if TYPE_CHECKING:
    from durable.engine.runtime import WorkflowRuntime

__all__ = ["JobHandle", "job_output"]


def job_output(
    job_id: str,
    termination: RunTermination,
    outcome: RunOutcome | None,
    job_type: type[Job[Any]] | None,
) -> Any:
    """The output of a terminated job, or the `JobFailed` it ended with (raised)."""
    status = termination.status
    if status is TerminalStatus.CANCELLED:
        raise JobFailed(job_id, "cancelled", termination.error or "the job was cancelled")
    if status is TerminalStatus.FAILED:
        kind = termination.error_kind.value if termination.error_kind is not None else "transient"
        raise JobFailed(job_id, kind, termination.error or "the job failed")
    if outcome is None or outcome.result is None:
        raise JobFailed(
            job_id,
            "transient",
            "the job succeeded but its result is no longer stored (removed by retention?)",
        )
    return decode_output(outcome.result, job_type)


class JobHandle(Generic[OutputT]):
    """A submitted job; see the module docstring."""

    __slots__ = ("_job_type", "_rt", "id", "newly_submitted")

    def __init__(
        self,
        runtime: WorkflowRuntime,
        job_id: str,
        job_type: type[Job[OutputT]] | None,
        newly_submitted: bool,
    ) -> None:
        self._rt = runtime
        self._job_type = job_type
        #: The job's id (its run id).
        self.id = job_id
        #: False when the submission was a duplicate of an earlier one.
        self.newly_submitted = newly_submitted

    def __repr__(self) -> str:
        return f"JobHandle(id={self.id!r}, newly_submitted={self.newly_submitted})"

    def __await__(self) -> Generator[Any, None, OutputT]:
        return self.result().__await__()

    async def result(self, timeout: float | None = None) -> OutputT:  # noqa: ASYNC109
        """Wait for the job's output (at most ``timeout`` seconds of the runtime's
        clock: `TimeoutError` after that).

        Raises `JobFailed` if it failed or was cancelled, `JobNotFound` if no
        such job is stored (never submitted, or removed by retention).
        """
        end = await self._rt.wait_timeout(self.id, timeout)
        if end is None:
            raise JobNotFound(self.id)
        output: OutputT = job_output(self.id, end.termination, end.outcome, self._job_type)
        return output

    def status(self) -> RunStatus | None:
        """Where the job's run is (None: unknown)."""
        return self._rt.status(self.id)

    async def fetch_result(self) -> OutputT | None:
        """The output of a finished job, without waiting: None while it runs
        (or when it is unknown); `JobFailed` if it failed or was cancelled.

        A job whose output is None reads the same as one still running: tell
        them apart with `status`.
        """
        status = self._rt.status(self.id)
        if status is None or not isinstance(status.state, Terminated):
            return None
        # No await since the status read: the outcome belongs to that termination.
        outcome = await self._rt.outcome(self.id)
        output: OutputT = job_output(self.id, status.state.termination, outcome, self._job_type)
        return output

    async def cancel(self) -> bool:
        """Cancel the job; False if it is unknown or already over."""
        return await self._rt.cancel(self.id)
