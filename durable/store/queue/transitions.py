"""Staging of the state transitions that several operations share.

Each function stages writes into a `Txn`: the new record at its new key,
the job index, the counters, the attempt history. None of them commits.
"""

from __future__ import annotations

from durable.store.queue import keys
from durable.store.queue.records import (
    AttemptOutcome,
    HistoryEntry,
    JobRecord,
    JobStatus,
    encode_record,
)
from durable.store.queue.txn import Txn

__all__ = ["history", "put_record", "remove_job", "to_dead", "to_pending", "to_scheduled"]


def history(
    txn: Txn, rec: JobRecord, now: int, outcome: AttemptOutcome, error: str | None = None
) -> None:
    """Append the history entry of ``rec``'s latest attempt."""
    txn.append_history(
        rec.id,
        HistoryEntry(
            attempt=rec.attempts,
            recorded_at=now,
            outcome=outcome,
            claimed_at=rec.claimed_at,
            error=error,
        ),
    )


def put_record(txn: Txn, rec: JobRecord) -> bytes:
    """Write ``rec`` at the key of its status and point the index at it."""
    at = rec.run_at if rec.status is JobStatus.SCHEDULED else rec.completed_at
    pk = keys.primary_key(rec.status, rec.queue, rec.id, priority=rec.priority, at=at or 0)
    txn.put(pk, encode_record(rec))
    txn.put(keys.job_index_key(rec.id), pk)
    return pk


def to_pending(txn: Txn, rec: JobRecord, src: JobStatus) -> JobRecord:
    """Move ``rec`` (already removed from ``src``) to Pending; wake a worker after commit."""
    rec = rec.replace(status=JobStatus.PENDING, run_at=None)
    put_record(txn, rec)
    txn.move(rec.queue, src, JobStatus.PENDING)
    txn.inserted(rec.queue, rec.id)
    return rec


def to_scheduled(txn: Txn, rec: JobRecord, src: JobStatus, run_at: int) -> JobRecord:
    """Move ``rec`` (already removed from ``src``) to Scheduled at ``run_at``."""
    rec = rec.replace(status=JobStatus.SCHEDULED, run_at=run_at)
    put_record(txn, rec)
    txn.move(rec.queue, src, JobStatus.SCHEDULED)
    return rec


def to_dead(
    txn: Txn,
    rec: JobRecord,
    src: JobStatus,
    now: int,
    error: str,
    *,
    keep_claimed_at: bool,
) -> JobRecord:
    """Move ``rec`` (already removed from ``src``) to Dead, with history DeadLettered."""
    history(txn, rec, now, AttemptOutcome.DEAD_LETTERED, error)
    rec = rec.replace(
        status=JobStatus.DEAD,
        failed_at=now,
        last_error=error,
        claimed_at=rec.claimed_at if keep_claimed_at else None,
    )
    put_record(txn, rec)
    txn.move(rec.queue, src, JobStatus.DEAD)
    return rec


def remove_job(txn: Txn, rec: JobRecord, key: bytes, src: JobStatus) -> None:
    """Delete every trace of ``rec`` (found at ``key``); its object goes after the commit."""
    txn.delete(key)
    txn.delete(keys.job_index_key(rec.id))
    txn.delete(keys.history_key(rec.id))
    if rec.dedup_key is not None:
        dk = keys.dedup_key(rec.queue, rec.dedup_key)
        if txn.get(dk) == rec.id.encode():
            txn.delete(dk)
    txn.release(rec.payload_ref)
    txn.move(rec.queue, src, None)
