"""`Queue`: the facade of an open queue store.

It owns the writer and delegates every operation to a focused part:
`Producer` (enqueue), `Claimer` (claims, wakeups), `Settler` (ack, nack,
dead-letter, cancel, wake, dead requeue, effects), `Maintenance` (reaper,
scheduler, sweeps, open recovery), `Background` (their loops and the
heartbeat) and `QueueView` (reads).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

from durable.errors import StoreError
from durable.store.clock import Clock
from durable.store.kv import KvNamespace
from durable.store.log import BlobStore, LogWriter
from durable.store.objects.base import ObjectStore
from durable.store.objects.url import resolve_store
from durable.store.queue.background import Background
from durable.store.queue.claim import Claimer
from durable.store.queue.core import Core
from durable.store.queue.effects import EnqueueResult, SettlementEffects
from durable.store.queue.heartbeat import Heartbeat
from durable.store.queue.leases import Claim
from durable.store.queue.maintenance import Maintenance, SweepCounts
from durable.store.queue.options import EnqueueOptions, OpenOptions
from durable.store.queue.producer import Producer
from durable.store.queue.records import HistoryEntry, JobRecord, JobStatus
from durable.store.queue.settle import CancelOutcome, NackOutcome, Settler, WakeOutcome
from durable.store.queue.view import JobPage, QueueStats, QueueView
from durable.store.queue.waiters import Completion, Dead, Done, NotFound, TimedOut
from durable.store.queue.wakeups import wait_or_sleep

__all__ = ["Queue"]


class Queue:
    """A durable job queue on an object store: every queue of one process.

    Open with `Queue.open`, close with `Queue.close` (dropping it without
    closing is a crash: claimed jobs are requeued at the next open).
    Everything runs on one event loop; see `durable.store.queue.txn` for
    why transactions need no conflict retries.
    """

    def __init__(self, core: Core, epoch: int) -> None:
        self._core = core
        self._view = QueueView(core.writer, core.blobs)
        self._kv = KvNamespace(core.writer)
        self._producer = Producer(core)
        self._claimer = Claimer(core)
        self._settler = Settler(core)
        self._maintenance = Maintenance(core)
        self._background = Background(core, self._maintenance, epoch)
        self._closed = False
        self._owned_objects: ObjectStore | None = None

    # ------------------------------------------------------------ lifecycle

    @classmethod
    async def open(
        cls,
        store: ObjectStore | str | os.PathLike[str],
        options: OpenOptions | None = None,
        *,
        storage_options: Mapping[str, Any] | None = None,
    ) -> Queue:
        """Open ``store`` as its writer (fencing any other).

        ``store`` is an `ObjectStore` (the caller closes it) or a URL or
        path (see `durable.store.objects.url`; the queue closes it), with
        ``storage_options`` for the backend. Requeues claims interrupted by
        the previous writer's exit, then starts the reaper and scheduler
        (and heartbeat, if configured). With `OpenOptions.epoch`, an open
        at a lower epoch than the store's newest raises `StaleEpoch` and
        writes nothing.
        """
        options = options if options is not None else OpenOptions()
        objects, owned = await resolve_store(store, storage_options)
        try:
            writer = await LogWriter.open(
                objects, options.log_options, epoch=options.epoch, takeover=options.takeover
            )
            try:
                core = Core(writer, BlobStore(objects), options)
                queue = cls(core, epoch=writer.seq)
                queue._maintenance.recover_claims()
                await queue._background.start()
            except BaseException:
                await writer.close()
                raise
        except BaseException:
            if owned:
                await objects.close()
            raise
        queue._owned_objects = objects if owned else None
        return queue

    async def close(self) -> None:
        """Stop the background tasks, flush every commit and close the store. Idempotent."""
        if self._closed:
            return
        self._closed = True
        await self._background.stop()
        await self._core.writer.close()
        if self._owned_objects is not None:
            await self._owned_objects.close()
        self._core.leases.clear()

    async def __aenter__(self) -> Queue:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    @property
    def clock(self) -> Clock:
        """The clock every timestamp and timer of this queue reads."""
        return self._core.clock

    @property
    def options(self) -> OpenOptions:
        """The options the queue was opened with."""
        return self._core.options

    @property
    def writer(self) -> LogWriter:
        """The store's log writer (shared with layers that commit their own records)."""
        return self._core.writer

    @property
    def kv(self) -> KvNamespace:
        """The caller KV namespace of this store (reads see every commit)."""
        return self._kv

    @property
    def view(self) -> QueueView:
        """The read methods over the live state."""
        return self._view

    def next_job_id(self) -> str:
        """A new job id from the store's monotonic generator."""
        return self._core.ids.next()

    # -------------------------------------------------------------- enqueue

    async def enqueue(self, queue: str, payload: bytes) -> str:
        """Enqueue a job with the queue's defaults; its id."""
        return (await self._producer.enqueue_with_effects(queue, payload)).id

    async def enqueue_with(
        self, queue: str, payload: bytes, options: EnqueueOptions | None = None
    ) -> EnqueueResult:
        """Enqueue with per-job options; `AlreadyEnqueued` on a dedup hit."""
        return await self._producer.enqueue_with_effects(queue, payload, options)

    async def enqueue_with_effects(
        self,
        queue: str,
        payload: bytes,
        options: EnqueueOptions | None = None,
        effects: SettlementEffects | None = None,
    ) -> EnqueueResult:
        """Enqueue and apply ``effects`` atomically; a dedup hit applies nothing."""
        return await self._producer.enqueue_with_effects(queue, payload, options, effects)

    async def enqueue_batch(self, queue: str, payloads: Sequence[bytes]) -> list[str]:
        """Enqueue many jobs with the queue's defaults in one transaction."""
        return await self._producer.enqueue_batch(queue, payloads)

    # ---------------------------------------------------------------- claim

    async def claim(self, queue: str, lease: float | None = None) -> Claim | None:
        """Claim the next pending job for ``lease`` seconds (default: the queue's)."""
        return await self._claimer.claim(queue, lease)

    async def claim_batch(
        self,
        queue: str,
        n: int,
        lease: float | None = None,
        *,
        claimed: Callable[[int], None] | None = None,
    ) -> list[Claim]:
        """Claim up to ``n`` jobs in one transaction (``claimed(k)``: told
        how many as soon as that is decided, before any wait)."""
        return await self._claimer.claim_batch(queue, n, lease, claimed=claimed)

    async def claim_with_wait(
        self, queue: str, lease: float | None = None, max_wait: float = 0.0
    ) -> Claim | None:
        """Claim, waiting up to ``max_wait`` seconds for a job to arrive."""
        return await self._claimer.claim_with_wait(queue, lease, max_wait)

    async def wait_for_jobs_on(
        self, queue: str, max_wait: float, *, until: asyncio.Future[Any] | None = None
    ) -> bool:
        """Wait for a pending insert into ``queue``; False after ``max_wait``
        seconds, or once ``until`` (a future: a stop) is done."""
        return await self._claimer.wait_for_jobs_on(queue, max_wait, until=until)

    def renew_lease(self, claim: Claim, extension: float) -> int:
        """Set the claim's lease to end ``extension`` seconds from now; the new expiry."""
        return claim.lease.renew(extension)

    def lease_expiry(self, queue: str, id: str) -> int | None:
        """The job's in-memory lease expiry (epoch ms), or None."""
        return self._core.leases.expiry(queue, id)

    # --------------------------------------------------------------- settle

    async def ack(self, claim: Claim) -> None:
        """Complete the claimed job."""
        await self._settler.ack_with(claim)

    async def ack_with(self, claim: Claim, effects: SettlementEffects) -> list[EnqueueResult]:
        """Complete the claimed job and apply ``effects`` atomically."""
        return await self._settler.ack_with(claim, effects)

    async def nack(
        self, claim: Claim, error: str, *, retry_after: float | None = None
    ) -> NackOutcome:
        """Fail this attempt: retry after backoff (``retry_after`` seconds
        instead, when given), or dead-letter when out of attempts."""
        return await self._settler.nack_with(claim, error, retry_after=retry_after)

    async def nack_with(
        self,
        claim: Claim,
        error: str,
        effects: SettlementEffects,
        *,
        retry_after: float | None = None,
    ) -> NackOutcome:
        """As `nack`; ``effects`` apply only if the job is dead-lettered."""
        return await self._settler.nack_with(claim, error, effects, retry_after=retry_after)

    async def dead_letter(self, claim: Claim, reason: str) -> None:
        """Move the claimed job to Dead now, whatever its attempts."""
        await self._settler.dead_letter_with(claim, reason)

    async def dead_letter_with(
        self, claim: Claim, reason: str, effects: SettlementEffects
    ) -> list[EnqueueResult]:
        """As `dead_letter`, applying ``effects`` atomically."""
        return await self._settler.dead_letter_with(claim, reason, effects)

    async def cancel(self, id: str) -> CancelOutcome:
        """Remove a pending/scheduled job, or ask a claimed one to stop."""
        return (await self._settler.cancel_with(id))[0]

    async def cancel_with(
        self, id: str, effects: SettlementEffects
    ) -> tuple[CancelOutcome, list[EnqueueResult]]:
        """As `cancel`; ``effects`` apply only when the job is removed."""
        return await self._settler.cancel_with(id, effects)

    async def wake_scheduled(
        self,
        id: str,
        wake_payload: bytes | None = None,
        *,
        kv_compare_deletes: Mapping[bytes, bytes] | None = None,
        kv_puts: Mapping[bytes, bytes] | None = None,
    ) -> WakeOutcome:
        """Make a scheduled job pending now, attaching ``wake_payload``; with
        it, delete each caller KV key of ``kv_compare_deletes`` that still
        holds the value given and write ``kv_puts`` (one transaction)."""
        return await self._settler.wake_scheduled(
            id, wake_payload, kv_compare_deletes=kv_compare_deletes, kv_puts=kv_puts
        )

    async def requeue_dead_job(
        self, record: JobRecord, effects: SettlementEffects | None = None
    ) -> None:
        """Make a Dead job pending again with zero attempts (with ``effects``,
        in one transaction)."""
        await self._settler.requeue_dead_job(record, effects)

    async def commit_effects(self, effects: SettlementEffects) -> list[EnqueueResult]:
        """Apply ``effects`` in a transaction of their own."""
        return await self._settler.commit_effects(effects)

    async def kv_compare_commit(
        self, key: bytes, expected: bytes | None, effects: SettlementEffects
    ) -> list[EnqueueResult] | None:
        """Apply ``effects`` only if caller KV ``key`` holds ``expected``; else None."""
        return await self._settler.kv_compare_commit(key, expected, effects)

    # ---------------------------------------------------------- maintenance

    def reap_now(self) -> int:
        """Expire leases now (the reaper's first step); how many jobs moved."""
        return self._maintenance.reap_expired()

    def promote_scheduled_now(self) -> int:
        """Promote due scheduled jobs now; how many moved."""
        return self._maintenance.promote_due()

    def sweep_now(self) -> SweepCounts:
        """Run the done and dead retention sweeps now."""
        return self._maintenance.sweep()

    # ----------------------------------------------------------- completion

    async def wait_for_completion(self, id: str, timeout: float | None) -> Completion:  # noqa: ASYNC109
        """Wait until job ``id`` is done, dead or cancelled (``timeout`` seconds; None: forever).

        Returns `Done`, `Dead`, `Cancelled`, `TimedOut` or `NotFound` (absent
        when the wait began). Records come with their payload inline.
        """
        core = self._core
        fut = core.waiters.register(id)
        try:
            rec = self._view.job_record(id)
            if not fut.done() and (rec is None or rec.status in (JobStatus.DONE, JobStatus.DEAD)):
                # What memory shows may not be durable yet: let it settle first.
                with contextlib.suppress(StoreError):
                    await core.writer.flush()
            if fut.done():
                outcome = fut.result()
            elif rec is None:
                return NotFound()
            elif rec.status is JobStatus.DONE:
                outcome = Done(rec)
            elif rec.status is JobStatus.DEAD:
                outcome = Dead(rec)
            elif await wait_or_sleep(core.clock, fut, timeout):
                outcome = fut.result()
            else:
                return TimedOut()
        finally:
            core.waiters.withdraw(id, fut)
        if (
            isinstance(outcome, Done | Dead)
            and outcome.record.payload_ref is not None
            and not outcome.record.payload
        ):
            payload = await self._view.load_payload(outcome.record)
            rec = outcome.record.replace(payload=payload)
            outcome = Done(rec) if isinstance(outcome, Done) else Dead(rec)
        return outcome

    # ---------------------------------------------------------------- reads

    def stats(self, queue: str) -> QueueStats:
        """Counters of ``queue``."""
        return self._view.stats(queue)

    def dead_letter_events(self, queue: str) -> int:
        """How many jobs of ``queue`` entered Dead since this queue was opened.

        In-process and monotonic: every commit that moves a job into Dead (the
        reaper, recovery at open, an exhausting nack, a dead-letter) raises
        it, and nothing lowers it, whereas ``stats(queue).dead`` goes down as
        the dead-retention sweep removes jobs. Compare two readings to learn
        whether jobs died in between. The count starts at the open (open's own
        recovery included), so a reader that must see every dead job also
        reads the dead jobs once, at its first look.
        """
        return self._core.wakeups.dead_letter_events(queue)

    def list_queues(self) -> list[str]:
        """Every queue that ever held a job."""
        return self._view.list_queues()

    async def get_job(self, id: str) -> JobRecord | None:
        """Job ``id`` with its payload inline, or None."""
        return await self._view.get_job(id)

    def job_record(self, id: str) -> JobRecord | None:
        """Job ``id`` in stored form, or None."""
        return self._view.job_record(id)

    def list_jobs(
        self, queue: str, status: JobStatus, cursor: bytes | None = None, limit: int = 100
    ) -> JobPage:
        """A page of ``queue``'s jobs in ``status`` (stored form)."""
        return self._view.list_jobs(queue, status, cursor, limit)

    def iter_jobs(self, queue: str, status: JobStatus, page_size: int = 100) -> Iterator[JobRecord]:
        """Every job of ``queue`` in ``status``, page by page."""
        return self._view.iter_jobs(queue, status, page_size)

    def dead_jobs(
        self, queue: str, after_id: str | None = None, limit: int = 100
    ) -> list[JobRecord]:
        """``queue``'s dead jobs in id order after ``after_id``."""
        return self._view.dead_jobs(queue, after_id, limit)

    def attempt_history(self, id: str) -> list[HistoryEntry]:
        """Job ``id``'s attempt history in write order."""
        return self._view.attempt_history(id)

    def writer_heartbeat(self) -> Heartbeat | None:
        """The last liveness beat written."""
        return self._view.writer_heartbeat()
