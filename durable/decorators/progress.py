"""Progress of a workflow run: crashes of a progressing run never fail it.

A delivery of a workflow run is a claim of a queue job, and every claim
counts as an attempt, also one that dies with its process (kill -9, OOM, a
spot instance reclaimed). A run that journals something in each delivery
is making progress, however often its processes die; a run that ends its
deliveries at the same point again and again (it crashes the process
there, or fails transiently there) is a *poison run*. The run counts only
the attempts without progress:

- the first journal write of each delivery also writes the run's *progress
  mark*, ``workflow/progress/{run_id}`` = ``[step number, attempt]`` of
  that delivery, in the same commit (`Journal.stage`; no commit of its
  own);
- a delivery starts by counting the attempts of its queue job since the
  mark (`attempts_without_progress`): when `Engine`'s
  ``max_attempts_without_progress`` (default
  `MAX_ATTEMPTS_WITHOUT_PROGRESS`) of them ended in a row without
  journaling anything, the run fails with `RunStalled`, naming where its
  journal stands and the attempts, before the workflow runs again;
- a delivery that ends on a durable wait acks its job: the run's next job
  starts counting afresh (its attempts start at 1, and the mark names
  another step number);
- the runner flushes the delivery's claim (the queue does not await one)
  before anything of the run runs, so an attempt that kills its process
  at once is counted too.

The queue itself never ends a run: workflow jobs get `QUEUE_ATTEMPTS`
attempts, so neither crash recovery at open nor the reaper dead-letters a
progressing run. Transient errors of the runner (a journal write that
fails, a lost lease) count against the same bound, after the queue's
backoff; a delivery released because a payload cannot be verified moves
the mark to its own attempt (`mark_progress`), so a run waiting for a
correctly keyed worker is never failed by the count.

The mark is a KV record of the run, removed with its journal (archived or
past its retention: `durable.decorators.archive`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import msgpack

from durable.decorators.journal import SLEEP, Journal
from durable.engine._checks import U32_MAX
from durable.engine.runs import RESERVED_KV_PREFIX
from durable.errors import CorruptEngineRecord, RunStalled

if TYPE_CHECKING:
    from durable.engine.delivery import Step
    from durable.store.kv import KvNamespace

__all__ = [
    "MAX_ATTEMPTS_WITHOUT_PROGRESS",
    "QUEUE_ATTEMPTS",
    "attempts_without_progress",
    "check_progress",
    "decode_mark",
    "encode_mark",
    "mark_progress",
    "progress_key",
    "stalled_at",
]

#: Attempts of a run that may end in a row without journaling anything
#: before the run fails with `RunStalled` (``Engine(max_attempts_without_progress=...)``).
MAX_ATTEMPTS_WITHOUT_PROGRESS = 10
#: The queue's attempt limit of a workflow job: never reached, so the queue
#: never dead-letters a run; the count without progress bounds it instead.
QUEUE_ATTEMPTS = U32_MAX


def progress_key(run_id: str) -> bytes:
    """The KV key of run ``run_id``'s progress mark."""
    return RESERVED_KV_PREFIX + b"progress/" + run_id.encode()


def encode_mark(step_number: int, attempt: int) -> bytes:
    """The stored progress mark: attempt ``attempt`` of step ``step_number``
    advanced the journal."""
    packed: bytes = msgpack.packb([step_number, attempt])
    return packed


def decode_mark(data: bytes, run_id: str) -> tuple[int, int]:
    """`encode_mark` reversed; `CorruptEngineRecord` naming the run."""
    try:
        mark = msgpack.unpackb(data)
        if (
            not isinstance(mark, list)
            or len(mark) != 2
            or not all(isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in mark)
        ):
            raise ValueError(f"{mark!r} is not [step number, attempt]")
    except (ValueError, TypeError, msgpack.UnpackException) as e:
        raise CorruptEngineRecord(f"the progress mark of run {run_id!r}", str(e)) from None
    return mark[0], mark[1]


def attempts_without_progress(mark: tuple[int, int] | None, step_number: int, attempts: int) -> int:
    """How many attempts of step ``step_number``'s job ended in a row without
    journaling anything, seen from its attempt ``attempts`` (this one
    included in ``attempts``, not in the count): those after the mark's when
    the mark is of this step, else every earlier one."""
    marked = mark[1] if mark is not None and mark[0] == step_number else 0
    return max(attempts - 1 - marked, 0)


def stalled_at(journal: Journal) -> tuple[int, str]:
    """Where a run's journal stands: the first position without an outcome,
    and what is known of it (for `RunStalled`)."""
    position = 0
    while (entry := journal.get(position)) is not None and (entry.resolved or entry.kind == SLEEP):
        position += 1
    entry = journal.get(position)
    if entry is not None:
        return position, f"{entry.describe()}, begun"
    before = journal.get(position - 1) if position else None
    if before is None:
        return position, "before its first step"
    return position, f"after {before.describe()}"


def check_progress(
    kv: KvNamespace,
    journal: Journal,
    step: Step,
    workflow: str,
    limit: int,
    last_error: Callable[[], str | None],
) -> None:
    """`RunStalled` (with ``last_error()``, the job's last recorded error) when
    ``limit`` attempts of ``step``'s job in a row ended without progress;
    else stage the progress mark of this delivery with the journal's next
    write."""
    run_id = step.run_id
    raw = kv.get(progress_key(run_id))
    mark = decode_mark(raw, run_id) if raw is not None else None
    stalled = attempts_without_progress(mark, step.step_number, step.attempts)
    if stalled >= limit:
        position, where = stalled_at(journal)
        raise RunStalled(run_id, workflow, position, where, stalled, last_error())
    journal.stage(progress_key(run_id), encode_mark(step.step_number, step.attempts))


async def mark_progress(kv: KvNamespace, step: Step) -> None:
    """Move the progress mark of ``step``'s run to this delivery (one commit;
    durable on return): the attempts before it are not counted."""
    await kv.put(progress_key(step.run_id), encode_mark(step.step_number, step.attempts))
