"""Progress of a workflow run: crashes of a progressing run never fail it.

A delivery of a workflow run is a claim of a queue job, and every claim
counts as an attempt, also one that dies with its process (kill -9, OOM, a
spot instance reclaimed). A run that journals something in each delivery
is making progress, however often its processes die; a run whose
deliveries end at the same point again and again (it crashes the process
there, or fails transiently there) is stalled, and one that keeps at it is
a *poison run*. The run counts only the attempts without progress:

- the first journal write of each delivery also writes the run's *progress
  mark*, ``workflow/progress/{run_id}`` = ``[step number, attempt]`` of
  that delivery, in the same commit (`Journal.stage`; no commit of its
  own);
- a delivery starts by reading how its queue job's earlier attempts ended
  (the queue's attempt history) and counting those after the mark
  (`judge`): each that was cut short (its process died, its lease ran
  out) or failed transiently is an attempt without progress;
- when `Engine`'s ``max_attempts_without_progress`` (default
  `MAX_ATTEMPTS_WITHOUT_PROGRESS`) of them came in a row, the run fails
  with `RunStalled`, naming where its journal stands and the attempts,
  before the workflow runs again;
- before that, a stalled run *waits* before it runs again: a delivery
  whose previous attempt was cut short without progress is put back with
  a delay of `deferral` (1 s after the first such attempt, doubling, at
  most `MAX_DEFERRAL`), so a poison run crashes its workers at most that
  often (the other runs carry on in between) and a run that was merely
  unlucky (a host killed again and again) is not failed before it had the
  chance of a quieter host for an hour (20 attempts). A deferral is itself
  no attempt without progress; transient errors wait the same delays;
- a delivery that ends on a durable wait acks its job: the run's next job
  starts counting afresh (its attempts start at 1, and the mark names
  another step number);
- the runner flushes the delivery's claim (the queue does not await one)
  before anything of the run runs, so an attempt that kills its process
  at once is counted too; except a job's first claim in the process that
  made it pending (`Claim.fresh`), which rides the run's next write: one
  such attempt dying uncounted leaves the job pending, and the next
  process, where the claim is not fresh, counts every attempt.

The queue itself never ends a run: workflow jobs get `QUEUE_ATTEMPTS`
attempts, so neither crash recovery at open nor the reaper dead-letters a
progressing run. A delivery released because a payload cannot be verified
moves the mark to its own attempt (`mark_progress`), so a run waiting for a
correctly keyed worker is never failed by the count.

The mark is a KV record of the run, removed with its journal (archived or
past its retention: `durable.decorators.archive`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import msgpack

from durable.decorators.journal import PATCH, SLEEP, Journal
from durable.engine._checks import U32_MAX
from durable.engine.runs import RESERVED_KV_PREFIX
from durable.errors import CorruptEngineRecord, RunStalled
from durable.store.queue import AttemptOutcome, HistoryEntry

if TYPE_CHECKING:
    from durable.engine.delivery import Step
    from durable.store.kv import KvNamespace

__all__ = [
    "DEFERRED",
    "MAX_ATTEMPTS_WITHOUT_PROGRESS",
    "MAX_DEFERRAL",
    "QUEUE_ATTEMPTS",
    "Verdict",
    "check_progress",
    "decode_mark",
    "deferral",
    "encode_mark",
    "judge",
    "mark_progress",
    "progress_key",
    "stalled_at",
]

#: Attempts of a run that may end in a row without journaling anything
#: before the run fails with `RunStalled` (``Engine(max_attempts_without_progress=...)``).
MAX_ATTEMPTS_WITHOUT_PROGRESS = 20
#: The longest a stalled run waits before it runs again (seconds).
MAX_DEFERRAL = 300.0
#: How the error text of a deferred delivery begins (in the job's history).
DEFERRED = "deferred:"
#: The queue's attempt limit of a workflow job: never reached, so the queue
#: never dead-letters a run; the count without progress bounds it instead.
QUEUE_ATTEMPTS = U32_MAX

#: How an attempt ends when its process dies or its lease runs out.
_CUT_SHORT = (AttemptOutcome.INTERRUPTED, AttemptOutcome.LEASE_EXPIRED)


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


def deferral(stalled: int) -> float:
    """Seconds a run waits before its next attempt after ``stalled`` (>= 1)
    attempts in a row without progress: 1, 2, 4, ... at most `MAX_DEFERRAL`."""
    return min(2.0 ** min(stalled - 1, 32), MAX_DEFERRAL)


@dataclass(frozen=True, slots=True)
class Verdict:
    """What the attempts of a delivery's job before it say (`judge`)."""

    #: The earlier attempts since the progress mark that ended without progress.
    stalled: int
    #: Seconds to wait before running (the last attempt was cut short with no
    #: progress), or None: run now.
    defer: float | None


def judge(
    mark: tuple[int, int] | None,
    step_number: int,
    attempts: int,
    history: Sequence[HistoryEntry],
) -> Verdict:
    """The verdict on attempt ``attempts`` of step ``step_number``'s job, from
    the run's progress mark and the job's attempt history (pure).

    Every earlier attempt of the job after the mark's (a mark of another
    step number is an earlier job's: every attempt of this one counts) ended
    without progress, except a deferral (a nack whose error begins with
    `DEFERRED`). When the attempt just before this one was cut short (its
    process died, its lease ran out) and at least one counts, the run waits
    `deferral` first; after a deferral, or a transient error (the queue's
    backoff, or the runner's, has passed), it runs.
    """
    since = mark[1] if mark is not None and mark[0] == step_number else 0
    ended = [e for e in history if since < e.attempt < attempts]
    stalled = sum(
        1
        for e in ended
        if not (e.outcome is AttemptOutcome.RETRIED and (e.error or "").startswith(DEFERRED))
    )
    last = max(ended, key=lambda e: e.attempt, default=None)
    cut_short = last is not None and last.outcome in _CUT_SHORT
    return Verdict(stalled, deferral(stalled) if stalled and cut_short else None)


def _how_it_ended(entry: HistoryEntry) -> str:
    """How an attempt ended, for `RunStalled`."""
    if entry.outcome is AttemptOutcome.INTERRUPTED:
        return f"attempt {entry.attempt}: its process exited while it ran"
    if entry.outcome is AttemptOutcome.LEASE_EXPIRED:
        return f"attempt {entry.attempt}: its lease expired"
    return f"attempt {entry.attempt}: {entry.error or entry.outcome.value}"


def stalled_at(journal: Journal) -> tuple[int, str]:
    """Where a run's journal stands: the first position without an outcome,
    and what is known of it (for `RunStalled`)."""
    position = 0
    while (entry := journal.get(position)) is not None and (
        entry.resolved or entry.kind in (SLEEP, PATCH)
    ):
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
    history: Callable[[], Sequence[HistoryEntry]],
) -> Verdict:
    """`RunStalled` (with the last error of ``history()``, the job's attempt
    history, read only on a redelivery) when ``limit`` attempts of
    ``step``'s job in a row ended without progress. Else the `Verdict`;
    when it says to run now, the progress mark of this delivery is staged
    with the journal's next write."""
    run_id = step.run_id
    verdict = Verdict(0, None)
    if step.attempts > 1:
        raw = kv.get(progress_key(run_id))
        mark = decode_mark(raw, run_id) if raw is not None else None
        ended = history()
        verdict = judge(mark, step.step_number, step.attempts, ended)
        if verdict.stalled >= limit:
            position, where = stalled_at(journal)
            last = max(ended, key=lambda e: e.attempt, default=None)
            error = _how_it_ended(last) if last is not None else None
            raise RunStalled(run_id, workflow, position, where, verdict.stalled, error)
    if verdict.defer is None:
        journal.stage(progress_key(run_id), encode_mark(step.step_number, step.attempts))
    return verdict


async def mark_progress(kv: KvNamespace, step: Step) -> None:
    """Move the progress mark of ``step``'s run to this delivery (one commit;
    durable on return): the attempts before it are not counted."""
    await kv.put(progress_key(step.run_id), encode_mark(step.step_number, step.attempts))
