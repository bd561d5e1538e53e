"""`JobContext`: what a running job sees.

The job's id (its run id), the attempt, the delivery's handles (the
cancellation token, the lease, the job's memo), the runner's shared state
(`JobContext.state`) and `JobContext.submit` to fan out further jobs. The
underlying `Step` is `JobContext.delivery`, for anything else.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, TypeVar

from durable.engine.delivery import Step
from durable.engine.memo import Memo
from durable.errors import InvalidArgument
from durable.store.queue import CancelToken, LeaseHandle

if TYPE_CHECKING:
    import datetime as _dt

    from durable.engine.jobs.handle import JobHandle
    from durable.engine.jobs.job import Job, OutputT
    from durable.engine.jobs.runner import JobRunner

__all__ = ["JobContext"]

_S = TypeVar("_S")


class JobContext:
    """One delivery of one job; see the module docstring."""

    __slots__ = ("_runner", "_state", "delivery")

    def __init__(self, delivery: Step, runner: JobRunner, state: Mapping[type, object]) -> None:
        #: The step that carries the job (a job is a single-step run).
        self.delivery = delivery
        self._runner = runner
        self._state = state

    def __repr__(self) -> str:
        return f"<JobContext job_id={self.job_id!r} attempt={self.attempt}>"

    @property
    def job_id(self) -> str:
        """The job's id (its run id)."""
        return self.delivery.run_id

    @property
    def attempt(self) -> int:
        """Claims of this job so far, this one included (1 on the first run)."""
        return self.delivery.attempts

    @property
    def max_attempts(self) -> int:
        """Claims this job may take; a transient error on the last one fails it."""
        return self.delivery.max_attempts

    @property
    def headers(self) -> Mapping[str, str]:
        """The submitter's headers."""
        return self.delivery.headers

    @property
    def cancel_token(self) -> CancelToken:
        """Fires when the job is cancelled while it runs."""
        return self.delivery.cancel_token

    @property
    def lease(self) -> LeaseHandle:
        """The delivery's lease; extend it before a long call."""
        return self.delivery.lease

    @property
    def memo(self) -> Memo:
        """The job's memo: a retry reads back what an earlier attempt stored."""
        return self.delivery.memo

    def state(self, kind: type[_S]) -> _S:
        """The value of type ``kind`` given to `JobRunner.provide`.

        `InvalidArgument` (a permanent error: the job fails without a retry)
        if none was provided.
        """
        if kind not in self._state:
            raise InvalidArgument(
                f"job {self.job_id!r}: no state of type {kind.__qualname__} was provided; "
                f"call JobRunner.provide({kind.__qualname__}(...)) before spawn()"
            )
        return self._state[kind]  # type: ignore[return-value]  # keyed by their type

    async def submit(
        self,
        job: Job[OutputT],
        *,
        idempotency_key: str | None = None,
        max_attempts: int | None = None,
        priority: int | None = None,
        run_at: int | _dt.datetime | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> JobHandle[OutputT]:
        """Submit a further job (`JobRunner.submit`); it runs independently of
        this one. Give it an idempotency key derived from this job's so a
        retry of this job does not submit it twice."""
        return await self._runner.submit(
            job,
            idempotency_key=idempotency_key,
            max_attempts=max_attempts,
            priority=priority,
            run_at=run_at,
            headers=headers,
        )
