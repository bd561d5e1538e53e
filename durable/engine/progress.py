"""`Progress`: how far a set of runs has come (a run group, a job ``map``, a bulk batch).

One value type for the three: counts by state (``pending``, ``running``,
``waiting``, ``succeeded``, ``failed``, ``cancelled``, and ``total``), the
completion rate over a recent window, and an estimate of the time
remaining. `RunGroup.progress` answers for a group it knows the manifest
of; `scan_progress` answers from a group id alone (what a CLI has), and
`progress_updates` streams a `Progress` each time it changes.

What a measurement reads, all from the store's memory: each member's
record (`MemberRecord`, beside its run, in its own partition), and for an
active member its step pointer, its queue job and its run record, to tell
a running member (a worker holds its claim) from a waiting one (parked on a
durable wait: a scheduled wake-up, as `durable.decorators.waiting`) from a
pending one (queued, or not submitted yet). No object is read per member;
`RunGroup.progress` reads the group's manifest (one object) for the total
and the start time. `scan_progress` reads no object at all: it scans the
group's member records in each store given (an in-memory range scan).

The rate is stateless, so any process computes the same from the store:
the members whose termination (its ``terminated_at_ms``) falls in the last
``window`` seconds, divided by that window, or by the time since the group
started when that is shorter. The estimate is what remains over the rate;
None while the rate is unknown (nothing terminated recently), 0.0 once
nothing remains.
"""

from __future__ import annotations

import asyncio
import datetime as _dt
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from durable.engine import keys
from durable.engine.records import (
    MemberRecord,
    decode_member_record,
    decode_run_record,
    decode_step_pointer,
)
from durable.errors import GroupNotFound, InvalidArgument
from durable.store.clock import Clock
from durable.store.queue import JobStatus

if TYPE_CHECKING:
    from durable.engine.access import RunQueue
    from durable.store.kv import KvNamespace

__all__ = [
    "DEFAULT_WINDOW",
    "STATES",
    "Progress",
    "ProgressSnapshot",
    "compute_progress",
    "fold_members",
    "member_state",
    "progress_updates",
    "scan_progress",
]

#: The states a member is counted in, in the order a progress bar shows them.
STATES = ("pending", "running", "waiting", "succeeded", "failed", "cancelled")
#: Seconds of recent terminations the rate is measured over.
DEFAULT_WINDOW = 60.0


def _utc(ms: int) -> _dt.datetime:
    return _dt.datetime.fromtimestamp(ms / 1000, _dt.UTC)


@dataclass(frozen=True, slots=True)
class Progress:
    """How far a set of runs has come, at ``updated_ms``; see the module docstring.

    ``pending + running + waiting + succeeded + failed + cancelled == total``.
    """

    #: The members (items, jobs) of the set.
    total: int
    #: Queued and not claimed (starting, resuming, between retries), or not submitted yet.
    pending: int = 0
    #: A worker holds the claim on its delivery: its code executes.
    running: int = 0
    #: Parked on a durable wait (a sleep, a signal, a child run), holding no worker.
    waiting: int = 0
    #: Terminated: returned.
    succeeded: int = 0
    #: Terminated: raised, or failed by the engine.
    failed: int = 0
    #: Terminated: cancelled.
    cancelled: int = 0
    #: Completions per second over the recent window (0.0: none recently).
    rate_per_s: float = 0.0
    #: Estimated seconds until every member terminated: None while the rate is
    #: unknown, 0.0 once nothing remains.
    eta_s: float | None = None
    #: When the set started (epoch ms of the engine's clock), if known.
    started_ms: int | None = None
    #: When this was measured (epoch ms of the engine's clock).
    updated_ms: int = 0
    #: The seconds of recent terminations ``rate_per_s`` was measured over.
    window_s: float = field(default=DEFAULT_WINDOW, compare=False)

    @property
    def done(self) -> int:
        """Members that terminated, however they ended."""
        return self.succeeded + self.failed + self.cancelled

    @property
    def active(self) -> int:
        """Members not terminated yet (pending, running or waiting)."""
        return self.pending + self.running + self.waiting

    @property
    def fraction(self) -> float:
        """``done / total``, from 0.0 to 1.0 (1.0 for an empty set)."""
        return self.done / self.total if self.total else 1.0

    @property
    def finished(self) -> bool:
        """Every member terminated."""
        return self.done >= self.total

    @property
    def started(self) -> _dt.datetime | None:
        """`started_ms` as an aware UTC datetime."""
        return None if self.started_ms is None else _utc(self.started_ms)

    @property
    def updated(self) -> _dt.datetime:
        """`updated_ms` as an aware UTC datetime."""
        return _utc(self.updated_ms)

    def counts(self) -> dict[str, int]:
        """The counts by state, in `STATES` order."""
        return {state: getattr(self, state) for state in STATES}

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready data: the counts, ``total``, ``done``, ``fraction``,
        ``rate_per_s``, ``eta_s``, and the times in ISO 8601."""
        started = self.started
        return {
            **self.counts(),
            "total": self.total,
            "done": self.done,
            "fraction": self.fraction,
            "rate_per_s": self.rate_per_s,
            "eta_s": self.eta_s,
            "started": None if started is None else started.isoformat(),
            "updated": self.updated.isoformat(),
        }


def compute_progress(
    counts: dict[str, int],
    total: int,
    terminated_ms: Iterable[int],
    now_ms: int,
    *,
    started_ms: int | None = None,
    window: float = DEFAULT_WINDOW,
) -> Progress:
    """The `Progress` of members counted by state (``counts``, keys of
    `STATES`; a missing one is 0) out of ``total`` (members not counted are
    pending), whose terminations happened at ``terminated_ms`` (pure).

    The rate counts the terminations in ``(now_ms - window, now_ms]`` over the
    window, or over ``now_ms - started_ms`` when the set started later.
    """
    if not window > 0:
        raise InvalidArgument(f"the progress window must be > 0 seconds, got {window!r}")
    unknown = set(counts) - set(STATES)
    if unknown:
        raise InvalidArgument(f"not progress states: {sorted(unknown)}")
    by_state = {state: counts.get(state, 0) for state in STATES}
    by_state["pending"] += max(0, total - sum(by_state.values()))
    total = sum(by_state.values())
    window_ms = round(window * 1000)
    recent = sum(1 for t in terminated_ms if now_ms - window_ms < t <= now_ms)
    span_ms = window_ms if started_ms is None else min(window_ms, now_ms - started_ms)
    rate = recent * 1000 / span_ms if recent and span_ms > 0 else 0.0
    remaining = total - by_state["succeeded"] - by_state["failed"] - by_state["cancelled"]
    eta = 0.0 if remaining <= 0 else (remaining / rate if rate > 0 else None)
    return Progress(
        total=total,
        **by_state,
        rate_per_s=rate,
        eta_s=eta,
        started_ms=started_ms,
        updated_ms=now_ms,
        window_s=window,
    )


def member_state(queue: RunQueue, record: MemberRecord | None) -> str:
    """The state (one of `STATES`) of the member whose record is ``record``
    (None: not submitted yet: pending), read from ``queue``'s memory.

    As ``engine.runs()`` says it: ``running`` while its delivery's queue job
    is claimed; ``waiting`` while its delivery is a scheduled wake-up of a
    durable wait (a later step, never attempted, with a time), unless a
    cancellation is under way; else ``pending``.
    """
    if record is None:
        return "pending"
    if record.termination is not None:
        return record.termination.status.as_str()
    run_id = record.run_id
    kv = queue.kv
    raw = kv.get(keys.pointer_key(run_id))
    if raw is None:
        return "pending"  # submitted by this process, not applied yet
    pointer = decode_step_pointer(raw, f"step pointer of {run_id!r}")
    job = queue.job_record(pointer.job_id)
    if job is None:
        return "pending"
    if job.status is JobStatus.CLAIMED:
        return "running"
    if (
        pointer.step_number > 0
        and job.status is JobStatus.SCHEDULED
        and job.attempts == 0
        and job.run_at is not None
    ):
        raw_run = kv.get(keys.run_key(run_id))
        if (
            raw_run is not None
            and decode_run_record(raw_run, f"run record of {run_id!r}").cancel_requested
        ):
            return "pending"
        return "waiting"
    return "pending"


#: A KV watch: the namespace, the key, and the future its next write resolves.
Watch = tuple["KvNamespace", bytes, "asyncio.Future[None]"]


@dataclass(frozen=True, slots=True)
class ProgressSnapshot:
    """A `Progress` and, when measured with ``watch=True``, the KV watches
    registered as each member was read (the active members' records and
    step pointers: their next write may change it), for `progress_updates`
    (which withdraws them)."""

    progress: Progress
    watches: Sequence[Watch] = ()

    def unwatch(self) -> None:
        """Withdraw every watch (each one's failure, if any, is retrieved)."""
        for kv, key, fut in self.watches:
            kv.unwatch(key, fut)
            if fut.done() and not fut.cancelled():
                fut.exception()


class _Fold:
    """Counts members one at a time into a `ProgressSnapshot`."""

    __slots__ = ("counts", "earliest", "terminated", "total", "watches", "watching")

    def __init__(self, watching: bool) -> None:
        self.counts = dict.fromkeys(STATES, 0)
        self.terminated: list[int] = []
        self.watching = watching
        self.watches: list[Watch] = []
        self.earliest: int | None = None
        self.total = 0

    def _seen_at(self, ms: int) -> None:
        self.earliest = ms if self.earliest is None else min(self.earliest, ms)

    def add(self, queue: RunQueue, member_key: bytes, record: MemberRecord | None) -> None:
        self.total += 1
        state = member_state(queue, record)
        self.counts[state] += 1
        if record is not None and record.termination is not None:
            self.terminated.append(record.termination.terminated_at_ms)
            self._seen_at(record.termination.terminated_at_ms)
            return
        if self.watching:  # no await since the read: no write slips through
            self._watch(queue.kv, member_key)
            if record is not None:
                self._watch(queue.kv, keys.pointer_key(record.run_id))
        if record is not None:
            raw = queue.kv.get(keys.run_key(record.run_id))
            if raw is not None:
                run = decode_run_record(raw, f"run record of {record.run_id!r}")
                self._seen_at(run.submitted_at_ms)

    def _watch(self, kv: KvNamespace, key: bytes) -> None:
        self.watches.append((kv, key, kv.watch(key)))

    def snapshot(
        self, now_ms: int, window: float, total: int | None, started_ms: int | None
    ) -> ProgressSnapshot:
        progress = compute_progress(
            self.counts,
            self.total if total is None else total,
            self.terminated,
            now_ms,
            started_ms=self.earliest if started_ms is None else started_ms,
            window=window,
        )
        return ProgressSnapshot(progress, tuple(self.watches))


def fold_members(
    members: Iterable[tuple[RunQueue, str, MemberRecord | None]],
    group_id: str,
    now_ms: int,
    *,
    window: float = DEFAULT_WINDOW,
    total: int | None = None,
    started_ms: int | None = None,
    watch: bool = False,
) -> ProgressSnapshot:
    """The snapshot of group ``group_id``'s members given as ``(queue that
    holds it, member key, its record or None)``, read as they are given
    (``watch``: with a KV watch on each active member's keys)."""
    fold = _Fold(watch)
    for queue, key, record in members:
        fold.add(queue, keys.member_key(group_id, key), record)
    return fold.snapshot(now_ms, window, total, started_ms)


async def scan_progress(
    queues: Sequence[RunQueue],
    group_id: str,
    clock: Clock,
    *,
    window: float = DEFAULT_WINDOW,
    watch: bool = False,
) -> ProgressSnapshot:
    """The progress of group ``group_id`` from its member records alone, in
    every store of ``queues`` (each partition of a partitioned store);
    `GroupNotFound` when none holds a record of it.

    Needs no manifest (a CLI knows the group id only): ``total`` counts the
    members submitted (a member the submitting process had not submitted
    yet is not counted), and the start is the earliest submission of an
    active member or termination of a finished one.
    """
    fold = _Fold(watch)
    prefix = keys.group_prefix(group_id)
    try:
        for queue in queues:
            async for page in queue.kv.internal().entries(prefix, page_size=512):
                for key, value in page:
                    name = key[len(prefix) :].decode(errors="replace")
                    record = decode_member_record(value, f"member record {name!r} of {group_id!r}")
                    fold.add(queue, key, record)
        if fold.total == 0:
            raise GroupNotFound(group_id)
    except BaseException:
        ProgressSnapshot(Progress(0), tuple(fold.watches)).unwatch()
        raise
    return fold.snapshot(clock.now_ms(), window, None, None)


async def progress_updates(
    measure: Callable[[bool], Awaitable[ProgressSnapshot]],
    clock: Clock,
    *,
    interval: float = 1.0,
) -> AsyncIterator[Progress]:
    """A `Progress` at once, then another after each change, until one shows
    every member terminated (it is the last yielded).

    ``measure(poll)`` takes a snapshot with watches (``poll``: a client's
    view should read the log first). Between snapshots it sleeps on the
    snapshot's KV watches, registered as each member was read (a member's
    record or step pointer rewritten by a commit wakes it; several landing
    together wake it once; none slips in before its watch), and at most
    ``interval`` seconds of ``clock``, after which it measures again (with
    ``poll``) whatever happened: a claim (pending to running) writes no KV,
    and the rate and the estimate move with time.
    """
    if not interval > 0:
        raise InvalidArgument(f"the progress interval must be > 0 seconds, got {interval!r}")
    poll = True
    while True:
        snap = await measure(poll)
        try:
            yield snap.progress
            if snap.progress.finished:
                return
            poll = not await _next_write(snap.watches, clock, interval)
        finally:
            snap.unwatch()


async def _next_write(watches: Sequence[Watch], clock: Clock, seconds: float) -> bool:
    """Wait for a commit writing one of ``watches``, at most ``seconds`` of
    ``clock``; True if one came (a store failure it reports is raised)."""
    futures = [fut for _, _, fut in watches]
    if not any(f.done() for f in futures):
        sleeper = asyncio.ensure_future(clock.sleep(seconds))
        try:
            await asyncio.wait({sleeper, *futures}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            sleeper.cancel()
            await asyncio.gather(sleeper, return_exceptions=True)
    fired = [f for f in futures if f.done() and not f.cancelled()]
    for f in fired:
        f.result()  # the store's failure, if a commit never landed
    return bool(fired)
