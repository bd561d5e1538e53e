"""Claims: take pending jobs in priority-then-id order and lease them.

A claim is one synchronous critical section (scan, rewrite, commit), so
claims on a queue serialise without a lock: the per-queue claim mutex of
the reference is the event loop itself. The claim commit is not awaited
(semantics 1.4): a claim lost in a crash leaves its job pending, a durable
one is requeued at the next open.

Not ported: the persisted scan cursor and "known empty" marker. They skip
deleted-key tombstones in an LSM; the state here is an in-memory sorted map
without tombstones, where finding a queue's first pending key is already a
logarithmic seek.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from durable._logging import get_logger
from durable.errors import CorruptRecord, InvalidOption
from durable.store.queue import keys
from durable.store.queue.core import Core, fetch_payloads
from durable.store.queue.leases import CancelToken, Claim, LeaseHandle, new_claim_token
from durable.store.queue.options import to_ms, validate_queue_name
from durable.store.queue.records import JobRecord, JobStatus, decode_record, encode_record
from durable.store.queue.wakeups import wait_or_sleep

__all__ = ["Claimer"]

log = get_logger("durable.store.queue")


def _check_seconds(name: str, value: float | None) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int | float) or not value >= 0:
        raise InvalidOption(f"{name} must be a non-negative number of seconds, got {value!r}")


class Claimer:
    """Claims for one open queue."""

    def __init__(self, core: Core) -> None:
        self.core = core

    def _lease_ms(self, queue: str, lease: float | None) -> int:
        _check_seconds("lease", lease)
        return to_ms(lease if lease is not None else self.core.config(queue).lease_duration)

    def claim_now(self, queue: str, n: int, lease_ms: int) -> list[Claim]:
        """Claim up to ``n`` jobs in one transaction; payloads not yet fetched."""
        core = self.core
        now = core.now()
        items: list[tuple[bytes, JobRecord]] = []
        for key, value in core.state.scan_prefix(keys.pending_prefix(queue)):
            try:
                items.append((key, decode_record(value, repr(key))))
            except CorruptRecord as e:
                log.error("undecodable pending record skipped", queue=queue, error=str(e))
                continue
            if len(items) >= n:
                break
        if not items:
            return []
        txn = core.txn()
        claims: list[Claim] = []
        for key, rec in items:
            if rec.dedup_key is not None:
                dk = keys.dedup_key(queue, rec.dedup_key)
                if txn.get(dk) == rec.id.encode():
                    txn.delete(dk)
            rec = rec.replace(
                status=JobStatus.CLAIMED, claimed_at=now, attempts=rec.attempts + 1, dedup_key=None
            )
            ck = keys.claimed_key(queue, rec.id)
            raw = encode_record(rec)
            txn.delete(key)
            txn.put(ck, raw)
            txn.put(keys.job_index_key(rec.id), ck)
            token = new_claim_token()
            cancel = CancelToken()
            if rec.cancel_requested:
                cancel.fire()
            handle = LeaseHandle(core.leases, queue, rec.id, token, cancel)
            fresh = core.wakeups.take_made_here(rec.id) and rec.attempts == 1
            claims.append(Claim(rec, token, cancel, handle, (raw, rec), fresh))
        txn.count(queue, "pending", -len(claims))
        txn.count(queue, "claimed", len(claims))
        for c in claims:  # leases exist before the commit
            core.leases.insert(queue, c.id, now + lease_ms, c.token, c.cancel_token)
        try:
            # Not awaited, and no flush of its own: a lost claim leaves the job
            # pending (or requeued at the next open), so it rides the next flush.
            txn.commit(core.writer, lazy=True)
        except BaseException:
            for c in claims:
                core.leases.remove(queue, c.id, c.token)
            raise
        return claims

    async def claim_batch(
        self,
        queue: str,
        n: int,
        lease: float | None = None,
        *,
        claimed: Callable[[int], None] | None = None,
    ) -> list[Claim]:
        """Claim up to ``n`` jobs sharing one lease start; payloads inline.

        ``claimed(k)`` is called with the number claimed as soon as the
        claim is decided, before any wait (for the jobs' creation to be
        durable, for payloads): a caller that reserved ``n`` of a limit it
        shares gives the rest back at once."""
        validate_queue_name(queue)
        if isinstance(n, bool) or not isinstance(n, int) or n < 0:
            raise InvalidOption(f"n must be a non-negative int, got {n!r}")
        lease_ms = self._lease_ms(queue, lease)
        self.core.check_open()
        if n == 0:
            if claimed is not None:
                claimed(0)
            return []
        claims = self.claim_now(queue, n, lease_ms)
        if claimed is not None:
            claimed(len(claims))
        # A job is handed out only once the commit that made it pending is
        # durable (it may still be in flight: a follow-up enqueued by an ack
        # whose flush has not returned yet).
        wakeups = self.core.wakeups
        creations = {d for c in claims if (d := wakeups.creation(c.id)) is not None}
        for durable in creations:
            await durable
        # After the critical section: a failed fetch errors, the claims stay
        # committed and are redelivered when their leases expire.
        records = await fetch_payloads(self.core.blobs, [c.record for c in claims])
        for c, rec in zip(claims, records, strict=True):
            c.record = rec
        return claims

    async def claim(self, queue: str, lease: float | None = None) -> Claim | None:
        """Claim the next job, or None if the queue has none pending."""
        claims = await self.claim_batch(queue, 1, lease)
        return claims[0] if claims else None

    async def wait_for_jobs_on(
        self, queue: str, max_wait: float, *, until: asyncio.Future[Any] | None = None
    ) -> bool:
        """Wait for a pending insert into ``queue`` (or a stored one); False on
        timeout, or once ``until`` is done (a stop)."""
        validate_queue_name(queue)
        _check_seconds("max_wait", max_wait)
        if until is not None and not isinstance(until, asyncio.Future):
            raise InvalidOption(
                f"until must be an asyncio future (or task) that ends the wait, got {until!r}"
            )
        notify = self.core.wakeups.of(queue)
        fut = notify.subscribe()
        try:
            woke = await wait_or_sleep(self.core.clock, fut, max_wait, until=until)
        finally:
            if not fut.done():
                notify.unsubscribe(fut)
        return woke

    async def claim_with_wait(
        self, queue: str, lease: float | None = None, max_wait: float = 0.0
    ) -> Claim | None:
        """Claim, waiting up to ``max_wait`` seconds for a job; None at the deadline."""
        validate_queue_name(queue)
        _check_seconds("max_wait", max_wait)
        self._lease_ms(queue, lease)
        clock = self.core.clock
        deadline = clock.now_ms() + to_ms(max_wait)
        notify = self.core.wakeups.of(queue)
        while True:
            fut = notify.subscribe()
            try:
                claim = await self.claim(queue, lease)
                if claim is not None:
                    notify.unsubscribe(fut)  # a wakeup we took is passed on
                    return claim
                remaining = deadline - clock.now_ms()
                if remaining <= 0:
                    notify.unsubscribe(fut)
                    return None
                await wait_or_sleep(clock, fut, remaining / 1000)
            except BaseException:
                notify.unsubscribe(fut)
                raise
            if not fut.done():
                notify.unsubscribe(fut)
