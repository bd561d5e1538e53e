"""`RunQueue`: what the workflow runtime needs of the store it runs on.

The runtime, its signals, groups and typed jobs were written against the
store's `Queue`, the one writer of a store. A process that does not own
the store reaches it another way: it reads a read-only view and writes
requests that the owner applies (`durable.cluster.client.ClientQueue`).
Both give the runtime this interface, so every read of the runtime works in
either process; the writes of a queue that is not the owner's raise
`ReadOnlyStore`, and a runtime over one overrides the operations that write
(`durable.cluster.client.ClientRuntime`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

from durable.store.clock import Clock
from durable.store.kv import KvNamespace
from durable.store.objects.base import ObjectStore
from durable.store.queue import (
    CancelOutcome,
    EnqueueOptions,
    EnqueueResult,
    JobRecord,
    OpenOptions,
    SettlementEffects,
    WakeOutcome,
)
from durable.store.queue.view import QueueView
from durable.store.queue.worker import WorkerQueue

__all__ = ["RunQueue", "RunWriter"]


class RunWriter(Protocol):
    """The part of the store's writer the runtime uses."""

    @property
    def objects(self) -> ObjectStore:
        """Where the store's objects (memo entries, blobs) live."""
        ...

    async def flush(self) -> None:
        """Wait until what this process committed is durable."""
        ...

    def flush_within(self, seconds: float) -> None:
        """Have what this process committed start its flush within
        ``seconds``, without waiting for it."""
        ...


class RunQueue(WorkerQueue, Protocol):
    """The store as the runtime uses it: `durable.store.queue.Queue` for its
    owner, `durable.cluster.client.ClientQueue` elsewhere."""

    @property
    def clock(self) -> Clock:
        """The clock of every timestamp and timer."""
        ...

    @property
    def options(self) -> OpenOptions:
        """How the store was opened."""
        ...

    @property
    def writer(self) -> RunWriter:
        """The store's writer (objects, flush)."""
        ...

    @property
    def kv(self) -> KvNamespace:
        """The KV namespace (reads see every commit this process knows of)."""
        ...

    @property
    def view(self) -> QueueView:
        """The read methods over the state."""
        ...

    def next_job_id(self) -> str:
        """A new job id."""
        ...

    def job_record(self, id: str) -> JobRecord | None:
        """Job ``id``'s record, or None."""
        ...

    def dead_jobs(
        self, queue: str, after_id: str | None = None, limit: int = 100
    ) -> list[JobRecord]:
        """``queue``'s dead jobs in id order after ``after_id``."""
        ...

    def dead_letter_events(self, queue: str) -> int:
        """How many jobs of ``queue`` entered Dead since this process opened it."""
        ...

    async def enqueue_with(
        self, queue: str, payload: bytes, options: EnqueueOptions | None = None
    ) -> EnqueueResult:
        """Enqueue with per-job options."""
        ...

    async def enqueue_with_effects(
        self,
        queue: str,
        payload: bytes,
        options: EnqueueOptions | None = None,
        effects: SettlementEffects | None = None,
    ) -> EnqueueResult:
        """Enqueue and apply ``effects`` atomically."""
        ...

    async def cancel_with(
        self, id: str, effects: SettlementEffects
    ) -> tuple[CancelOutcome, list[EnqueueResult]]:
        """Cancel job ``id``; ``effects`` apply when it is removed."""
        ...

    async def wake_scheduled(
        self,
        id: str,
        wake_payload: bytes | None = None,
        *,
        kv_compare_deletes: Mapping[bytes, bytes] | None = None,
        kv_puts: Mapping[bytes, bytes] | None = None,
    ) -> WakeOutcome:
        """Make a scheduled job pending now (with it, delete the caller KV
        keys of ``kv_compare_deletes`` that still hold the values given,
        and write ``kv_puts``)."""
        ...

    async def commit_effects(self, effects: SettlementEffects) -> list[EnqueueResult]:
        """Apply ``effects`` in a transaction of their own."""
        ...

    async def kv_compare_commit(
        self, key: bytes, expected: bytes | None, effects: SettlementEffects
    ) -> list[EnqueueResult] | None:
        """Apply ``effects`` only if KV ``key`` holds ``expected``; else None."""
        ...
