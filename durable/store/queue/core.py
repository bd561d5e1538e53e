"""The parts every queue operation shares, gathered in one small object."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from durable._logging import get_logger
from durable.errors import BlobMissing, ObjectStoreError, PayloadMissing
from durable.store.clock import Clock
from durable.store.ids import IdGenerator
from durable.store.log import BlobStore, LogWriter, State
from durable.store.queue.leases import LeaseRegistry
from durable.store.queue.options import OpenOptions, QueueConfig
from durable.store.queue.records import JobRecord
from durable.store.queue.txn import Txn
from durable.store.queue.waiters import CompletionWaiters
from durable.store.queue.wakeups import Wakeups

__all__ = ["Core", "fetch_payloads"]

log = get_logger("durable.store.queue")


@dataclass(eq=False)
class Core:
    """The writer, blob store, options and in-memory registries of one open queue."""

    writer: LogWriter
    blobs: BlobStore
    options: OpenOptions
    ids: IdGenerator = field(init=False)
    leases: LeaseRegistry = field(init=False)
    waiters: CompletionWaiters = field(default_factory=CompletionWaiters)
    wakeups: Wakeups = field(default_factory=Wakeups)

    def __post_init__(self) -> None:
        self.ids = IdGenerator(self.clock)
        self.leases = LeaseRegistry(self.clock)
        self.writer.add_stop_callback(self.waiters.fail_all)

    @property
    def clock(self) -> Clock:
        """The clock of every timestamp and timer."""
        return self.options.clock

    @property
    def state(self) -> State:
        """The store's live state."""
        return self.writer.state

    def check_open(self) -> None:
        """Raise why the writer stopped (`StoreClosed`, `Fenced`), if it has."""
        failure = self.writer.failure
        if failure is not None:
            raise failure

    def txn(self) -> Txn:
        """A new transaction over the live state."""
        return Txn(self.writer.state, self.wakeups)

    def config(self, queue: str) -> QueueConfig:
        """The config of ``queue``."""
        return self.options.config_for(queue)

    def now(self) -> int:
        """The clock's time in epoch milliseconds."""
        return self.clock.now_ms()

    async def delete_blobs(self, names: list[str]) -> None:
        """Delete payload objects no committed record references (best effort)."""
        if not names:
            return
        try:
            await self.blobs.delete(names)
        except ObjectStoreError as e:  # an orphan, never a dangling reference
            log.warning("payload delete failed", names=names[:3], error=str(e))


async def fetch_payloads(blobs: BlobStore, records: list[JobRecord]) -> list[JobRecord]:
    """Records with offloaded payloads read back inline, concurrently.

    A missing object raises `PayloadMissing` naming the job.
    """

    async def one(rec: JobRecord) -> JobRecord:
        if rec.payload_ref is None:
            return rec
        try:
            data = await blobs.get(rec.payload_ref)
        except BlobMissing:
            raise PayloadMissing(rec.id) from None
        return rec.replace(payload=data)

    if all(r.payload_ref is None for r in records):
        return records
    return list(await asyncio.gather(*(one(r) for r in records)))
