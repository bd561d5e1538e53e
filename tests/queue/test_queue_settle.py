"""Ack, nack and backoff, dead-letter, cancel, wake, dead requeue (semantics 1.2, 1.6-1.11)."""

from __future__ import annotations

import pytest
from queue_helpers import claim_one, snapshot

from durable.errors import InvalidOption, InvalidState, JobNotFound
from durable.store.clock import MockClock
from durable.store.queue import (
    PRIORITY_HIGH,
    AttemptOutcome,
    CancelOutcome,
    DeadLettered,
    EnqueueOptions,
    JobStatus,
    Queue,
    QueueConfig,
    Retried,
    SettlementEffects,
    WakeOutcome,
)

KEEP = QueueConfig(keep_done_jobs=3600)


async def open_with(open_queue: object, **cfg: object) -> Queue:
    return await open_queue(default_queue_config=QueueConfig(**cfg))  # type: ignore[operator, arg-type, no-any-return]


# -------------------------------------------------------------------- ack


async def test_ack_without_retention_deletes_everything(queue: Queue) -> None:
    id = await queue.enqueue("q", b"")
    claim = await claim_one(queue)
    await queue.ack(claim)
    assert await queue.get_job(id) is None
    assert queue.attempt_history(id) == []
    st = queue.stats("q")
    assert (st.claimed, st.done, st.pending) == (0, 1, 0)
    assert queue.lease_expiry("q", id) is None


async def test_ack_without_retention_deletes_earlier_history(open_queue: object) -> None:
    q = await open_with(open_queue, retry_backoff_base=0)
    id = await q.enqueue("q", b"")
    await q.nack(await claim_one(q), "e")
    assert len(q.attempt_history(id)) == 1
    await q.ack(await claim_one(q))
    assert q.attempt_history(id) == []
    assert q.job_record(id) is None


async def test_ack_with_retention_keeps_done_record(open_queue: object, clock: MockClock) -> None:
    q = await open_with(open_queue, keep_done_jobs=60)
    id = await q.enqueue("q", b"payload")
    clock.advance(1)
    claim = await claim_one(q)
    clock.advance(2)
    await q.ack(claim)
    rec = await q.get_job(id)
    assert rec is not None
    assert (rec.status, rec.completed_at, rec.payload) == (
        JobStatus.DONE,
        clock.now_ms(),
        b"payload",
    )
    (entry,) = q.attempt_history(id)
    assert entry.outcome is AttemptOutcome.COMPLETED
    assert (entry.attempt, entry.claimed_at, entry.recorded_at) == (
        1,
        clock.now_ms() - 2000,
        clock.now_ms(),
    )
    assert entry.error is None
    assert q.stats("q").done == 1
    assert q.stats("q").claimed == 0


# ------------------------------------------------------------------- nack


async def test_nack_backoff_zero_goes_back_to_pending(open_queue: object) -> None:
    q = await open_with(open_queue, retry_backoff_base=0)
    id = (await q.enqueue_with("q", b"", EnqueueOptions(priority=PRIORITY_HIGH))).id
    claim = await claim_one(q)
    outcome = await q.nack(claim, "boom")
    assert outcome == Retried()
    rec = q.job_record(id)
    assert rec is not None
    assert (rec.status, rec.last_error, rec.claimed_at, rec.priority, rec.attempts) == (
        JobStatus.PENDING,
        "boom",
        None,
        PRIORITY_HIGH,
        1,
    )
    (entry,) = q.attempt_history(id)
    assert (entry.outcome, entry.error, entry.attempt) == (AttemptOutcome.RETRIED, "boom", 1)
    st = q.stats("q")
    assert (st.pending, st.claimed) == (1, 0)
    again = await claim_one(q)
    assert again.id == id
    assert again.record.attempts == 2


async def test_nack_backoff_doubles_then_caps(open_queue: object, clock: MockClock) -> None:
    q = await open_with(open_queue, max_attempts=10, retry_backoff_base=1, retry_backoff_max=5)
    id = await q.enqueue("q", b"")
    delays = []
    for _ in range(5):
        claim = await claim_one(q)
        now = clock.now_ms()
        assert await q.nack(claim, "e") == Retried()
        rec = q.job_record(id)
        assert rec is not None
        assert rec.status is JobStatus.SCHEDULED
        assert rec.run_at is not None
        assert rec.claimed_at is None
        delays.append(rec.run_at - now)
        assert q.stats("q").scheduled == 1
        clock.advance((rec.run_at - now) / 1000 - 0.001)
        assert q.promote_scheduled_now() == 0  # not yet due
        clock.advance(0.001)
        assert q.promote_scheduled_now() == 1
    assert delays == [1000, 2000, 4000, 5000, 5000]


async def test_nack_retry_after_replaces_the_backoff(open_queue: object, clock: MockClock) -> None:
    q = await open_with(open_queue, max_attempts=10, retry_backoff_base=1, retry_backoff_max=5)
    id = await q.enqueue("q", b"")
    delays = []
    for after in (0.25, 30, 0):
        claim = await claim_one(q)
        now = clock.now_ms()
        assert await q.nack(claim, "e", retry_after=after) == Retried()
        rec = q.job_record(id)
        assert rec is not None
        if after:
            assert rec.status is JobStatus.SCHEDULED
            assert rec.run_at is not None
            delays.append(rec.run_at - now)
            clock.advance(after)
            assert q.promote_scheduled_now() == 1
        else:
            assert rec.status is JobStatus.PENDING
    assert delays == [250, 30_000]  # not the queue's 1 s, 2 s
    claim = await claim_one(q)
    for bad in (-1, float("inf"), "5", True):
        with pytest.raises(InvalidOption, match="retry_after"):
            await q.nack(claim, "e", retry_after=bad)  # type: ignore[arg-type]
    assert q.job_record(id).status is JobStatus.CLAIMED  # type: ignore[union-attr]


async def test_nack_at_max_attempts_dead_letters(open_queue: object, clock: MockClock) -> None:
    q = await open_with(open_queue, max_attempts=2, retry_backoff_base=0)
    id = await q.enqueue("q", b"")
    assert await q.nack(await claim_one(q), "first") == Retried()
    claim = await claim_one(q)
    claimed_at = clock.now_ms()
    clock.advance(1)
    assert await q.nack(claim, "second") == DeadLettered([])
    rec = q.job_record(id)
    assert rec is not None
    assert (rec.status, rec.failed_at, rec.last_error, rec.attempts) == (
        JobStatus.DEAD,
        clock.now_ms(),
        "second",
        2,
    )
    assert rec.claimed_at == claimed_at  # left in place by nack exhaustion
    outcomes = [(e.outcome, e.error) for e in q.attempt_history(id)]
    assert outcomes == [
        (AttemptOutcome.RETRIED, "first"),
        (AttemptOutcome.DEAD_LETTERED, "second"),
    ]
    st = q.stats("q")
    assert (st.dead, st.claimed, st.pending) == (1, 0, 0)


async def test_max_attempts_zero_behaves_like_one(queue: Queue) -> None:
    await queue.enqueue_with("q", b"", EnqueueOptions(max_attempts=0))
    assert isinstance(await queue.nack(await claim_one(queue), "e"), DeadLettered)


# ------------------------------------------------------------ dead-letter


async def test_dead_letter_regardless_of_attempts(queue: Queue, clock: MockClock) -> None:
    id = (await queue.enqueue_with("q", b"keep", EnqueueOptions(max_attempts=10))).id
    claim = await claim_one(queue)
    clock.advance(1)
    await queue.dead_letter(claim, "poison")
    rec = await queue.get_job(id)
    assert rec is not None
    assert (rec.status, rec.attempts, rec.last_error, rec.failed_at, rec.claimed_at) == (
        JobStatus.DEAD,
        1,
        "poison",
        clock.now_ms(),
        None,
    )
    assert rec.payload == b"keep"
    (entry,) = queue.attempt_history(id)
    assert (entry.outcome, entry.error) == (AttemptOutcome.DEAD_LETTERED, "poison")
    st = queue.stats("q")
    assert (st.dead, st.claimed) == (1, 0)


@pytest.mark.parametrize("call", ["nack", "dead_letter"])
async def test_error_text_must_be_str(queue: Queue, call: str) -> None:
    await queue.enqueue("q", b"")
    claim = await claim_one(queue)
    before = snapshot(queue)
    with pytest.raises(InvalidOption):
        await getattr(queue, call)(claim, 42)
    assert snapshot(queue) == before


# ----------------------------------------------------------------- cancel


@pytest.mark.parametrize("scheduled", [False, True])
async def test_cancel_pending_or_scheduled_removes(
    queue: Queue, clock: MockClock, scheduled: bool
) -> None:
    opts = EnqueueOptions(dedup_key="d", run_at=clock.now_ms() + 5000 if scheduled else None)
    id = (await queue.enqueue_with("q", b"", opts)).id
    assert await queue.cancel(id) is CancelOutcome.REMOVED
    assert queue.job_record(id) is None
    assert queue.attempt_history(id) == []
    st = queue.stats("q")
    assert (st.pending, st.scheduled) == (0, 0)
    assert (await queue.enqueue_with("q", b"", EnqueueOptions(dedup_key="d"))).is_new
    assert await queue.cancel(id) is CancelOutcome.NOT_FOUND


async def test_cancel_retried_job_deletes_its_history(open_queue: object) -> None:
    q = await open_with(open_queue, retry_backoff_base=0)
    id = await q.enqueue("q", b"")
    await q.nack(await claim_one(q), "e")
    assert len(q.attempt_history(id)) == 1
    assert await q.cancel(id) is CancelOutcome.REMOVED
    assert q.attempt_history(id) == []


async def test_cancel_claimed_sets_flag_and_fires_token(queue: Queue) -> None:
    id = await queue.enqueue("q", b"")
    claim = await claim_one(queue)
    commits = queue.writer.stats.commits
    assert await queue.cancel(id) is CancelOutcome.REQUESTED
    assert queue.writer.stats.commits == commits + 1
    assert claim.cancel_token.is_cancelled()
    rec = queue.job_record(id)
    assert rec is not None
    assert rec.status is JobStatus.CLAIMED
    assert rec.cancel_requested
    # already flagged: no write, still Requested
    assert await queue.cancel(id) is CancelOutcome.REQUESTED
    assert queue.writer.stats.commits == commits + 1
    assert queue.stats("q").claimed == 1


async def test_cancel_flag_survives_nack_and_prefires_next_claim(open_queue: object) -> None:
    q = await open_with(open_queue, retry_backoff_base=0)
    id = await q.enqueue("q", b"")
    claim = await claim_one(q)
    await q.cancel(id)
    await q.nack(claim, "stopped")
    rec = q.job_record(id)
    assert rec is not None
    assert rec.cancel_requested
    assert rec.status is JobStatus.PENDING
    again = await claim_one(q)
    assert again.cancel_token.is_cancelled()
    assert again.record.cancel_requested


async def test_cancel_flag_survives_reaper_requeue_and_dead_letter(
    queue: Queue, clock: MockClock
) -> None:
    id = await queue.enqueue("q", b"")
    claim = await claim_one(queue, lease=1)
    await queue.cancel(id)
    clock.advance(1)
    queue.reap_now()
    rec = queue.job_record(id)
    assert rec is not None
    assert rec.status is JobStatus.PENDING
    assert rec.cancel_requested
    claim = await claim_one(queue)
    await queue.dead_letter(claim, "x")
    rec = queue.job_record(id)
    assert rec is not None
    assert rec.status is JobStatus.DEAD
    assert rec.cancel_requested


async def test_cancel_after_reap_fires_the_stale_token(queue: Queue, clock: MockClock) -> None:
    id = await queue.enqueue("q", b"")
    claim = await claim_one(queue, lease=1)
    clock.advance(1)
    queue.reap_now()
    assert await queue.cancel(id) is CancelOutcome.REMOVED
    assert claim.cancel_token.is_cancelled()


@pytest.mark.parametrize("final", ["done", "dead", "unknown"])
async def test_cancel_done_dead_or_unknown_is_not_found(open_queue: object, final: str) -> None:
    q: Queue = await open_queue(default_queue_config=KEEP)  # type: ignore[operator]
    id = await q.enqueue("q", b"")
    if final == "done":
        await q.ack(await claim_one(q))
    elif final == "dead":
        await q.dead_letter(await claim_one(q), "x")
    else:
        id = "unknown"
    before = snapshot(q)
    assert await q.cancel(id) is CancelOutcome.NOT_FOUND
    assert snapshot(q) == before


# ------------------------------------------------------------------- wake


async def test_wake_scheduled_promotes_now_with_payload(queue: Queue, clock: MockClock) -> None:
    id = (await queue.enqueue_with("q", b"", EnqueueOptions(run_at=clock.now_ms() + 60_000))).id
    clock.advance(1)
    assert await queue.wake_scheduled(id, b"wake!") is WakeOutcome.WOKEN
    rec = queue.job_record(id)
    assert rec is not None
    assert (rec.status, rec.run_at, rec.woken_at, rec.wake_payload) == (
        JobStatus.PENDING,
        None,
        clock.now_ms(),
        b"wake!",
    )
    st = queue.stats("q")
    assert (st.scheduled, st.pending) == (0, 1)
    claim = await claim_one(queue)
    assert claim.record.wake_payload == b"wake!"


async def test_wake_payload_persists_across_redelivery(
    open_queue: object, clock: MockClock
) -> None:
    q = await open_with(open_queue, retry_backoff_base=0)
    id = (await q.enqueue_with("q", b"", EnqueueOptions(run_at=clock.now_ms() + 9000))).id
    await q.wake_scheduled(id, b"w")
    woken_at = clock.now_ms()
    clock.advance(1)
    await q.nack(await claim_one(q), "e")
    again = await claim_one(q)
    assert again.id == id
    assert (again.record.wake_payload, again.record.woken_at) == (b"w", woken_at)


async def test_wake_without_payload(queue: Queue, clock: MockClock) -> None:
    id = (await queue.enqueue_with("q", b"", EnqueueOptions(run_at=clock.now_ms() + 9000))).id
    assert await queue.wake_scheduled(id) is WakeOutcome.WOKEN
    rec = queue.job_record(id)
    assert rec is not None
    assert rec.wake_payload is None
    assert rec.woken_at == clock.now_ms()


async def test_wake_a_retry_in_backoff(queue: Queue) -> None:
    id = await queue.enqueue("q", b"")
    await queue.nack(await claim_one(queue), "e")  # default backoff 1 s: scheduled
    assert await queue.wake_scheduled(id) is WakeOutcome.WOKEN
    assert (await claim_one(queue)).id == id


async def test_wake_compare_deletes_kv_keys_in_its_own_transaction(
    queue: Queue, clock: MockClock
) -> None:
    """Keys that hold the value given go with the wake; others stay; a job
    that is not woken deletes nothing."""
    await queue.commit_effects(
        SettlementEffects().kv_put(b"a", b"1").kv_put(b"b", b"2").kv_put(b"c", b"3")
    )
    id = (await queue.enqueue_with("q", b"", EnqueueOptions(run_at=clock.now_ms() + 9000))).id
    seq = queue.writer.seq
    gone = {b"a": b"1", b"b": b"other", b"missing": b"x"}
    assert await queue.wake_scheduled(id, kv_compare_deletes=gone) is WakeOutcome.WOKEN
    assert queue.writer.seq == seq + 1  # one commit
    assert (queue.kv.get(b"a"), queue.kv.get(b"b"), queue.kv.get(b"c")) == (None, b"2", b"3")
    gone = {b"c": b"3"}
    assert await queue.wake_scheduled(id, kv_compare_deletes=gone) is WakeOutcome.NOT_SCHEDULED
    assert queue.kv.get(b"c") == b"3"
    with pytest.raises(InvalidOption):
        await queue.wake_scheduled(id, kv_compare_deletes={b"c": "3"})  # type: ignore[dict-item]


async def test_wake_puts_kv_keys_only_when_it_wakes(queue: Queue, clock: MockClock) -> None:
    """``kv_puts`` are written in the wake's own transaction, and not at all
    when the job is not woken (how an inbox request's done record rides it)."""
    id = (await queue.enqueue_with("q", b"", EnqueueOptions(run_at=clock.now_ms() + 9000))).id
    seq = queue.writer.seq
    assert await queue.wake_scheduled(id, kv_puts={b"done": b"1"}) is WakeOutcome.WOKEN
    assert queue.writer.seq == seq + 1  # one commit
    assert queue.kv.get(b"done") == b"1"
    assert await queue.wake_scheduled(id, kv_puts={b"again": b"1"}) is WakeOutcome.NOT_SCHEDULED
    assert queue.kv.get(b"again") is None
    with pytest.raises(InvalidOption):
        await queue.wake_scheduled(id, kv_puts={b"c": "3"})  # type: ignore[dict-item]


async def test_wake_non_scheduled_or_unknown(queue: Queue) -> None:
    id = await queue.enqueue("q", b"")
    before = snapshot(queue)
    assert await queue.wake_scheduled(id) is WakeOutcome.NOT_SCHEDULED
    assert await queue.wake_scheduled("nope") is WakeOutcome.NOT_FOUND
    assert snapshot(queue) == before
    with pytest.raises(InvalidOption):
        await queue.wake_scheduled(id, "text")  # type: ignore[arg-type]


# ----------------------------------------------------------- dead requeue


async def test_requeue_dead_job_resets_and_keeps_history(queue: Queue, clock: MockClock) -> None:
    id = await queue.enqueue("q", b"")
    enqueued_at = clock.now_ms()
    claim = await claim_one(queue)
    await queue.cancel(id)
    clock.advance(5)
    await queue.dead_letter(claim, "bad")
    (dead,) = queue.dead_jobs("q")
    await queue.requeue_dead_job(dead)
    rec = queue.job_record(id)
    assert rec is not None
    assert (rec.status, rec.attempts, rec.last_error, rec.failed_at, rec.claimed_at) == (
        JobStatus.PENDING,
        0,
        None,
        None,
        None,
    )
    assert rec.cancel_requested is False
    assert rec.enqueued_at == enqueued_at
    entries = queue.attempt_history(id)
    assert [e.outcome for e in entries] == [AttemptOutcome.DEAD_LETTERED, AttemptOutcome.REQUEUED]
    assert (entries[1].attempt, entries[1].claimed_at) == (0, None)
    st = queue.stats("q")
    assert (st.dead, st.pending) == (0, 1)
    again = await claim_one(queue)
    assert again.record.attempts == 1
    assert not again.cancel_token.is_cancelled()


async def test_requeue_needs_a_dead_record(queue: Queue) -> None:
    id = await queue.enqueue("q", b"")
    rec = queue.job_record(id)
    assert rec is not None
    before = snapshot(queue)
    with pytest.raises(InvalidState) as err:
        await queue.requeue_dead_job(rec)
    assert err.value.state == "Pending"
    assert snapshot(queue) == before


async def test_requeue_of_a_swept_or_requeued_dead_job_is_not_found(queue: Queue) -> None:
    await queue.enqueue("q", b"")
    await queue.dead_letter(await claim_one(queue), "x")
    (dead,) = queue.dead_jobs("q")
    await queue.requeue_dead_job(dead)
    before = snapshot(queue)
    with pytest.raises(JobNotFound):
        await queue.requeue_dead_job(dead)  # its dead key is gone
    assert snapshot(queue) == before
