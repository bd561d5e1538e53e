"""The durable job queue (the Python counterpart of the Rust crate ``taquba``).

Every queue of a process lives in one store on an object store, next to the
caller KV namespace, so a job transition, its follow-up jobs and KV writes
commit in one atomic transaction. Open the store with `Queue.open`; read it
from another process with `QueueReader.open`.

Jobs move Pending/Scheduled -> Claimed -> Done/Dead (or are deleted).
Claims carry leases held in process memory; a claim whose process dies is
requeued by the next open, one whose lease expires by the reaper. Handlers
run at least once: make them idempotent.
"""

from durable.store.queue.effects import (
    AlreadyEnqueued,
    EnqueueRequest,
    EnqueueResult,
    New,
    SettlementEffects,
)
from durable.store.queue.heartbeat import Heartbeat
from durable.store.queue.leases import CancelToken, Claim, LeaseHandle
from durable.store.queue.maintenance import INTERRUPTED_ERROR, LEASE_EXPIRED_ERROR, SweepCounts
from durable.store.queue.options import (
    DEFAULT_PAYLOAD_OFFLOAD_THRESHOLD,
    LEASE_MARGIN,
    MAX_QUEUE_NAME_BYTES,
    PRIORITY_HIGH,
    PRIORITY_LOW,
    PRIORITY_NORMAL,
    EnqueueOptions,
    OpenOptions,
    QueueConfig,
)
from durable.store.queue.queue import Queue
from durable.store.queue.records import AttemptOutcome, HistoryEntry, JobRecord, JobStatus
from durable.store.queue.settle import (
    CancelOutcome,
    DeadLettered,
    NackOutcome,
    Retried,
    WakeOutcome,
)
from durable.store.queue.view import JobPage, QueueReader, QueueStats, QueueView, StoreActivity
from durable.store.queue.waiters import Cancelled, Completion, Dead, Done, NotFound, TimedOut
from durable.store.queue.worker import (
    FailWith,
    PermanentFailure,
    Worker,
    run_worker,
    run_worker_concurrent,
)

__all__ = [
    "DEFAULT_PAYLOAD_OFFLOAD_THRESHOLD",
    "INTERRUPTED_ERROR",
    "LEASE_EXPIRED_ERROR",
    "LEASE_MARGIN",
    "MAX_QUEUE_NAME_BYTES",
    "PRIORITY_HIGH",
    "PRIORITY_LOW",
    "PRIORITY_NORMAL",
    "AlreadyEnqueued",
    "AttemptOutcome",
    "CancelOutcome",
    "CancelToken",
    "Cancelled",
    "Claim",
    "Completion",
    "Dead",
    "DeadLettered",
    "Done",
    "EnqueueOptions",
    "EnqueueRequest",
    "EnqueueResult",
    "FailWith",
    "Heartbeat",
    "HistoryEntry",
    "JobPage",
    "JobRecord",
    "JobStatus",
    "LeaseHandle",
    "NackOutcome",
    "New",
    "NotFound",
    "OpenOptions",
    "PermanentFailure",
    "Queue",
    "QueueConfig",
    "QueueReader",
    "QueueStats",
    "QueueView",
    "Retried",
    "SettlementEffects",
    "StoreActivity",
    "SweepCounts",
    "TimedOut",
    "WakeOutcome",
    "Worker",
    "run_worker",
    "run_worker_concurrent",
]
