"""Background upkeep: lease expiry, promotion, retention sweeps, open recovery.

Every transition here commits without awaiting durability (semantics 1.30):
each is redone by recovery if lost -- a lost requeue is redone at the next
open from the claimed record, a lost promotion by the next tick, a lost
sweep delete by the next sweep. Each job moves in a transaction of its own,
so one bad record never blocks the others.
"""

from __future__ import annotations

from dataclasses import dataclass

from durable._logging import get_logger
from durable.errors import CorruptRecord
from durable.store.queue import keys
from durable.store.queue.core import Core
from durable.store.queue.options import to_ms
from durable.store.queue.records import AttemptOutcome, JobRecord, JobStatus, decode_record
from durable.store.queue.transitions import history, remove_job, to_dead, to_pending
from durable.store.queue.waiters import Dead

__all__ = [
    "INTERRUPTED_ERROR",
    "LEASE_EXPIRED_ERROR",
    "Maintenance",
    "SweepCounts",
]

log = get_logger("durable.store.queue")

#: ``last_error`` of a job dead-lettered by the reaper.
LEASE_EXPIRED_ERROR = "lease expired"
#: ``last_error`` of a job dead-lettered at open (its claimer's process died).
INTERRUPTED_ERROR = "claim interrupted by process exit"


@dataclass(frozen=True, slots=True)
class SweepCounts:
    """How many records a retention sweep deleted."""

    done: int = 0
    dead: int = 0


class Maintenance:
    """Reaper, scheduler, sweeps and open-time recovery of one open queue."""

    def __init__(self, core: Core) -> None:
        self.core = core

    # ------------------------------------------------------------- leases

    def _requeue_claimed(
        self, rec: JobRecord, now: int, outcome: AttemptOutcome, dead_error: str
    ) -> JobRecord:
        """One transaction: a claimed record whose claim is gone -> Pending or Dead."""
        core = self.core
        txn = core.txn()
        txn.delete(keys.claimed_key(rec.queue, rec.id))
        if rec.exhausted:
            dead = to_dead(txn, rec, JobStatus.CLAIMED, now, dead_error, keep_claimed_at=True)
            waiters = core.waiters
            txn.on_durable.append(lambda: waiters.deliver(rec.id, lambda: Dead(dead)))
            txn.after.append(lambda: core.leases.forget_job(rec.id))
            txn.commit_nowait(core.writer)
            return dead
        history(txn, rec, now, outcome)
        pending = to_pending(txn, rec.replace(claimed_at=None), JobStatus.CLAIMED)
        txn.commit_nowait(core.writer)
        return pending

    def reap_expired(self) -> int:
        """Requeue (or dead-letter) every job whose lease has expired; how many moved.

        A storage error ends the pass (raised); an undecodable record leaves
        its lease marked for the next pass.
        """
        core = self.core
        now = core.now()
        moved = 0
        for (queue, id), token in core.leases.take_expired(now):
            if not core.leases.holds(queue, id, token):
                continue
            raw = core.state.get(keys.claimed_key(queue, id))
            if raw is None:
                core.leases.remove(queue, id, token)
                continue
            try:
                rec = decode_record(raw, f"claimed job {id!r}")
            except CorruptRecord as e:
                log.error("reaper skipped an undecodable record", queue=queue, id=id, error=str(e))
                continue
            self._requeue_claimed(rec, now, AttemptOutcome.LEASE_EXPIRED, LEASE_EXPIRED_ERROR)
            core.leases.remove(queue, id, token)
            moved += 1
        return moved

    def recover_claims(self) -> int:
        """At open: requeue (or dead-letter) every claimed record; how many moved.

        Leases are process memory, so every claimed record at open belongs to
        a process that died or was fenced. Undecodable records are logged
        and left.
        """
        core = self.core
        now = core.now()
        found = list(core.state.scan_prefix(keys.space_prefix(JobStatus.CLAIMED)))
        moved = 0
        for key, raw in found:
            try:
                rec = decode_record(raw, repr(key))
            except CorruptRecord as e:
                log.error("open: undecodable claimed record left", key=key, error=str(e))
                continue
            self._requeue_claimed(rec, now, AttemptOutcome.INTERRUPTED, INTERRUPTED_ERROR)
            moved += 1
        if moved:
            log.info("open: requeued interrupted claims", count=moved, url=core.writer.url)
        return moved

    # ---------------------------------------------------------- scheduler

    def promote_due(self) -> int:
        """Move every scheduled job with ``run_at <= now`` to Pending; how many moved."""
        core = self.core
        now = core.now()
        due: list[tuple[bytes, bytes]] = []
        for key, raw in core.state.scan_prefix(keys.scheduled_prefix()):
            parsed = keys.parse_primary(key)
            if parsed is not None and parsed.at > now:
                break
            due.append((key, raw))
        moved = 0
        for key, raw in due:
            try:
                rec = decode_record(raw, repr(key))
            except CorruptRecord as e:
                log.error("scheduler skipped an undecodable record", key=key, error=str(e))
                continue
            txn = core.txn()
            txn.delete(key)
            to_pending(txn, rec, JobStatus.SCHEDULED)
            txn.commit_nowait(core.writer)
            moved += 1
        return moved

    # ------------------------------------------------------------- sweeps

    def _delete(self, key: bytes, rec: JobRecord, status: JobStatus) -> None:
        txn = self.core.txn()
        remove_job(txn, rec, key, status)
        txn.commit_nowait(self.core.writer)

    def sweep_done(self) -> int:
        """Delete kept Done records past their queue's ``keep_done_jobs``; how many."""
        core = self.core
        retentions = [c.keep_done_jobs for c in core.options.all_configs()]
        kept = [r for r in retentions if r is not None]
        if not kept:
            return 0
        now = core.now()
        # Keys are in completion order: nothing younger than the shortest
        # retention can be due, so the scan stops there. (The reference stops
        # at the longest retention, which keeps short-retention queues' jobs
        # as long as the longest; each queue's own retention is honoured here.)
        horizon = now - to_ms(min(kept))
        victims: list[tuple[bytes, JobRecord]] = []
        for key, raw in core.state.scan_prefix(keys.done_prefix()):
            parsed = keys.parse_primary(key)
            if parsed is not None and parsed.at >= horizon:
                break  # strict: completed_at < now - retention
            try:
                rec = decode_record(raw, repr(key))
            except CorruptRecord as e:
                log.error("done sweep skipped an undecodable record", key=key, error=str(e))
                continue
            retention = core.config(rec.queue).keep_done_jobs
            cutoff = now - to_ms(retention or 0)
            completed = rec.completed_at if rec.completed_at is not None else 0
            if completed < cutoff:
                victims.append((key, rec))
        for key, rec in victims:
            self._delete(key, rec, JobStatus.DONE)
        return len(victims)

    def sweep_dead(self) -> int:
        """Delete Dead records past their queue's ``dead_retention``; how many."""
        core = self.core
        if all(c.dead_retention is None for c in core.options.all_configs()):
            return 0
        now = core.now()
        victims: list[tuple[bytes, JobRecord]] = []
        for key, raw in core.state.scan_prefix(keys.space_prefix(JobStatus.DEAD)):
            try:
                rec = decode_record(raw, repr(key))
            except CorruptRecord as e:
                log.error("dead sweep skipped an undecodable record", key=key, error=str(e))
                continue
            retention = core.config(rec.queue).dead_retention
            if retention is None:
                continue
            failed = rec.failed_at if rec.failed_at is not None else 0
            if failed < now - to_ms(retention):
                victims.append((key, rec))
        for key, rec in victims:
            self._delete(key, rec, JobStatus.DEAD)
        return len(victims)

    def sweep(self) -> SweepCounts:
        """Both retention sweeps."""
        return SweepCounts(done=self.sweep_done(), dead=self.sweep_dead())
