"""`JobGroup`: a run group of jobs of one type.

`JobRunner.group` names it. `JobGroup.submit` takes the jobs: each is a
member keyed by its `Job.idempotency_key`, else by its position
(``item-{i}``), so its job id is the member's run id (hex SHA-256 of
``"{group_id}/{key}"``). `JobGroup.results` yields each member's typed
`JobMemberResult` as it finishes; `JobGroup.join` returns them all in
submission order. ``resume``, ``status``, ``cancel``, ``forget`` and
retention (``JobRunnerOptions.group_retention``) are the run group's
(`durable.engine.groups.RunGroup`).

Built with ``route`` (a job id -> the runtime holding it: the job runner
of its partition on a partitioned store), the members spread over the
partitions by their own ids; the group's manifest stays on the runner's
runtime (`durable.engine.groups`).

Progress, a failure threshold or a cost rollup are folds the caller writes
over `results`.
"""

from __future__ import annotations

import datetime as _dt
from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic

from durable.engine.groups import GroupMember, GroupStatus, MemberResult, RunGroup
from durable.engine.jobs.codec import encode_job, job_name
from durable.engine.jobs.handle import JobHandle, job_output
from durable.engine.jobs.job import Job, OutputT, check_job_type
from durable.engine.records import GroupManifest
from durable.engine.runs import RunOptions
from durable.errors import JobFailed, JobTypeError

if TYPE_CHECKING:
    from durable.engine.jobs.runner import JobRunner
    from durable.engine.runtime import WorkflowRuntime

__all__ = ["JobGroup", "JobMemberResult"]


@dataclass(frozen=True, slots=True)
class JobMemberResult(Generic[OutputT]):
    """A finished member of a job group: its output, or the error it ended with."""

    key: str
    job_id: str
    output: OutputT | None = None
    error: JobFailed | None = None

    @property
    def ok(self) -> bool:
        """True when the job succeeded."""
        return self.error is None

    def result(self) -> OutputT:
        """The output; raises the `JobFailed` of a failed or cancelled job."""
        if self.error is not None:
            raise self.error
        return self.output  # type: ignore[return-value]  # set whenever error is None


class JobGroup(Generic[OutputT]):
    """A run group of jobs of one type; see the module docstring."""

    __slots__ = ("_job_type", "_runner", "run_group")

    def __init__(
        self,
        runner: JobRunner,
        group_id: str,
        job_type: type[Job[OutputT]] | None = None,
        *,
        route: Callable[[str], WorkflowRuntime] | None = None,
    ) -> None:
        self._runner = runner
        self._job_type: type[Job[Any]] | None = (
            None if job_type is None else check_job_type(job_type)
        )
        #: The run group underneath.
        self.run_group = RunGroup(runner.runtime, group_id, route)

    def __repr__(self) -> str:
        name = None if self._job_type is None else self._job_type.NAME
        return f"JobGroup({self.group_id!r}, job_type={name!r})"

    @property
    def group_id(self) -> str:
        """The group's id."""
        return self.run_group.group_id

    # ---------------------------------------------------------- submitting

    async def submit(
        self,
        jobs: Iterable[Job[OutputT]],
        *,
        max_attempts: int | None = None,
        priority: int | None = None,
        run_at: int | _dt.datetime | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> list[JobHandle[OutputT]]:
        """Submit ``jobs`` as the group's members (`RunGroup.submit`); a handle
        per job, in order.

        Every job must be of one type (`JobTypeError`). A second submission
        of the same jobs runs again only those that did not succeed; other
        jobs raise `GroupMismatch`, a key twice `DuplicateMemberKey`.
        """
        given = list(jobs)
        for job in given:
            job_type = check_job_type(type(job))
            if self._job_type is None:
                self._job_type = job_type
            elif job_type is not self._job_type:
                raise JobTypeError(
                    f"job group {self.group_id!r} holds jobs of type {self._job_type.NAME!r}, "
                    f"got a {job_type.NAME!r}; use one group per job type"
                )
        members = [
            GroupMember(job.idempotency_key() or f"item-{i}", encode_job(job))
            for i, job in enumerate(given)
        ]
        options = self._options(max_attempts, priority, run_at, headers)
        outcomes = await self.run_group.submit(members, options)
        return [
            JobHandle(
                self.run_group.runtime_of(out.run_id),
                out.run_id,
                self._job_type,
                out.newly_submitted,
            )
            for out in outcomes
        ]

    async def resume(
        self,
        *,
        max_attempts: int | None = None,
        priority: int | None = None,
        run_at: int | _dt.datetime | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> list[JobHandle[OutputT]]:
        """Submit again, from the stored manifest alone, every job that did not
        succeed (`RunGroup.resume`); a handle per job, in order."""
        self._resolve(await self.run_group.manifest())
        options = self._options(max_attempts, priority, run_at, headers)
        outcomes = await self.run_group.resume(options)
        return [
            JobHandle(
                self.run_group.runtime_of(out.run_id),
                out.run_id,
                self._job_type,
                out.newly_submitted,
            )
            for out in outcomes
        ]

    def _options(
        self,
        max_attempts: int | None,
        priority: int | None,
        run_at: int | _dt.datetime | None,
        headers: Mapping[str, str] | None,
    ) -> RunOptions:
        if max_attempts is None and self._job_type is not None:
            max_attempts = self._job_type.MAX_ATTEMPTS
        return RunOptions(
            headers=headers or {},
            priority=priority,
            max_attempts_per_step=max_attempts,
            run_at=run_at,
        )

    def _resolve(self, manifest: GroupManifest) -> None:
        """Learn the job type from the manifest when it is not known yet."""
        if self._job_type is None and manifest.members:
            self._job_type = self._runner.job_type(job_name(manifest.members[0][1]))

    # ------------------------------------------------------------- reading

    def _typed(self, member: MemberResult) -> JobMemberResult[OutputT]:
        try:
            output = job_output(member.run_id, member.termination, member.outcome, self._job_type)
        except JobFailed as e:
            return JobMemberResult(member.key, member.run_id, error=e)
        return JobMemberResult(member.key, member.run_id, output=output)

    async def results(self) -> AsyncIterator[JobMemberResult[OutputT]]:
        """Each member's result as it finishes (`RunGroup.results`)."""
        self._resolve(await self.run_group.manifest())
        async for member in self.run_group.results():
            yield self._typed(member)

    async def join(self) -> list[JobMemberResult[OutputT]]:
        """Wait for every member; their results in submission order."""
        order = {key: i for i, (key, _) in enumerate((await self.run_group.manifest()).members)}
        done = [result async for result in self.results()]
        return sorted(done, key=lambda result: order[result.key])

    async def status(self) -> GroupStatus:
        """The members counted by state (`RunGroup.status`)."""
        return await self.run_group.status()

    async def cancel(self) -> int:
        """Cancel every active member; how many were (`RunGroup.cancel`)."""
        return await self.run_group.cancel()

    async def forget(self) -> int:
        """Delete the group and its jobs' results (`RunGroup.forget`)."""
        return await self.run_group.forget()
