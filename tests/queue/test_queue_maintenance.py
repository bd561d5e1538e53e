"""Reaper, scheduler, retention sweeps and their background loops (semantics 1.12, 1.13)."""

from __future__ import annotations

import asyncio

from queue_helpers import BG, claim_one, process_dies

from durable.store.clock import MockClock
from durable.store.queue import (
    LEASE_EXPIRED_ERROR,
    AttemptOutcome,
    EnqueueOptions,
    JobStatus,
    Queue,
    QueueConfig,
    SweepCounts,
)

DAY = 24 * 3600.0


async def test_reaper_requeues_an_expired_lease(queue: Queue, clock: MockClock) -> None:
    id = await queue.enqueue("q", b"")
    claim = await claim_one(queue, lease=10)
    clock.advance(9.999)
    assert queue.reap_now() == 0
    clock.advance(0.001)
    assert queue.reap_now() == 1
    rec = queue.job_record(id)
    assert rec is not None
    assert (rec.status, rec.claimed_at, rec.last_error, rec.attempts) == (
        JobStatus.PENDING,
        None,
        None,
        1,
    )
    (entry,) = queue.attempt_history(id)
    assert (entry.outcome, entry.error, entry.claimed_at) == (
        AttemptOutcome.LEASE_EXPIRED,
        None,
        claim.record.claimed_at,
    )
    st = queue.stats("q")
    assert (st.pending, st.claimed) == (1, 0)
    assert queue.lease_expiry("q", id) is None


async def test_reaper_dead_letters_when_out_of_attempts(queue: Queue, clock: MockClock) -> None:
    id = (await queue.enqueue_with("q", b"", EnqueueOptions(max_attempts=1))).id
    claim = await claim_one(queue, lease=1)
    clock.advance(1)
    assert queue.reap_now() == 1
    rec = queue.job_record(id)
    assert rec is not None
    assert (rec.status, rec.last_error, rec.failed_at) == (
        JobStatus.DEAD,
        LEASE_EXPIRED_ERROR,
        clock.now_ms(),
    )
    assert rec.claimed_at == claim.record.claimed_at  # left in place
    (entry,) = queue.attempt_history(id)
    assert (entry.outcome, entry.error) == (AttemptOutcome.DEAD_LETTERED, "lease expired")
    st = queue.stats("q")
    assert (st.dead, st.claimed) == (1, 0)


async def test_reaper_handles_many_soonest_first(queue: Queue, clock: MockClock) -> None:
    await queue.enqueue_batch("q", [b""] * 3)
    claims = [await claim_one(queue, lease=lease) for lease in (3, 1, 2)]
    keep = await queue.enqueue("q", b"")  # noqa: F841 - one stays pending
    long = await claim_one(queue, lease=100)
    clock.advance(3)
    assert queue.reap_now() == 3
    assert queue.stats("q").claimed == 1
    assert queue.stats("q").pending == 3
    assert queue.lease_expiry("q", long.id) is not None
    assert all(queue.lease_expiry("q", c.id) is None for c in claims)


async def test_reaper_drops_a_lease_whose_record_vanished(queue: Queue, clock: MockClock) -> None:
    id = await queue.enqueue("q", b"")
    claim = await claim_one(queue, lease=1)
    await queue.ack(claim)
    # a stale registry entry (settled claim) is not reaped twice
    clock.advance(1)
    assert queue.reap_now() == 0
    assert queue.job_record(id) is None


async def test_reaper_skips_undecodable_record_and_retries_it(
    queue: Queue, clock: MockClock
) -> None:
    from durable.store.log import WriteBatch
    from durable.store.queue import keys

    bad = await queue.enqueue("q", b"")
    good = await queue.enqueue("q", b"")
    c1 = await claim_one(queue, lease=1)
    c2 = await claim_one(queue, lease=1)
    assert (c1.id, c2.id) == (bad, good)
    await queue.writer.commit(WriteBatch().put(keys.claimed_key("q", bad), b"\xc1garbage"))
    clock.advance(1)
    assert queue.reap_now() == 1  # the good one moved, the bad one stays marked
    good_rec = queue.job_record(good)
    assert good_rec is not None
    assert good_rec.status is JobStatus.PENDING
    assert queue.lease_expiry("q", bad) is not None
    # the marked entry refuses renewal and is retried by the next pass
    import pytest

    from durable.errors import ClaimLost

    with pytest.raises(ClaimLost):
        queue.renew_lease(c1, 10)
    assert queue.reap_now() == 0


# ---------------------------------------------------------------- scheduler


async def test_scheduler_promotes_due_jobs_in_run_at_order(queue: Queue, clock: MockClock) -> None:
    now = clock.now_ms()
    late = (await queue.enqueue_with("a", b"", EnqueueOptions(run_at=now + 3000))).id
    early = (await queue.enqueue_with("b", b"", EnqueueOptions(run_at=now + 1000))).id
    assert queue.promote_scheduled_now() == 0
    clock.advance(1)
    assert queue.promote_scheduled_now() == 1
    rec = queue.job_record(early)
    assert rec is not None
    assert rec.status is JobStatus.PENDING
    assert rec.run_at is None
    assert queue.stats("b").scheduled == 0
    assert queue.stats("b").pending == 1
    late_rec = queue.job_record(late)
    assert late_rec is not None
    assert late_rec.status is JobStatus.SCHEDULED
    clock.advance(2)
    assert queue.promote_scheduled_now() == 1
    assert queue.promote_scheduled_now() == 0


async def test_promotion_keeps_priority(queue: Queue, clock: MockClock) -> None:
    now = clock.now_ms()
    await queue.enqueue("q", b"normal")
    await queue.enqueue_with("q", b"high", EnqueueOptions(run_at=now + 1, priority=1))
    clock.advance(0.001)
    queue.promote_scheduled_now()
    assert (await claim_one(queue)).payload == b"high"


# --------------------------------------------------------------- sweeps


async def test_done_sweep_after_retention_strictly(open_queue: object, clock: MockClock) -> None:
    q: Queue = await open_queue(  # type: ignore[operator]
        default_queue_config=QueueConfig(keep_done_jobs=60)
    )
    id = await q.enqueue("q", b"")
    await q.ack(await claim_one(q))
    clock.advance(60)
    assert q.sweep_now() == SweepCounts(done=0, dead=0)  # not strictly older yet
    clock.advance(0.001)
    assert q.sweep_now() == SweepCounts(done=1, dead=0)
    assert q.job_record(id) is None
    assert q.attempt_history(id) == []
    assert q.stats("q").done == 1  # throughput is never decremented


async def test_done_sweep_uses_each_queues_retention(open_queue: object, clock: MockClock) -> None:
    q: Queue = await open_queue(  # type: ignore[operator]
        default_queue_config=QueueConfig(keep_done_jobs=10),
        queue_configs={"long": QueueConfig(keep_done_jobs=100)},
    )
    short = await q.enqueue("short", b"")
    long = await q.enqueue("long", b"")
    await q.ack(await claim_one(q, "short"))
    await q.ack(await claim_one(q, "long"))
    clock.advance(11)
    assert q.sweep_now().done == 1
    assert q.job_record(short) is None
    assert q.job_record(long) is not None
    clock.advance(90)
    assert q.sweep_now().done == 1


async def test_dead_sweep_after_retention(open_queue: object, clock: MockClock) -> None:
    q: Queue = await open_queue(  # type: ignore[operator]
        queue_configs={"forever": QueueConfig(dead_retention=None)}
    )
    gone = await q.enqueue("q", b"")
    kept = await q.enqueue("forever", b"")
    await q.dead_letter(await claim_one(q), "x")
    await q.dead_letter(await claim_one(q, "forever"), "x")
    clock.advance(7 * DAY)
    assert q.sweep_now().dead == 0
    clock.advance(0.001)
    assert q.sweep_now() == SweepCounts(done=0, dead=1)
    assert q.job_record(gone) is None
    assert q.attempt_history(gone) == []
    assert q.stats("q").dead == 0
    assert q.job_record(kept) is not None
    assert q.stats("forever").dead == 1


# ----------------------------------------------------------- background


async def test_background_loops_run_on_the_clock(open_queue: object, clock: MockClock) -> None:
    q: Queue = await open_queue(  # type: ignore[operator]
        reaper_interval=5,
        scheduler_interval=1,
        default_queue_config=QueueConfig(keep_done_jobs=1),
    )
    now = clock.now_ms()
    sched = (await q.enqueue_with("q", b"", EnqueueOptions(run_at=now + 1000))).id
    await q.enqueue("q", b"")
    claim = await claim_one(q, lease=2)
    await clock.wait_for_sleepers(BG)
    clock.advance(1)
    for _ in range(5):
        await asyncio.sleep(0)
    await clock.wait_for_sleepers(BG)  # the scheduler ran and sleeps again
    rec = q.job_record(sched)
    assert rec is not None
    assert rec.status is JobStatus.PENDING
    lease_rec = q.job_record(claim.id)
    assert lease_rec is not None
    assert lease_rec.status is JobStatus.CLAIMED
    for _ in range(4):
        clock.advance(1)
        await asyncio.sleep(0)
        await clock.wait_for_sleepers(BG)
    lease_rec = q.job_record(claim.id)
    assert lease_rec is not None
    assert lease_rec.status is JobStatus.PENDING


async def test_background_sweeps_done_jobs(open_queue: object, clock: MockClock) -> None:
    q: Queue = await open_queue(  # type: ignore[operator]
        reaper_interval=5, default_queue_config=QueueConfig(keep_done_jobs=1)
    )
    id = await q.enqueue("q", b"")
    await q.ack(await claim_one(q))
    await clock.wait_for_sleepers(BG)
    clock.advance(5)
    for _ in range(5):
        await asyncio.sleep(0)
    await clock.wait_for_sleepers(BG)
    assert q.job_record(id) is None


# ------------------------------------------------------ dead-letter events


async def test_every_path_into_dead_counts_a_dead_letter_event_and_sweeps_do_not(
    open_queue: object, clock: MockClock
) -> None:
    """`dead_letter_events` grows with each job that enters Dead (a
    dead-letter, an exhausting nack, the reaper, recovery at open) and never
    shrinks: a dead letter and a dead-retention sweep in one tick leave the
    dead counter as it was, not the event count."""
    config = QueueConfig(max_attempts=1, dead_retention=60.0, lease_duration=30.0)
    q: Queue = await open_queue(default_queue_config=config)  # type: ignore[operator]
    assert q.dead_letter_events("q") == 0
    await q.enqueue("q", b"")
    await q.dead_letter(await claim_one(q), "first")
    assert (q.dead_letter_events("q"), q.stats("q").dead) == (1, 1)
    await q.enqueue("q", b"")
    await q.nack(await claim_one(q), "out of attempts")
    assert (q.dead_letter_events("q"), q.stats("q").dead) == (2, 2)
    assert q.dead_letter_events("other") == 0  # per queue
    await q.enqueue("q", b"")
    await claim_one(q)
    clock.advance(61)  # both dead jobs are past retention, the lease expired
    assert q.reap_now() == 1
    assert q.sweep_now().dead == 2
    assert (q.dead_letter_events("q"), q.stats("q").dead) == (3, 1)
    [dead] = q.dead_jobs("q")
    await q.requeue_dead_job(dead)  # leaving Dead is no event
    assert (q.dead_letter_events("q"), q.stats("q").dead) == (3, 0)
    await claim_one(q)
    await q.writer.flush()
    # A new process: open's recovery dead-letters the interrupted claim.
    process_dies(q)
    q2: Queue = await open_queue(default_queue_config=config)  # type: ignore[operator]
    assert (q2.dead_letter_events("q"), q2.stats("q").dead) == (1, 1)
