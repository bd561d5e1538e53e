"""Open, crash recovery, close and restart (semantics 1.14, 1.15)."""

from __future__ import annotations

import asyncio

import pytest
from conftest import Factory
from queue_helpers import BG, claim_one, process_dies

from durable.errors import Fenced, StoreClosed
from durable.store.clock import MockClock
from durable.store.queue import (
    INTERRUPTED_ERROR,
    AttemptOutcome,
    EnqueueOptions,
    JobStatus,
    OpenOptions,
    Queue,
    QueueConfig,
)


async def test_state_survives_clean_close_and_reopen(open_queue: object, clock: MockClock) -> None:
    q: Queue = await open_queue()  # type: ignore[operator]
    a = await q.enqueue("q", b"a")
    b = (await q.enqueue_with("q", b"b", EnqueueOptions(run_at=clock.now_ms() + 5000))).id
    c = await q.enqueue("q", b"c")
    await q.dead_letter(await claim_one(q), "x")  # a is dead
    await q.close()
    q2: Queue = await open_queue()  # type: ignore[operator]
    assert [(r.id, r.status) for r in q2.dead_jobs("q")] == [(a, JobStatus.DEAD)]
    sched = q2.job_record(b)
    assert sched is not None
    assert sched.status is JobStatus.SCHEDULED
    st = q2.stats("q")
    assert (st.pending, st.scheduled, st.dead, st.claimed) == (1, 1, 1, 0)
    assert (await claim_one(q2)).id == c


async def test_claims_found_at_open_are_requeued(open_queue: object, clock: MockClock) -> None:
    q: Queue = await open_queue()  # type: ignore[operator]
    id = await q.enqueue("q", b"p")
    claim = await claim_one(q)
    await q.close()  # the claim is durable; its lease was only in memory
    clock.advance(1)
    q2: Queue = await open_queue()  # type: ignore[operator]
    rec = q2.job_record(id)
    assert rec is not None
    assert (rec.status, rec.attempts, rec.claimed_at) == (JobStatus.PENDING, 1, None)
    (entry,) = q2.attempt_history(id)
    assert (entry.outcome, entry.claimed_at, entry.error) == (
        AttemptOutcome.INTERRUPTED,
        claim.record.claimed_at,
        None,
    )
    st = q2.stats("q")
    assert (st.pending, st.claimed) == (1, 0)
    again = await claim_one(q2)
    assert again.id == id
    assert again.record.attempts == 2
    assert again.payload == b"p"


async def test_claims_out_of_attempts_at_open_are_dead(open_queue: object) -> None:
    q: Queue = await open_queue()  # type: ignore[operator]
    id = (await q.enqueue_with("q", b"", EnqueueOptions(max_attempts=1))).id
    await claim_one(q)
    await q.close()
    q2: Queue = await open_queue()  # type: ignore[operator]
    rec = q2.job_record(id)
    assert rec is not None
    assert (rec.status, rec.last_error) == (JobStatus.DEAD, INTERRUPTED_ERROR)
    assert rec.last_error == "claim interrupted by process exit"
    (entry,) = q2.attempt_history(id)
    assert entry.outcome is AttemptOutcome.DEAD_LETTERED
    assert q2.stats("q").dead == 1
    assert q2.stats("q").claimed == 0


async def test_crash_without_close_then_reopen_fences_and_recovers(
    open_queue: object, clock: MockClock
) -> None:
    q: Queue = await open_queue()  # type: ignore[operator]
    ids = await q.enqueue_batch("q", [b"1", b"2", b"3"])
    claims = await q.claim_batch("q", 2)
    await q.writer.flush()  # the claims reached the store; then the process "dies"
    process_dies(q)
    q2: Queue = await open_queue()  # type: ignore[operator]  # fences q
    recs = [q2.job_record(i) for i in ids]
    assert [r.status for r in recs if r] == [JobStatus.PENDING] * 3
    assert [r.attempts for r in recs if r] == [1, 1, 0]
    # the fenced process can no longer settle
    with pytest.raises((Fenced, StoreClosed)):
        await q.ack(claims[0])
    with pytest.raises((Fenced, StoreClosed)):
        await q.ack(claims[1])
    assert [(await claim_one(q2)).id for _ in range(3)] == ids


async def test_a_claim_lost_in_a_crash_leaves_the_job_pending(
    make_objects: Factory, clock: MockClock
) -> None:
    opts = OpenOptions(clock=clock, reaper_interval=3600, scheduler_interval=3600)
    q = await Queue.open(make_objects(), opts)
    id = await q.enqueue("q", b"")
    await q.claim("q")  # not awaited for durability: may be lost in a crash
    # crash before the claim's group is written: reopen from the objects as they were
    process_dies(q)
    q2 = await Queue.open(make_objects(), opts)
    try:
        rec = q2.job_record(id)
        assert rec is not None
        assert rec.status is JobStatus.PENDING
        assert rec.attempts in (0, 1)  # lost (0) or durable and requeued (1)
    finally:
        await q2.close()
        await q.close()


async def test_recovery_keeps_cancel_flag(open_queue: object) -> None:
    q: Queue = await open_queue()  # type: ignore[operator]
    id = await q.enqueue("q", b"")
    await claim_one(q)
    await q.cancel(id)
    await q.close()
    q2: Queue = await open_queue()  # type: ignore[operator]
    claim = await claim_one(q2)
    assert claim.cancel_token.is_cancelled()


async def test_dedup_and_ids_survive_restart(open_queue: object) -> None:
    q: Queue = await open_queue()  # type: ignore[operator]
    first = await q.enqueue_with("q", b"", EnqueueOptions(dedup_key="k", id_override="fixed"))
    await q.close()
    q2: Queue = await open_queue()  # type: ignore[operator]
    again = await q2.enqueue_with("q", b"", EnqueueOptions(dedup_key="k"))
    assert again.id == first.id == "fixed"
    assert not again.is_new
    new_id = await q2.enqueue("q", b"")
    assert new_id > "0"
    assert len(new_id) == 26


async def test_operations_after_close_fail_and_close_is_idempotent(open_queue: object) -> None:
    q: Queue = await open_queue()  # type: ignore[operator]
    await q.enqueue("q", b"")
    claim = await claim_one(q)
    await q.close()
    await q.close()
    with pytest.raises(StoreClosed):
        await q.claim("q")
    with pytest.raises(StoreClosed):
        await q.cancel(claim.id)
    assert q.stats("q").claimed == 1  # reads still work on the last state


async def test_close_stops_background_tasks(open_queue: object, clock: MockClock) -> None:
    q: Queue = await open_queue(reaper_interval=1, scheduler_interval=1)  # type: ignore[operator]
    await clock.wait_for_sleepers(BG)
    await q.close()
    await asyncio.sleep(0)
    assert clock.sleepers == 0


async def test_configured_queue_config_applies_at_recovery(open_queue: object) -> None:
    q: Queue = await open_queue()  # type: ignore[operator]
    id = await q.enqueue("q", b"")
    await claim_one(q)
    await q.close()
    # attempts come from the record (max_attempts 3 at enqueue), not the new config
    q2: Queue = await open_queue(  # type: ignore[operator]
        default_queue_config=QueueConfig(max_attempts=1)
    )
    rec = q2.job_record(id)
    assert rec is not None
    assert rec.status is JobStatus.PENDING


# ---------------------------------------------------------------- heartbeat


async def test_heartbeat_beats_and_closes(open_queue: object, clock: MockClock) -> None:
    q: Queue = await open_queue(liveness_heartbeat=10)  # type: ignore[operator]
    beat = q.writer_heartbeat()
    assert beat is not None
    assert (beat.counter, beat.interval_ms, beat.closed, beat.at_ms) == (
        1,
        10_000,
        False,
        clock.now_ms(),
    )
    epoch = beat.writer_epoch
    await clock.wait_for_sleepers(BG + 1)  # and the heartbeat
    clock.advance(10)
    for _ in range(5):
        await asyncio.sleep(0)
    await q.writer.flush()
    beat = q.writer_heartbeat()
    assert beat is not None
    assert beat.counter == 2
    await q.close()
    beat = q.writer_heartbeat()
    assert beat is not None
    assert (beat.counter, beat.closed) == (3, True)
    q2: Queue = await open_queue(liveness_heartbeat=10)  # type: ignore[operator]
    beat = q2.writer_heartbeat()
    assert beat is not None
    assert (beat.counter, beat.closed) == (4, False)
    assert beat.writer_epoch > epoch


async def test_no_heartbeat_by_default(queue: Queue) -> None:
    assert queue.writer_heartbeat() is None
