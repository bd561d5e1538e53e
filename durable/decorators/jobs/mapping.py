"""``map``: one ``@job`` function over many items, as a job group.

The items become the members of one `durable.engine.jobs.JobGroup`, keyed
``item-{i}`` by position (or by the ``keys`` given), submitted together
(the group's manifest is durable before any member is). `completed`
streams ``(index, result)`` pairs as members end; ``map`` gathers them in
item order.

The group's id is random, unless the submission has an idempotency key:
then it derives from the job's name and the key, and a second ``map`` with
that key (after a crash, say) finds the same group: members that
succeeded are not run again, failed or cancelled ones are, and other items
raise `GroupMismatch`.

On a partitioned store the members spread over the partitions by their own
ids (each runs, and keeps its member record, in its own partition); the
group's manifest is in the group id's partition, and the results are
gathered from every partition the members are in.

``fn.submit_map(items)`` returns a `MapHandle` at once (the members are
submitted, nothing is awaited): its ``group_id``, its `MapHandle.progress`
and `MapHandle.progress_updates` (`durable.engine.progress`), and its
results when wanted.
"""

from __future__ import annotations

import hashlib
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from durable.decorators.codec import Codec
from durable.decorators.jobs.handle import read_job
from durable.decorators.jobs.kind import FunctionJob
from durable.decorators.typed import return_hint
from durable.engine.jobs import JobGroup, JobRunner
from durable.engine.progress import DEFAULT_WINDOW, Progress
from durable.engine.runs import RunEnd
from durable.engine.runtime import WorkflowRuntime

__all__ = ["MapHandle", "MappedJobs", "group_id_for_key"]


def group_id_for_key(name: str, idempotency_key: str) -> str:
    """The group id of a ``map`` of job ``name`` under ``idempotency_key``."""
    return hashlib.sha256(f"{name}\n{idempotency_key}".encode()).hexdigest()


@dataclass(frozen=True, slots=True)
class MappedJobs:
    """A submitted ``map``: its group, and each member key's item index."""

    codec: Codec
    runner: JobRunner
    group: JobGroup[bytes]
    index_of: dict[str, int]
    #: The function's return annotation, each result is validated into.
    result_type: Any = Any

    @classmethod
    async def submit(
        cls,
        codec: Codec,
        runner: JobRunner,
        jobs: Sequence[FunctionJob],
        keys: Sequence[str] | None,
        group_id: str,
        options: dict[str, Any],
        route: Callable[[str], WorkflowRuntime] | None = None,
    ) -> MappedJobs:
        """Submit ``jobs`` (keyed by ``keys``, else by position) as group
        ``group_id`` on ``runner`` (the group's manifest); ``route`` (a job id
        -> its runtime) spreads the members over a partitioned store."""
        keyed = [job.with_member_key(keys[i] if keys else None) for i, job in enumerate(jobs)]
        group: JobGroup[bytes] = runner.group(group_id, type(jobs[0]), route=route)
        await group.submit(keyed, **options)
        index_of = {keys[i] if keys else f"item-{i}": i for i in range(len(jobs))}
        return cls(codec, runner, group, index_of, return_hint(type(jobs[0]).FUNCTION))

    async def completed(self, return_exceptions: bool) -> AsyncIterator[tuple[int, Any]]:
        """``(index, result)`` of each member as it ends; a failed member raises
        its exception, or yields it when ``return_exceptions``."""
        run_group = self.group.run_group
        async for member in run_group.results():
            end = RunEnd(member.termination, member.outcome)
            runtime = run_group.runtime_of(member.run_id)
            try:
                value = await read_job(self.codec, runtime, member.run_id, end, self.result_type)
            except Exception as error:
                if not return_exceptions:
                    raise
                value = error
            yield self.index_of[member.key], value

    async def gather(self, return_exceptions: bool) -> list[Any]:
        """Every member's result in item order (see `completed`)."""
        results: list[Any] = [None] * len(self.index_of)
        async for index, value in self.completed(return_exceptions):
            results[index] = value
        return results


class MapHandle:
    """A submitted ``map`` (``fn.submit_map(items)``): follow its progress,
    then gather its results.

    ``group_id`` names the job group (``engine.group_progress(group_id)`` and
    ``durable group URL GROUP_ID`` follow it from another process).
    """

    __slots__ = ("_mapped", "name")

    def __init__(self, mapped: MappedJobs, name: str) -> None:
        self._mapped = mapped
        #: The name of the ``@job`` function.
        self.name = name

    @property
    def group_id(self) -> str:
        """The id of the job group that holds the map's jobs."""
        return self._mapped.group.run_group.group_id

    def __len__(self) -> int:
        return len(self._mapped.index_of)

    def __repr__(self) -> str:
        return f"MapHandle({self.name!r}, group_id={self.group_id!r}, items={len(self)})"

    async def progress(self, window: float = DEFAULT_WINDOW) -> Progress:
        """The jobs counted by state, the completion rate over the last
        ``window`` seconds and the estimated time remaining
        (`durable.engine.RunGroup.progress`)."""
        return await self._mapped.group.run_group.progress(window)

    def progress_updates(
        self, *, interval: float = 1.0, window: float = DEFAULT_WINDOW
    ) -> AsyncIterator[Progress]:
        """`progress` at once, then after each change and at least every
        ``interval`` seconds of the engine's clock, until every job ended."""
        return self._mapped.group.run_group.progress_updates(interval=interval, window=window)

    async def results(self, *, return_exceptions: bool = False) -> list[Any]:
        """Every job's result in item order, as ``map`` returns them."""
        return await self._mapped.gather(return_exceptions)

    def as_completed(self, *, return_exceptions: bool = False) -> AsyncIterator[tuple[int, Any]]:
        """``(index, result)`` of each job as it ends, as ``map_as_completed``."""
        return self._mapped.completed(return_exceptions)
