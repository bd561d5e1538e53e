"""Claims (semantics 1.4): order, batches, wakeups, waiting."""

from __future__ import annotations

import asyncio

import pytest
from queue_helpers import BG, claim_one, snapshot

from durable.errors import InvalidOption, InvalidQueueName
from durable.store.clock import MockClock
from durable.store.queue import (
    PRIORITY_HIGH,
    PRIORITY_LOW,
    PRIORITY_NORMAL,
    EnqueueOptions,
    JobStatus,
    Queue,
)


async def test_claim_marks_claimed_and_counts_attempt(queue: Queue, clock: MockClock) -> None:
    id = await queue.enqueue("q", b"p")
    clock.advance(2)
    claim = await claim_one(queue)
    assert claim.id == id
    assert claim.payload == b"p"
    rec = claim.record
    assert (rec.status, rec.attempts, rec.claimed_at) == (JobStatus.CLAIMED, 1, clock.now_ms())
    stored = queue.job_record(id)
    assert stored is not None
    assert stored.status is JobStatus.CLAIMED
    assert stored.attempts == 1
    st = queue.stats("q")
    assert (st.pending, st.claimed) == (0, 1)
    assert queue.lease_expiry("q", id) == clock.now_ms() + 30_000


async def test_claim_order_priority_then_fifo(queue: Queue) -> None:
    low = await queue.enqueue_with("q", b"low", EnqueueOptions(priority=PRIORITY_LOW))
    n1 = await queue.enqueue("q", b"n1")
    high = await queue.enqueue_with("q", b"high", EnqueueOptions(priority=PRIORITY_HIGH))
    n2 = await queue.enqueue_with("q", b"n2", EnqueueOptions(priority=PRIORITY_NORMAL))
    got = [(await claim_one(queue)).id for _ in range(4)]
    assert got == [high.id, n1, n2.id, low.id]
    assert await queue.claim("q") is None


async def test_claim_is_per_queue(queue: Queue) -> None:
    await queue.enqueue("a", b"")
    assert await queue.claim("b") is None
    assert await queue.claim("a") is not None


async def test_claim_batch_shares_lease_start_and_is_one_commit(
    queue: Queue, clock: MockClock
) -> None:
    ids = await queue.enqueue_batch("q", [b"1", b"2", b"3"])
    commits = queue.writer.stats.commits
    claims = await queue.claim_batch("q", 2, lease=10)
    assert queue.writer.stats.commits == commits + 1
    assert [c.id for c in claims] == ids[:2]
    assert {queue.lease_expiry("q", c.id) for c in claims} == {clock.now_ms() + 10_000}
    assert queue.stats("q").claimed == 2
    assert queue.stats("q").pending == 1
    rest = await queue.claim_batch("q", 5)
    assert [c.id for c in rest] == ids[2:]  # fewer when the queue runs out
    assert await queue.claim_batch("q", 5) == []


async def test_claim_batch_zero_returns_empty_without_writing(queue: Queue) -> None:
    await queue.enqueue("q", b"")
    before = snapshot(queue)
    assert await queue.claim_batch("q", 0) == []
    assert snapshot(queue) == before


async def test_claim_tokens_are_unique(queue: Queue) -> None:
    await queue.enqueue_batch("q", [b""] * 20)
    claims = await queue.claim_batch("q", 20)
    assert len({c.token for c in claims}) == 20


async def test_default_lease_is_the_queue_config(open_queue: object, clock: MockClock) -> None:
    from durable.store.queue import QueueConfig

    q: Queue = await open_queue(queue_configs={"q": QueueConfig(lease_duration=7)})  # type: ignore[operator]
    await q.enqueue("q", b"")
    c = await claim_one(q)
    assert q.lease_expiry("q", c.id) == clock.now_ms() + 7000


@pytest.mark.parametrize(
    ("call", "error"),
    [
        (lambda q: q.claim("x" * 300), InvalidQueueName),
        (lambda q: q.claim_batch("q", -1), InvalidOption),
        (lambda q: q.claim_batch("q", 1.5), InvalidOption),
        (lambda q: q.claim("q", lease=-1), InvalidOption),
        (lambda q: q.claim_with_wait("q", max_wait=-1), InvalidOption),
        (lambda q: q.wait_for_jobs_on("q", "soon"), InvalidOption),
        (lambda q: q.wait_for_jobs_on("q", 1, until="stop"), InvalidOption),
    ],
)
async def test_bad_claim_arguments(queue: Queue, call: object, error: type[Exception]) -> None:
    await queue.enqueue("q", b"")
    before = snapshot(queue)
    with pytest.raises(error):
        await call(queue)  # type: ignore[operator]
    assert snapshot(queue) == before


# ---------------------------------------------------------------- wakeups


async def test_wait_for_jobs_returns_on_insert(queue: Queue, clock: MockClock) -> None:
    waiter = asyncio.create_task(queue.wait_for_jobs_on("q", 60))
    await asyncio.sleep(0)
    await queue.enqueue("q", b"")
    assert await waiter is True


async def test_wait_for_jobs_sees_a_stored_wakeup(queue: Queue) -> None:
    await queue.enqueue("q", b"")  # nobody waits: the wakeup is stored
    assert await queue.wait_for_jobs_on("q", 0) is True
    assert await queue.wait_for_jobs_on("q", 0) is False  # consumed


async def test_wait_for_jobs_times_out_on_the_clock(queue: Queue, clock: MockClock) -> None:
    waiter = asyncio.create_task(queue.wait_for_jobs_on("q", 5))
    await clock.wait_for_sleepers(BG + 1)
    clock.advance(4.9)
    await asyncio.sleep(0)
    assert not waiter.done()
    clock.advance(0.1)
    assert await waiter is False


async def test_wait_for_jobs_ends_when_until_is_done_and_loses_no_wakeup(
    queue: Queue, clock: MockClock
) -> None:
    stop: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    waiter = asyncio.create_task(queue.wait_for_jobs_on("q", 60, until=stop))
    await clock.wait_for_sleepers(BG + 1)
    stop.set_result(None)
    assert await waiter is False
    assert clock.sleepers == BG  # its timeout withdrawn
    await queue.enqueue("q", b"")  # nobody waits now: stored for the next wait
    assert await queue.wait_for_jobs_on("q", 0, until=stop) is True


async def test_wakeup_is_per_queue(queue: Queue, clock: MockClock) -> None:
    waiter = asyncio.create_task(queue.wait_for_jobs_on("a", 5))
    await clock.wait_for_sleepers(BG + 1)
    await queue.enqueue("b", b"")
    assert not waiter.done()
    clock.advance(5)
    assert await waiter is False


@pytest.mark.parametrize(
    "insert",
    ["nack_to_pending", "wake", "promotion", "dead_requeue", "reaper_requeue", "batch"],
)
async def test_every_pending_insert_wakes_a_waiter(
    open_queue: object, clock: MockClock, insert: str
) -> None:
    from durable.store.queue import QueueConfig

    q: Queue = await open_queue(  # type: ignore[operator]
        default_queue_config=QueueConfig(retry_backoff_base=0, max_attempts=5)
    )
    if insert == "nack_to_pending":
        await q.enqueue("q", b"")
        claim = await claim_one(q)
    elif insert in ("wake", "promotion"):
        id = (await q.enqueue_with("q", b"", EnqueueOptions(run_at=clock.now_ms() + 1000))).id
    elif insert == "dead_requeue":
        await q.enqueue("q", b"")
        await q.dead_letter(await claim_one(q), "x")
    elif insert == "reaper_requeue":
        await q.enqueue("q", b"")
        await claim_one(q, lease=1)
    await q.wait_for_jobs_on("q", 0)  # drop any stored wakeup
    waiter = asyncio.create_task(q.wait_for_jobs_on("q", 60))
    await clock.wait_for_sleepers(BG + 1)
    if insert == "nack_to_pending":
        await q.nack(claim, "e")
    elif insert == "wake":
        await q.wake_scheduled(id)
    elif insert == "promotion":
        clock.advance(1)
        assert q.promote_scheduled_now() == 1
    elif insert == "dead_requeue":
        (dead,) = q.dead_jobs("q")
        await q.requeue_dead_job(dead)
    elif insert == "reaper_requeue":
        clock.advance(1)
        assert q.reap_now() == 1
    else:
        await q.enqueue_batch("q", [b"", b""])
    assert await waiter is True


async def test_batch_insert_wakes_several_waiters(queue: Queue, clock: MockClock) -> None:
    waiters = [asyncio.create_task(queue.wait_for_jobs_on("q", 60)) for _ in range(3)]
    await clock.wait_for_sleepers(BG + 3)
    await queue.enqueue_batch("q", [b"", b""])
    for _ in range(50):  # loop turns only: the mock clock stands still
        await asyncio.sleep(0)
    assert sum(w.done() for w in waiters) == 2
    clock.advance(60)
    assert sorted([await w for w in waiters]) == [False, True, True]


async def test_claim_with_wait_claims_at_once_when_pending(queue: Queue) -> None:
    id = await queue.enqueue("q", b"x")
    claim = await queue.claim_with_wait("q", max_wait=10)
    assert claim is not None
    assert claim.id == id


async def test_claim_with_wait_gets_a_job_enqueued_later(queue: Queue, clock: MockClock) -> None:
    task = asyncio.create_task(queue.claim_with_wait("q", max_wait=30))
    await clock.wait_for_sleepers(BG + 1)
    clock.advance(10)
    await asyncio.sleep(0)
    assert not task.done()
    id = await queue.enqueue("q", b"late")
    claim = await task
    assert claim is not None
    assert claim.id == id
    assert claim.payload == b"late"


async def test_claim_with_wait_returns_none_at_the_deadline(queue: Queue, clock: MockClock) -> None:
    task = asyncio.create_task(queue.claim_with_wait("q", max_wait=3))
    await clock.wait_for_sleepers(BG + 1)
    clock.advance(3)
    assert await task is None


async def test_claim_with_wait_keeps_waiting_after_a_stale_wakeup(
    queue: Queue, clock: MockClock
) -> None:
    task = asyncio.create_task(queue.claim_with_wait("q", max_wait=10))
    await clock.wait_for_sleepers(BG + 1)
    # a wakeup whose job another worker already took (stale permit)
    queue._core.wakeups.inserted("q")
    await asyncio.sleep(0)
    await clock.wait_for_sleepers(BG + 1)  # the waiter claimed nothing, went back to sleep
    assert not task.done()
    clock.advance(10)
    assert await task is None


async def test_claim_with_wait_zero_does_not_wait(queue: Queue) -> None:
    assert await queue.claim_with_wait("q", max_wait=0) is None


async def test_two_waiting_claimers_each_get_a_job(queue: Queue, clock: MockClock) -> None:
    tasks = [asyncio.create_task(queue.claim_with_wait("q", max_wait=60)) for _ in range(2)]
    await clock.wait_for_sleepers(BG + 2)
    await queue.enqueue_batch("q", [b"1", b"2"])
    claims = await asyncio.gather(*tasks)
    assert sorted(c.payload for c in claims if c is not None) == [b"1", b"2"]


async def test_a_cancelled_waiter_swallows_no_wakeup(queue: Queue, clock: MockClock) -> None:
    task = asyncio.create_task(queue.claim_with_wait("q", max_wait=60))
    await clock.wait_for_sleepers(BG + 1)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await queue.enqueue("q", b"")
    assert await queue.wait_for_jobs_on("q", 0) is True  # the wakeup was stored for us


async def test_a_job_is_not_handed_out_before_the_commit_that_created_it_is_durable() -> None:
    from durable.store.log import LogReader
    from durable.store.objects import FaultyObjectStore, MemoryObjectStore
    from durable.store.queue import OpenOptions, Queue, SettlementEffects
    from durable.store.queue import keys as queue_keys

    objects = FaultyObjectStore(MemoryObjectStore())
    q = await Queue.open(objects, OpenOptions(reaper_interval=3600, scheduler_interval=3600))
    try:
        await q.enqueue("q", b"a")
        first = await q.claim("q")
        assert first is not None
        await q.wait_for_jobs_on("q", 0.01)  # use up the wakeup stored by "a"
        objects.latency = 0.05  # the ack's flush stays in flight for a while
        follow_up = SettlementEffects().enqueue("q", b"b")
        ack = asyncio.create_task(q.ack_with(first, follow_up))
        assert await q.wait_for_jobs_on("q", 10.0)  # the ack is applied in memory
        assert not ack.done()  # ...and its flush is still in flight
        second = await q.claim("q")  # sees "b" in memory at once...
        assert second is not None
        assert second.payload == b"b"
        # ...but returns it only once the ack that created it is on the store.
        reader = await LogReader.open(objects.inner)
        assert reader.state.get(queue_keys.job_index_key(second.id)) is not None
        await ack
    finally:
        objects.latency = 0.0
        await q.close()
