"""Settlements and other awaited transitions of existing jobs.

ack, nack, dead-letter (semantics 1.5-1.8) need the claim's lease: inside
the transaction the registry must still hold the claim's token and the
claimed record must still exist, else `ClaimLost` and nothing is applied.
The written record is based on the claimed record read in the transaction
(which carries a ``cancel_requested`` set during the delivery), not on the
claim's copy. cancel, wake and dead requeue (1.9-1.11) act by job id.

Each operation is one critical section (see `durable.store.queue.txn`),
committed durably before it returns.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from durable.errors import ClaimLost, InvalidOption, InvalidState, JobNotFound
from durable.store.keyspace import user_key
from durable.store.queue import keys
from durable.store.queue.apply import run_txn
from durable.store.queue.core import Core
from durable.store.queue.effects import EnqueueResult, SettlementEffects
from durable.store.queue.enqueue import prepare_effects, stage_effects
from durable.store.queue.leases import Claim
from durable.store.queue.options import backoff_ms, checked_ms
from durable.store.queue.records import (
    AttemptOutcome,
    HistoryEntry,
    JobRecord,
    JobStatus,
    decode_record,
    encode_record,
)
from durable.store.queue.transitions import (
    history,
    put_record,
    remove_job,
    to_dead,
    to_pending,
    to_scheduled,
)
from durable.store.queue.txn import Txn
from durable.store.queue.waiters import Cancelled, Dead, Done

__all__ = [
    "CancelOutcome",
    "DeadLettered",
    "NackOutcome",
    "Retried",
    "Settler",
    "WakeOutcome",
]


class NackOutcome:
    """What a nack did: `Retried` or `DeadLettered`."""

    __slots__ = ()


@dataclass(frozen=True, slots=True)
class Retried(NackOutcome):
    """The job went back to Pending or Scheduled; the effects were discarded."""


@dataclass(frozen=True, slots=True)
class DeadLettered(NackOutcome):
    """The job had no attempt left and is Dead; the effects were applied."""

    results: list[EnqueueResult]


class CancelOutcome(enum.Enum):
    """What `Queue.cancel` did."""

    #: The pending or scheduled job was deleted.
    REMOVED = "Removed"
    #: The job is claimed: its cancel flag is set and its token fired.
    REQUESTED = "Requested"
    #: No pending, scheduled or claimed job has this id.
    NOT_FOUND = "NotFound"


class WakeOutcome(enum.Enum):
    """What `Queue.wake_scheduled` did."""

    #: The scheduled job is now pending.
    WOKEN = "Woken"
    #: The job exists but is not scheduled.
    NOT_SCHEDULED = "NotScheduled"
    #: No job has this id.
    NOT_FOUND = "NotFound"


def _text(name: str, value: object) -> str:
    if not isinstance(value, str):
        raise InvalidOption(f"{name} must be a str, got {type(value).__name__}")
    return value


class Settler:
    """Awaited transitions of existing jobs, for one open queue."""

    def __init__(self, core: Core) -> None:
        self.core = core

    # ------------------------------------------------------------ helpers

    def _fence(self, txn: Txn, claim: Claim) -> JobRecord:
        """The claimed record, read in ``txn``, its key deleted; `ClaimLost` if not held."""
        if not isinstance(claim, Claim):
            raise InvalidOption(f"expected a Claim, got {type(claim).__name__}")
        if not self.core.leases.holds(claim.queue, claim.id, claim.token):
            raise ClaimLost(claim.id)
        ck = keys.claimed_key(claim.queue, claim.id)
        raw = txn.get(ck)
        if raw is None:
            raise ClaimLost(claim.id)
        stored = claim._stored
        rec = stored[1] if stored is not None and stored[0] == raw else decode_record(raw, repr(ck))
        txn.delete(ck)
        return rec

    def _release_claim(self, txn: Txn, claim: Claim, *, terminal: bool) -> None:
        leases = self.core.leases
        txn.after.append(lambda: leases.remove(claim.queue, claim.id, claim.token))
        if terminal:
            txn.after.append(lambda: leases.forget_job(claim.id))

    def _deliver(
        self, txn: Txn, id: str, build: type[Done] | type[Dead], rec: Callable[[], JobRecord]
    ) -> None:
        """Once durable, hand completion waiters (if any) the final record from ``rec``."""
        waiters = self.core.waiters
        txn.on_durable.append(lambda: waiters.deliver(id, lambda: build(rec())))

    # -------------------------------------------------------- settlements

    async def ack_with(
        self, claim: Claim, effects: SettlementEffects | None = None
    ) -> list[EnqueueResult]:
        """Complete the job; apply ``effects`` with it."""
        core = self.core
        fx = await prepare_effects(core, effects)

        def body(txn: Txn) -> tuple[list[EnqueueResult], list[EnqueueResult] | None]:
            rec = self._fence(txn, claim)
            now = core.now()

            def done() -> JobRecord:
                return rec.replace(status=JobStatus.DONE, completed_at=now)

            if core.config(rec.queue).keep_done_jobs is not None:
                history(txn, rec, now, AttemptOutcome.COMPLETED)
                put_record(txn, done())
            else:
                txn.delete(keys.job_index_key(rec.id))
                txn.delete(keys.history_key(rec.id))
                txn.release(rec.payload_ref)
            txn.move(rec.queue, JobStatus.CLAIMED, JobStatus.DONE)
            results = stage_effects(txn, fx)
            self._release_claim(txn, claim, terminal=True)
            self._deliver(txn, rec.id, Done, lambda: done().replace(payload=claim.payload))
            return results, results

        return await run_txn(core, fx, body)

    async def nack_with(
        self,
        claim: Claim,
        error: str,
        effects: SettlementEffects | None = None,
        *,
        retry_after: float | None = None,
    ) -> NackOutcome:
        """Fail this attempt: retry with backoff, or dead-letter when out of attempts.

        ``effects`` apply only on the dead-letter branch. ``retry_after``
        (seconds) replaces the queue's backoff for this retry.
        """
        core = self.core
        _text("error", error)
        after_ms = None if retry_after is None else checked_ms("retry_after", retry_after)
        fx = await prepare_effects(core, effects)

        def body(txn: Txn) -> tuple[NackOutcome, list[EnqueueResult] | None]:
            rec = self._fence(txn, claim)
            now = core.now()
            if rec.exhausted:
                dead = to_dead(txn, rec, JobStatus.CLAIMED, now, error, keep_claimed_at=True)
                results = stage_effects(txn, fx)
                self._release_claim(txn, claim, terminal=True)
                self._deliver(txn, rec.id, Dead, lambda: dead.replace(payload=claim.payload))
                return DeadLettered(results), results
            history(txn, rec, now, AttemptOutcome.RETRIED, error)
            cfg = core.config(rec.queue)
            delay = (
                backoff_ms(rec.attempts, cfg.retry_backoff_base, cfg.retry_backoff_max)
                if after_ms is None
                else after_ms
            )
            rec = rec.replace(last_error=error, claimed_at=None)
            if delay == 0:
                to_pending(txn, rec, JobStatus.CLAIMED)
            else:
                to_scheduled(txn, rec, JobStatus.CLAIMED, now + delay)
            self._release_claim(txn, claim, terminal=False)
            return Retried(), None

        return await run_txn(core, fx, body)

    async def dead_letter_with(
        self, claim: Claim, reason: str, effects: SettlementEffects | None = None
    ) -> list[EnqueueResult]:
        """Move the job straight to Dead (attempts unchanged); apply ``effects``."""
        core = self.core
        _text("reason", reason)
        fx = await prepare_effects(core, effects)

        def body(txn: Txn) -> tuple[list[EnqueueResult], list[EnqueueResult] | None]:
            rec = self._fence(txn, claim)
            now = core.now()
            dead = to_dead(txn, rec, JobStatus.CLAIMED, now, reason, keep_claimed_at=False)
            results = stage_effects(txn, fx)
            self._release_claim(txn, claim, terminal=True)
            self._deliver(txn, rec.id, Dead, lambda: dead.replace(payload=claim.payload))
            return results, results

        return await run_txn(core, fx, body)

    # ------------------------------------------------------ by job id

    async def cancel_with(
        self, id: str, effects: SettlementEffects | None = None
    ) -> tuple[CancelOutcome, list[EnqueueResult]]:
        """Cancel job ``id`` (semantics 1.9); ``effects`` apply only when Removed."""
        core = self.core
        _text("id", id)
        fx = await prepare_effects(core, effects)

        def body(
            txn: Txn,
        ) -> tuple[tuple[CancelOutcome, list[EnqueueResult]], list[EnqueueResult] | None]:
            pk = txn.get(keys.job_index_key(id))
            parsed = keys.parse_primary(pk) if pk is not None else None
            if pk is None or parsed is None:
                return (CancelOutcome.NOT_FOUND, []), None
            raw = txn.get(pk)
            if raw is None:
                return (CancelOutcome.NOT_FOUND, []), None
            status = parsed.status
            leases = core.leases
            if status in (JobStatus.PENDING, JobStatus.SCHEDULED):
                rec = decode_record(raw, repr(pk))
                remove_job(txn, rec, pk, status)
                results = stage_effects(txn, fx)

                def fire_stale() -> None:
                    token = leases.forget_job(id)
                    if token is not None:
                        token.fire()

                txn.after.append(fire_stale)
                waiters = core.waiters
                txn.on_durable.append(lambda: waiters.deliver(id, Cancelled))
                return (CancelOutcome.REMOVED, results), results
            if status is JobStatus.CLAIMED:
                rec = decode_record(raw, repr(pk))
                if not rec.cancel_requested:
                    txn.put(pk, encode_record(rec.replace(cancel_requested=True)))

                def fire() -> None:
                    token = leases.cancel_token_of(id)
                    if token is not None:
                        token.fire()

                txn.after.append(fire)
                return (CancelOutcome.REQUESTED, []), None
            return (CancelOutcome.NOT_FOUND, []), None

        return await run_txn(core, fx, body)

    async def wake_scheduled(
        self,
        id: str,
        wake_payload: bytes | None = None,
        *,
        kv_compare_deletes: Mapping[bytes, bytes] | None = None,
        kv_puts: Mapping[bytes, bytes] | None = None,
    ) -> WakeOutcome:
        """Promote scheduled job ``id`` to pending now, attaching ``wake_payload``.

        ``kv_compare_deletes``: caller KV keys deleted in the same
        transaction when the job is woken, each only if it still holds the
        value given (a signal's buffer and waiter index go with its wake).
        ``kv_puts``: caller KV keys written in that transaction (only when
        the job is woken).
        """
        core = self.core
        _text("id", id)
        if wake_payload is not None and not isinstance(wake_payload, bytes):
            raise InvalidOption(f"wake_payload must be bytes, got {type(wake_payload).__name__}")
        deletes = dict(kv_compare_deletes or {})
        for key, expected in deletes.items():
            if not isinstance(key, bytes) or not isinstance(expected, bytes):
                raise InvalidOption(f"kv_compare_deletes maps bytes to bytes, got {key!r}")
        puts = dict(kv_puts or {})
        for key, value in puts.items():
            if not isinstance(key, bytes) or not isinstance(value, bytes):
                raise InvalidOption(f"kv_puts maps bytes to bytes, got {key!r}")

        def body(txn: Txn) -> tuple[WakeOutcome, None]:
            pk = txn.get(keys.job_index_key(id))
            parsed = keys.parse_primary(pk) if pk is not None else None
            if pk is None or parsed is None:
                return WakeOutcome.NOT_FOUND, None
            raw = txn.get(pk)
            if raw is None:
                return WakeOutcome.NOT_FOUND, None
            if parsed.status is not JobStatus.SCHEDULED:
                return WakeOutcome.NOT_SCHEDULED, None
            rec = decode_record(raw, repr(pk))
            txn.delete(pk)
            rec = rec.replace(woken_at=core.now(), wake_payload=wake_payload)
            to_pending(txn, rec, JobStatus.SCHEDULED)
            for key, expected in deletes.items():
                if txn.get(user_key(key)) == expected:
                    txn.delete(user_key(key))
            for key, value in puts.items():
                txn.put(user_key(key), value)
            return WakeOutcome.WOKEN, None

        return await run_txn(core, None, body)

    async def requeue_dead_job(
        self, record: JobRecord, effects: SettlementEffects | None = None
    ) -> None:
        """Give a Dead job a fresh set of attempts (semantics 1.11); ``effects``
        commit in the same transaction."""
        core = self.core
        if not isinstance(record, JobRecord):
            raise InvalidOption(f"expected a JobRecord, got {type(record).__name__}")
        if record.status is not JobStatus.DEAD:
            raise InvalidState(record.id, record.status.value, JobStatus.DEAD.value)
        fx = None if effects is None else await prepare_effects(core, effects)

        def body(txn: Txn) -> tuple[None, list[EnqueueResult] | None]:
            dk = keys.dead_key(record.queue, record.id)
            raw = txn.get(dk)
            if raw is None:
                raise JobNotFound(record.id)
            rec = decode_record(raw, repr(dk))
            txn.delete(dk)
            now = core.now()
            txn.append_history(
                rec.id, HistoryEntry(attempt=0, recorded_at=now, outcome=AttemptOutcome.REQUEUED)
            )
            rec = rec.replace(
                attempts=0, last_error=None, claimed_at=None, failed_at=None, cancel_requested=False
            )
            to_pending(txn, rec, JobStatus.DEAD)
            return None, None if fx is None else stage_effects(txn, fx)

        await run_txn(core, fx, body)

    # ----------------------------------------------------- effects alone

    async def commit_effects(self, effects: SettlementEffects) -> list[EnqueueResult]:
        """Apply ``effects`` in a transaction of their own."""
        core = self.core
        fx = await prepare_effects(core, effects)

        def body(txn: Txn) -> tuple[list[EnqueueResult], list[EnqueueResult] | None]:
            results = stage_effects(txn, fx)
            return results, results

        return await run_txn(core, fx, body)

    async def kv_compare_commit(
        self, key: bytes, expected: bytes | None, effects: SettlementEffects
    ) -> list[EnqueueResult] | None:
        """Apply ``effects`` only if caller KV ``key`` holds ``expected`` (None: absent).

        Returns the results, or None (and writes nothing) on a mismatch.
        """
        core = self.core
        if not isinstance(key, bytes):
            raise InvalidOption(f"key must be bytes, got {type(key).__name__}")
        if expected is not None and not isinstance(expected, bytes):
            raise InvalidOption(f"expected must be bytes or None, got {type(expected).__name__}")
        fx = await prepare_effects(core, effects)

        def body(txn: Txn) -> tuple[list[EnqueueResult] | None, list[EnqueueResult] | None]:
            if txn.get(user_key(key)) != expected:
                return None, None
            results = stage_effects(txn, fx)
            return results, results

        return await run_txn(core, fx, body)
