"""``engine.group_progress(group_id)``: how far a run group has come, from its id alone.

```python
p = await engine.group_progress(group_id)
print(f"{p.done}/{p.total} ({p.fraction:.0%}), {p.running} running, "
      f"{p.waiting} waiting, {p.rate_per_s:.1f}/s, eta {p.eta_s}")
async for p in engine.group_progress_updates(group_id, interval=0.5):
    bar.update(p.done, total=p.total)  # the last one shows every member terminated
```

Any group of the store: a ``@job`` ``map`` (its group id is
``MapHandle.group_id``, or `durable.decorators.jobs.group_id_for_key` of
the job's name and idempotency key), a bulk batch (``BulkReport.group_id``)
or a `durable.engine.RunGroup`. The answer is a
`durable.engine.progress.Progress`: counts by state (pending, running,
waiting, succeeded, failed, cancelled; total), the completion rate over the
last ``window`` seconds and the estimated time remaining.

How a group is found by its id alone: its members' records live under
``workflow/groups/{group_id}/members/`` in the KV of the store, each in the
partition of its run on a partitioned store, whatever queue or runtime ran
it. So this scans that prefix in every partition's memory (no object is
read; one refresh of the log first on a client engine) and counts what it
finds. `GroupNotFound` when no partition holds a member record of the id.
It works on an owner and on a client engine (``role="client"``: the
read-only view, which never fences the owner).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import TYPE_CHECKING

from durable.engine.progress import (
    DEFAULT_WINDOW,
    Progress,
    ProgressSnapshot,
    progress_updates,
    scan_progress,
)
from durable.store.ids import validate_id

if TYPE_CHECKING:
    from durable.decorators.engine import Engine

__all__ = ["group_progress", "group_progress_updates"]


async def _measure(
    engine: Engine, group_id: str, window: float, poll: bool, watch: bool = False
) -> ProgressSnapshot:
    partitions = engine.every_partition()
    if poll:
        for p in partitions:
            await p.workflows.default.catch_up("")
    queues = [p.queue for p in partitions]
    return await scan_progress(queues, group_id, engine.clock, window=window, watch=watch)


async def group_progress(
    engine: Engine, group_id: str, *, window: float = DEFAULT_WINDOW
) -> Progress:
    """The `Progress` of group ``group_id`` (see the module docstring)."""
    group_id = validate_id(group_id, "group id")
    return (await _measure(engine, group_id, window, True)).progress


async def group_progress_updates(
    engine: Engine,
    group_id: str,
    *,
    interval: float = 1.0,
    window: float = DEFAULT_WINDOW,
) -> AsyncIterator[Progress]:
    """`group_progress` at once, then after each change and at least every
    ``interval`` seconds of the engine's clock, until every member
    terminated (`durable.engine.progress.progress_updates`)."""
    group_id = validate_id(group_id, "group id")

    async def measure(poll: bool) -> ProgressSnapshot:
        return await _measure(engine, group_id, window, poll, watch=True)

    async for p in progress_updates(measure, engine.clock, interval=interval):
        yield p
