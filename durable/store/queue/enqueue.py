"""Building new job records and staging them, alone or as settlement effects.

Two phases (semantics 1.3, 1.21):

1. `prepare` (async, before the transaction): validate, take an id, decide
   Pending or Scheduled, write an offloaded payload to its object.
2. `stage` (sync, inside the transaction): check the dedup index and id
   reuse, write the record, its index, its dedup entry and the counter.

Ids and payload objects are fixed once in phase 1, so a settlement that
carries follow-ups never writes an object twice.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass

from durable.errors import DuplicateJobId, InvalidOption
from durable.store.keyspace import user_key
from durable.store.queue import keys
from durable.store.queue.core import Core
from durable.store.queue.effects import (
    AlreadyEnqueued,
    EnqueueRequest,
    EnqueueResult,
    New,
    SettlementEffects,
)
from durable.store.queue.options import EnqueueOptions, validate_queue_name
from durable.store.queue.records import JobRecord, JobStatus, encode_record
from durable.store.queue.txn import Txn

__all__ = [
    "PreparedEffects",
    "PreparedJob",
    "prepare",
    "prepare_effects",
    "prepare_many",
    "stage",
    "stage_effects",
]


@dataclass(slots=True)
class PreparedJob:
    """A job record ready to stage; its payload object (if any) is written."""

    record: JobRecord
    id_override: bool

    @property
    def blob(self) -> str | None:
        """The payload object this job owns, if offloaded."""
        return self.record.payload_ref


def _check_payload(payload: object) -> bytes:
    if isinstance(payload, bytes):
        return payload
    if isinstance(payload, bytearray | memoryview):
        return bytes(payload)
    raise InvalidOption(f"payload must be bytes, got {type(payload).__name__}")


def _build(core: Core, queue: str, payload: bytes, options: EnqueueOptions) -> JobRecord:
    """The stored record of a new job, payload still inline (no I/O)."""
    validate_queue_name(queue)
    cfg = core.config(queue)
    now = core.now()
    run_at = options.run_at_ms()
    scheduled = run_at is not None and run_at > now
    return JobRecord(
        id=options.id_override if options.id_override is not None else core.ids.next(),
        queue=queue,
        payload=payload,
        status=JobStatus.SCHEDULED if scheduled else JobStatus.PENDING,
        attempts=0,
        max_attempts=(
            options.max_attempts if options.max_attempts is not None else cfg.max_attempts
        ),
        enqueued_at=now,
        priority=options.priority if options.priority is not None else cfg.default_priority,
        headers=dict(options.headers or {}),
        run_at=run_at if scheduled else None,
        dedup_key=options.dedup_key,
    )


async def _offload(core: Core, record: JobRecord) -> PreparedJob:
    threshold = core.options.payload_offload_threshold
    over = threshold is not None and len(record.payload) > threshold
    if over:
        name = await core.blobs.put(record.payload)
        record = record.replace(payload=b"", payload_ref=name)
    return PreparedJob(record, id_override=False)


async def prepare_many(
    core: Core, requests: Sequence[tuple[str, bytes, EnqueueOptions]]
) -> list[PreparedJob]:
    """Prepare jobs in order; a failed object write deletes those already written."""
    records = [_build(core, q, _check_payload(p), o) for q, p, o in requests]
    threshold = core.options.payload_offload_threshold
    if threshold is None or all(len(r.payload) <= threshold for r in records):
        # Nothing to write first: no tasks, no awaits (the common case).
        return [
            PreparedJob(r, id_override=o.id_override is not None)
            for r, (_, _, o) in zip(records, requests, strict=True)
        ]
    results = await asyncio.gather(*(_offload(core, r) for r in records), return_exceptions=True)
    failure = next((r for r in results if isinstance(r, BaseException)), None)
    prepared = [r for r in results if isinstance(r, PreparedJob)]
    if failure is not None:
        await core.delete_blobs([b for p in prepared if (b := p.blob) is not None])
        raise failure
    for p, (_, _, o) in zip(prepared, requests, strict=True):
        p.id_override = o.id_override is not None
    return prepared


async def prepare(core: Core, queue: str, payload: bytes, options: EnqueueOptions) -> PreparedJob:
    """Prepare one job."""
    return (await prepare_many(core, [(queue, payload, options)]))[0]


def stage(txn: Txn, job: PreparedJob) -> EnqueueResult:
    """Stage a prepared job; a dedup hit stages nothing; a reused id raises."""
    rec = job.record
    dedup = keys.dedup_key(rec.queue, rec.dedup_key) if rec.dedup_key is not None else None
    if dedup is not None:
        existing = txn.get(dedup)
        if existing is not None:
            return AlreadyEnqueued(existing.decode())
    index = keys.job_index_key(rec.id)
    if job.id_override and txn.get(index) is not None:
        raise DuplicateJobId(rec.id)
    pk = keys.primary_key(rec.status, rec.queue, rec.id, priority=rec.priority, at=rec.run_at or 0)
    txn.put(pk, encode_record(rec))
    txn.put(index, pk)
    if dedup is not None:
        txn.put(dedup, rec.id.encode())
    txn.move(rec.queue, None, rec.status)
    if rec.status is JobStatus.PENDING:
        txn.inserted(rec.queue, rec.id)
    return New(rec.id)


@dataclass(slots=True)
class PreparedEffects:
    """A validated effects set with its follow-up jobs prepared."""

    effects: SettlementEffects
    jobs: list[PreparedJob]

    def blobs(self, results: Sequence[EnqueueResult] | None = None) -> list[str]:
        """Objects to delete: all (``results`` None) or those of downgraded follow-ups."""
        return [
            b
            for i, job in enumerate(self.jobs)
            if (b := job.blob) is not None and (results is None or not results[i].is_new)
        ]


async def prepare_effects(core: Core, effects: SettlementEffects | None) -> PreparedEffects:
    """Validate ``effects`` and prepare its follow-ups (before any transaction)."""
    effects = effects if effects is not None else SettlementEffects()
    if not isinstance(effects, SettlementEffects):
        raise InvalidOption(f"effects must be SettlementEffects, got {effects!r}")
    effects.validate()
    reqs: list[EnqueueRequest] = effects.enqueues
    jobs = await prepare_many(core, [(r.queue, r.payload, r.options) for r in reqs])
    return PreparedEffects(effects, jobs)


def stage_effects(txn: Txn, fx: PreparedEffects) -> list[EnqueueResult]:
    """Stage follow-ups, then KV puts, then KV deletes."""
    results = [stage(txn, job) for job in fx.jobs]
    for key, value in fx.effects.kv_puts.items():
        txn.put(user_key(key), value)
    for key in fx.effects.kv_deletes:
        txn.delete(user_key(key))
    return results
