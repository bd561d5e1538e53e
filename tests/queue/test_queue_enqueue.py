"""Enqueue (semantics 1.3) and the (new) rows of the transitions table 1.2."""

from __future__ import annotations

import datetime as dt

import pytest
from queue_helpers import blob_names, claim_one, snapshot

from durable.errors import DuplicateJobId, InvalidOption, InvalidQueueName, StoreClosed
from durable.store.clock import MockClock
from durable.store.queue import (
    PRIORITY_HIGH,
    PRIORITY_LOW,
    AlreadyEnqueued,
    EnqueueOptions,
    JobStatus,
    New,
    Queue,
    QueueConfig,
)


async def test_enqueue_now_is_pending_and_counted(queue: Queue, clock: MockClock) -> None:
    id = await queue.enqueue("q", b"hello")
    rec = await queue.get_job(id)
    assert rec is not None
    assert (rec.status, rec.queue, rec.payload, rec.attempts) == (
        JobStatus.PENDING,
        "q",
        b"hello",
        0,
    )
    assert rec.enqueued_at == clock.now_ms()
    assert (rec.max_attempts, rec.priority) == (3, 1000)
    assert rec.run_at is None
    assert queue.stats("q").pending == 1


async def test_enqueue_with_future_run_at_is_scheduled(queue: Queue, clock: MockClock) -> None:
    at = clock.now_ms() + 10_000
    res = await queue.enqueue_with("q", b"x", EnqueueOptions(run_at=at))
    rec = queue.job_record(res.id)
    assert rec is not None
    assert rec.status is JobStatus.SCHEDULED
    assert rec.run_at == at
    assert queue.stats("q").scheduled == 1
    assert queue.stats("q").pending == 0
    assert await queue.claim("q") is None


@pytest.mark.parametrize("offset", [0, -1, -10_000])
async def test_run_at_now_or_past_is_pending(queue: Queue, clock: MockClock, offset: int) -> None:
    res = await queue.enqueue_with("q", b"x", EnqueueOptions(run_at=clock.now_ms() + offset))
    rec = queue.job_record(res.id)
    assert rec is not None
    assert rec.status is JobStatus.PENDING
    assert rec.run_at is None


async def test_run_at_accepts_aware_datetime(queue: Queue, clock: MockClock) -> None:
    when = dt.datetime.fromtimestamp(clock.now_ms() / 1000 + 60, tz=dt.UTC)
    res = await queue.enqueue_with("q", b"x", EnqueueOptions(run_at=when))
    rec = queue.job_record(res.id)
    assert rec is not None
    assert rec.status is JobStatus.SCHEDULED
    assert rec.run_at == clock.now_ms() + 60_000


async def test_per_job_max_attempts_priority_and_headers(queue: Queue) -> None:
    opts = EnqueueOptions(max_attempts=7, priority=PRIORITY_HIGH, headers={"k": "v"})
    rec = queue.job_record((await queue.enqueue_with("q", b"", opts)).id)
    assert rec is not None
    assert (rec.max_attempts, rec.priority, rec.headers) == (7, PRIORITY_HIGH, {"k": "v"})


async def test_queue_config_defaults_apply(open_queue: object) -> None:
    cfg = QueueConfig(max_attempts=5, default_priority=PRIORITY_LOW)
    q: Queue = await open_queue(queue_configs={"special": cfg})  # type: ignore[operator]
    special = q.job_record(await q.enqueue("special", b""))
    other = q.job_record(await q.enqueue("other", b""))
    assert special is not None
    assert other is not None
    assert (special.max_attempts, special.priority) == (5, PRIORITY_LOW)
    assert (other.max_attempts, other.priority) == (3, 1000)


async def test_dedup_hit_returns_existing_id_and_writes_nothing(queue: Queue) -> None:
    first = await queue.enqueue_with("q", b"1", EnqueueOptions(dedup_key="k"))
    assert isinstance(first, New)
    before = snapshot(queue)
    second = await queue.enqueue_with("q", b"2", EnqueueOptions(dedup_key="k"))
    assert second == AlreadyEnqueued(first.id)
    assert second.id == first.id
    assert not second.is_new
    assert snapshot(queue) == before
    assert queue.stats("q").pending == 1


async def test_dedup_scope_is_per_queue(queue: Queue) -> None:
    a = await queue.enqueue_with("a", b"", EnqueueOptions(dedup_key="k"))
    b = await queue.enqueue_with("b", b"", EnqueueOptions(dedup_key="k"))
    assert a.is_new
    assert b.is_new
    assert a.id != b.id


async def test_dedup_holds_while_scheduled(queue: Queue, clock: MockClock) -> None:
    opts = EnqueueOptions(dedup_key="k", run_at=clock.now_ms() + 5000)
    first = await queue.enqueue_with("q", b"", opts)
    again = await queue.enqueue_with("q", b"", EnqueueOptions(dedup_key="k"))
    assert again == AlreadyEnqueued(first.id)


async def test_dedup_key_released_at_claim(queue: Queue) -> None:
    first = await queue.enqueue_with("q", b"", EnqueueOptions(dedup_key="k"))
    claim = await claim_one(queue)
    assert claim.record.dedup_key is None
    stored = queue.job_record(first.id)
    assert stored is not None
    assert stored.dedup_key is None
    second = await queue.enqueue_with("q", b"", EnqueueOptions(dedup_key="k"))
    assert second.is_new
    assert second.id != first.id


async def test_nacked_job_returns_without_its_dedup_key(open_queue: object) -> None:
    # backoff 0: the nacked job re-enters Pending at once
    queue: Queue = await open_queue(  # type: ignore[operator]
        default_queue_config=QueueConfig(retry_backoff_base=0)
    )
    first = await queue.enqueue_with("q", b"", EnqueueOptions(dedup_key="k"))
    claim = await claim_one(queue)
    second = await queue.enqueue_with("q", b"", EnqueueOptions(dedup_key="k"))
    await queue.nack(claim, "boom")
    rec = queue.job_record(first.id)
    assert rec is not None
    assert rec.dedup_key is None
    assert rec.status is JobStatus.PENDING
    # the nacked job neither blocks nor releases the second job's key
    third = await queue.enqueue_with("q", b"", EnqueueOptions(dedup_key="k"))
    assert third == AlreadyEnqueued(second.id)


async def test_dedup_key_deleted_when_pending_job_cancelled(queue: Queue) -> None:
    first = await queue.enqueue_with("q", b"", EnqueueOptions(dedup_key="k"))
    await queue.cancel(first.id)
    again = await queue.enqueue_with("q", b"", EnqueueOptions(dedup_key="k"))
    assert again.is_new
    assert again.id != first.id


async def test_id_override_is_used(queue: Queue) -> None:
    res = await queue.enqueue_with("q", b"x", EnqueueOptions(id_override="my-job_1"))
    assert res == New("my-job_1")
    rec = await queue.get_job("my-job_1")
    assert rec is not None
    assert rec.payload == b"x"


@pytest.mark.parametrize("state", ["pending", "claimed", "scheduled", "dead", "done"])
async def test_duplicate_id_override_in_any_live_state(
    open_queue: object, clock: MockClock, state: str
) -> None:
    q: Queue = await open_queue(  # type: ignore[operator]
        default_queue_config=QueueConfig(keep_done_jobs=3600)
    )
    opts = EnqueueOptions(id_override="dup")
    if state == "scheduled":
        opts = EnqueueOptions(id_override="dup", run_at=clock.now_ms() + 1000)
    await q.enqueue_with("q", b"", opts)
    if state in ("claimed", "dead", "done"):
        claim = await claim_one(q)
        if state == "dead":
            await q.dead_letter(claim, "x")
        elif state == "done":
            await q.ack(claim)
    before = snapshot(q)
    with pytest.raises(DuplicateJobId) as err:
        await q.enqueue_with("other", b"", EnqueueOptions(id_override="dup"))
    assert err.value.id == "dup"
    assert snapshot(q) == before


async def test_id_can_be_reused_once_records_are_gone(queue: Queue) -> None:
    await queue.enqueue_with("q", b"1", EnqueueOptions(id_override="again"))
    await queue.ack(await claim_one(queue))
    assert queue.job_record("again") is None
    res = await queue.enqueue_with("q", b"2", EnqueueOptions(id_override="again"))
    assert res == New("again")


async def test_enqueue_batch_one_commit_ids_in_order(queue: Queue) -> None:
    commits = queue.writer.stats.commits
    ids = await queue.enqueue_batch("q", [b"a", b"b", b"c"])
    assert queue.writer.stats.commits == commits + 1
    assert ids == sorted(ids)
    assert len(set(ids)) == 3
    assert queue.stats("q").pending == 3
    got = [(await claim_one(queue)).payload for _ in range(3)]
    assert got == [b"a", b"b", b"c"]


async def test_enqueue_batch_empty_is_noop(queue: Queue) -> None:
    before = snapshot(queue)
    assert await queue.enqueue_batch("q", []) == []
    assert snapshot(queue) == before


async def test_ids_strictly_increase_with_frozen_clock(queue: Queue) -> None:
    ids = [await queue.enqueue("q", b"") for _ in range(5)]
    ids += await queue.enqueue_batch("q", [b""] * 5)
    ids.append(queue.next_job_id())
    assert ids == sorted(ids)
    assert len(set(ids)) == len(ids)
    assert len({i[:10] for i in ids}) == 1  # same millisecond prefix


async def test_empty_queue_name_is_accepted(queue: Queue) -> None:
    id = await queue.enqueue("", b"x")
    claim = await claim_one(queue, "")
    assert claim.id == id


@pytest.mark.parametrize(
    "call",
    [
        lambda q: q.enqueue("x" * 256, b""),
        lambda q: q.enqueue_with("x" * 256, b"", EnqueueOptions(dedup_key="d")),
        lambda q: q.enqueue_batch("x" * 256, [b""]),
    ],
)
async def test_bad_queue_name_writes_nothing(queue: Queue, call: object) -> None:
    before = snapshot(queue)
    with pytest.raises(InvalidQueueName) as err:
        await call(queue)  # type: ignore[operator]
    assert "256 bytes" in str(err.value)
    assert snapshot(queue) == before


@pytest.mark.parametrize(
    "call",
    [
        lambda q: q.enqueue("q", "text"),
        lambda q: q.enqueue_with("q", b"", {"priority": 1}),
        lambda q: q.enqueue_batch("q", b"abc"),
        lambda q: q.enqueue_batch("q", [b"ok", 5]),
    ],
)
async def test_bad_arguments_raise_invalid_option_and_write_nothing(
    queue: Queue, call: object
) -> None:
    before = snapshot(queue)
    with pytest.raises(InvalidOption):
        await call(queue)  # type: ignore[operator]
    assert snapshot(queue) == before
    assert await blob_names(queue.writer.objects) == []


async def test_enqueue_after_close_fails(queue: Queue) -> None:
    await queue.close()
    with pytest.raises(StoreClosed):
        await queue.enqueue("q", b"")
