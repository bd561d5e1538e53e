"""Stats, listings, history and the read-only reader (semantics 1.16-1.18, 1.23)."""

from __future__ import annotations

import pytest
from conftest import Factory
from queue_helpers import claim_one

from durable.errors import InvalidOption, InvalidQueueName, StoreNotInitialized
from durable.store.clock import MockClock
from durable.store.queue import (
    EnqueueOptions,
    JobStatus,
    Queue,
    QueueConfig,
    QueueReader,
    QueueStats,
)


async def keeping_done(open_queue: object, seconds: int) -> Queue:
    """A queue that keeps done jobs ``seconds`` seconds."""
    q: Queue = await open_queue(  # type: ignore[operator]
        default_queue_config=QueueConfig(keep_done_jobs=seconds)
    )
    return q


async def test_stats_track_every_state(open_queue: object, clock: MockClock) -> None:
    q = await keeping_done(open_queue, 60)
    assert q.stats("q") == QueueStats("q", 0, 0, 0, 0, 0)
    await q.enqueue_batch("q", [b""] * 4)
    await q.enqueue_with("q", b"", EnqueueOptions(run_at=clock.now_ms() + 1000))
    c1, c2, _c3 = await q.claim_batch("q", 3)
    await q.ack(c1)
    await q.dead_letter(c2, "x")
    assert q.stats("q") == QueueStats("q", pending=1, claimed=1, done=1, dead=1, scheduled=1)
    clock.advance(61)
    q.sweep_now()
    assert q.stats("q").done == 1  # cumulative
    assert q.stats("other") == QueueStats("other")


async def test_job_status_reads_the_key_space_and_matches_the_record(
    open_queue: object, clock: MockClock
) -> None:
    q = await keeping_done(open_queue, 60)
    ids = await q.enqueue_batch("q", [b""] * 4)
    later = (await q.enqueue_with("q", b"", EnqueueOptions(run_at=clock.now_ms() + 1000))).id
    c1, c2, c3 = await q.claim_batch("q", 3)
    await q.ack(c1)
    await q.dead_letter(c2, "x")
    expected = {
        c1.id: JobStatus.DONE,
        c2.id: JobStatus.DEAD,
        c3.id: JobStatus.CLAIMED,
        ids[3]: JobStatus.PENDING,
        later: JobStatus.SCHEDULED,
    }
    for id, status in expected.items():
        assert q.view.job_status(id) is status
        record = q.job_record(id)
        assert record is not None
        assert record.status is status
    assert q.view.job_status("unknown") is None
    clock.advance(61)
    q.sweep_now()  # the done job expires: gone from the index
    assert q.view.job_status(c1.id) is None


async def test_list_queues(queue: Queue) -> None:
    assert queue.list_queues() == []
    await queue.enqueue("b", b"")
    await queue.enqueue("a", b"")
    await queue.enqueue("a", b"")
    assert sorted(queue.list_queues()) == ["a", "b"]
    await queue.ack(await claim_one(queue, "b"))
    assert "b" in queue.list_queues()  # still listed once it had a job


async def test_get_job_unknown_is_none(queue: Queue) -> None:
    assert await queue.get_job("nope") is None
    assert queue.job_record("nope") is None
    with pytest.raises(InvalidOption):
        await queue.get_job(5)  # type: ignore[arg-type]


async def test_list_pending_in_claim_order_with_pages(queue: Queue) -> None:
    low = (await queue.enqueue_with("q", b"", EnqueueOptions(priority=5000))).id
    ids = await queue.enqueue_batch("q", [b"1", b"2", b"3"])
    await queue.enqueue("other", b"")
    page = queue.list_jobs("q", JobStatus.PENDING, limit=2)
    assert [r.id for r in page.jobs] == ids[:2]
    assert page.next_cursor is not None
    page2 = queue.list_jobs("q", JobStatus.PENDING, page.next_cursor, 2)
    assert [r.id for r in page2.jobs] == [ids[2], low]
    assert page2.next_cursor is None  # no row after the last one
    exact = queue.list_jobs("q", JobStatus.PENDING, limit=4)
    assert len(exact.jobs) == 4
    assert exact.next_cursor is None
    assert [r.id for r in queue.iter_jobs("q", JobStatus.PENDING, page_size=1)] == [*ids, low]


async def test_list_scheduled_by_run_at_filters_queue(queue: Queue, clock: MockClock) -> None:
    now = clock.now_ms()
    late = (await queue.enqueue_with("q", b"", EnqueueOptions(run_at=now + 3000))).id
    await queue.enqueue_with("other", b"", EnqueueOptions(run_at=now + 2000))
    early = (await queue.enqueue_with("q", b"", EnqueueOptions(run_at=now + 1000))).id
    page = queue.list_jobs("q", JobStatus.SCHEDULED, limit=1)
    assert [r.id for r in page.jobs] == [early]
    assert page.next_cursor is not None
    page2 = queue.list_jobs("q", JobStatus.SCHEDULED, page.next_cursor, 1)
    assert [r.id for r in page2.jobs] == [late]
    assert page2.next_cursor is None


async def test_list_claimed_dead_by_id_and_done_by_completion(
    open_queue: object, clock: MockClock
) -> None:
    q = await keeping_done(open_queue, 3600)
    ids = await q.enqueue_batch("q", [b""] * 6)
    claims = await q.claim_batch("q", 6)
    assert [r.id for r in q.list_jobs("q", JobStatus.CLAIMED).jobs] == ids
    await q.dead_letter(claims[3], "x")
    await q.dead_letter(claims[2], "x")
    assert [r.id for r in q.list_jobs("q", JobStatus.DEAD).jobs] == [ids[2], ids[3]]
    await q.ack(claims[5])
    clock.advance(1)
    await q.ack(claims[0])
    assert [r.id for r in q.list_jobs("q", JobStatus.DONE).jobs] == [ids[5], ids[0]]
    assert [r.id for r in q.list_jobs("q", JobStatus.CLAIMED).jobs] == [ids[1], ids[4]]


async def test_list_jobs_limit_zero_and_foreign_cursor(queue: Queue) -> None:
    await queue.enqueue_batch("q", [b"", b""])
    assert queue.list_jobs("q", JobStatus.PENDING, limit=0).jobs == []
    page = queue.list_jobs("other", JobStatus.PENDING, limit=1)
    assert page.jobs == []
    assert page.next_cursor is None
    cursor = queue.list_jobs("q", JobStatus.PENDING, limit=1).next_cursor
    assert cursor is not None
    foreign = queue.list_jobs("q", JobStatus.DEAD, cursor, 10)
    assert foreign.jobs == []
    assert foreign.next_cursor is None


async def test_listing_rows_are_stored_form(open_queue: object) -> None:
    q: Queue = await open_queue(payload_offload_threshold=4)  # type: ignore[operator]
    await q.enqueue("q", b"0123456789")
    (row,) = q.list_jobs("q", JobStatus.PENDING).jobs
    assert row.payload == b""
    assert row.payload_ref is not None


@pytest.mark.parametrize(
    ("call", "error"),
    [
        (lambda q: q.list_jobs("x" * 256, JobStatus.PENDING), InvalidQueueName),
        (lambda q: q.list_jobs("q", "Pending"), InvalidOption),
        (lambda q: q.list_jobs("q", JobStatus.PENDING, "cursor"), InvalidOption),
        (lambda q: q.list_jobs("q", JobStatus.PENDING, None, -1), InvalidOption),
        (lambda q: q.dead_jobs("q", None, -1), InvalidOption),
        (lambda q: list(q.iter_jobs("q", JobStatus.PENDING, 0)), InvalidOption),
        (lambda q: q.stats("x" * 256), InvalidQueueName),
        (lambda q: q.attempt_history(1), InvalidOption),
    ],
)
async def test_bad_read_arguments(queue: Queue, call: object, error: type[Exception]) -> None:
    with pytest.raises(error):
        call(queue)  # type: ignore[operator]


async def test_dead_jobs_with_exclusive_id_cursor(queue: Queue) -> None:
    ids = await queue.enqueue_batch("q", [b""] * 3)
    for c in await queue.claim_batch("q", 3):
        await queue.dead_letter(c, "x")
    assert [r.id for r in queue.dead_jobs("q")] == ids
    assert [r.id for r in queue.dead_jobs("q", after_id=ids[0], limit=1)] == [ids[1]]
    assert [r.id for r in queue.dead_jobs("q", after_id=ids[2])] == []
    assert queue.dead_jobs("q", limit=0) == []


async def test_history_is_empty_for_unknown_and_expunged_jobs(queue: Queue) -> None:
    assert queue.attempt_history("nope") == []


# --------------------------------------------------------------- reader


async def test_reader_sees_whole_commits_after_refresh(
    make_objects: Factory, open_queue: object
) -> None:
    with pytest.raises(StoreNotInitialized):
        await QueueReader.open(make_objects())
    q: Queue = await open_queue(payload_offload_threshold=4)  # type: ignore[operator]
    id = await q.enqueue("q", b"0123456789")
    reader = await QueueReader.open(make_objects())
    assert reader.stats("q").pending == 1
    got = await reader.get_job(id)
    assert got is not None
    assert got.payload == b"0123456789"
    claim = await claim_one(q)
    await q.dead_letter(claim, "bad")
    assert reader.stats("q").dead == 0  # lagging until refreshed
    await reader.refresh()
    assert reader.stats("q").dead == 1
    assert [r.id for r in reader.dead_jobs("q")] == [id]
    assert [e.error for e in reader.attempt_history(id)] == ["bad"]
    assert reader.list_queues() == ["q"]
    assert reader.last_store_activity().durable_seq == q.writer.seq


async def test_reader_never_fences_the_writer(make_objects: Factory, queue: Queue) -> None:
    await queue.enqueue("q", b"")
    reader = await QueueReader.open(make_objects())
    await reader.refresh()
    await queue.enqueue("q", b"")  # the writer still commits
    await reader.refresh()
    assert reader.stats("q").pending == 2
    assert reader.writer_heartbeat() is None
    assert reader.last_store_activity().writer_epoch is None
