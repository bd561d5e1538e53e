"""Completion notification (semantics 1.19, latest): per-job waiters."""

from __future__ import annotations

import asyncio

import pytest
from queue_helpers import BG, claim_one

from durable.store.clock import MockClock
from durable.store.queue import (
    Cancelled,
    Dead,
    Done,
    EnqueueOptions,
    JobStatus,
    NotFound,
    Queue,
    QueueConfig,
    TimedOut,
)


async def wait_task(q: Queue, id: str, limit: float | None = 60) -> asyncio.Task[object]:
    task: asyncio.Task[object] = asyncio.create_task(q.wait_for_completion(id, limit))
    for _ in range(3):
        await asyncio.sleep(0)
    return task


async def test_unknown_job_is_not_found(queue: Queue) -> None:
    assert await queue.wait_for_completion("nope", 10) == NotFound()


async def test_ack_without_retention_delivers_done_with_payload(queue: Queue) -> None:
    id = await queue.enqueue("q", b"payload")
    task = await wait_task(queue, id)
    await queue.ack(await claim_one(queue))
    out = await task
    assert isinstance(out, Done)
    assert out.record.id == id
    assert out.record.payload == b"payload"
    assert out.record.status is JobStatus.DONE
    assert await queue.wait_for_completion(id, 0) == NotFound()  # gone afterwards


async def test_kept_done_job_returns_at_once_even_with_zero_timeout(open_queue: object) -> None:
    q: Queue = await open_queue(  # type: ignore[operator]
        default_queue_config=QueueConfig(keep_done_jobs=60)
    )
    id = await q.enqueue("q", b"p")
    await q.ack(await claim_one(q))
    out = await q.wait_for_completion(id, 0)
    assert isinstance(out, Done)
    assert out.record.payload == b"p"


async def test_dead_job_returns_at_once(queue: Queue) -> None:
    id = await queue.enqueue("q", b"")
    await queue.dead_letter(await claim_one(queue), "x")
    out = await queue.wait_for_completion(id, 0)
    assert isinstance(out, Dead)
    assert out.record.last_error == "x"


@pytest.mark.parametrize("how", ["dead_letter", "exhausting_nack", "reaper"])
async def test_dead_transitions_deliver_dead(queue: Queue, clock: MockClock, how: str) -> None:
    id = (await queue.enqueue_with("q", b"p", EnqueueOptions(max_attempts=1))).id
    claim = await claim_one(queue, lease=1)
    task = await wait_task(queue, id)
    if how == "dead_letter":
        await queue.dead_letter(claim, "e")
    elif how == "exhausting_nack":
        await queue.nack(claim, "e")
    else:
        clock.advance(1)
        queue.reap_now()
    out = await task
    assert isinstance(out, Dead)
    assert out.record.id == id
    assert out.record.payload == b"p"


async def test_cancel_removed_delivers_cancelled(queue: Queue) -> None:
    id = await queue.enqueue("q", b"")
    task = await wait_task(queue, id)
    await queue.cancel(id)
    assert await task == Cancelled()


@pytest.mark.parametrize("event", ["nack_retry", "reaper_requeue", "promotion", "cancel_requested"])
async def test_non_terminal_transitions_do_not_deliver(
    open_queue: object, clock: MockClock, event: str
) -> None:
    q: Queue = await open_queue(  # type: ignore[operator]
        default_queue_config=QueueConfig(retry_backoff_base=0)
    )
    if event == "promotion":
        id = (await q.enqueue_with("q", b"", EnqueueOptions(run_at=clock.now_ms() + 1))).id
    else:
        id = await q.enqueue("q", b"")
        claim = await claim_one(q, lease=1)
    task = await wait_task(q, id, limit=30)
    if event == "nack_retry":
        await q.nack(claim, "e")
    elif event == "reaper_requeue":
        clock.advance(1)
        q.reap_now()
    elif event == "promotion":
        clock.advance(1)
        q.promote_scheduled_now()
    else:
        await q.cancel(id)
    for _ in range(5):
        await asyncio.sleep(0)
    assert not task.done()
    await clock.wait_for_sleepers(BG + 1)
    clock.advance(30)
    assert await task == TimedOut()


async def test_times_out_on_the_clock(queue: Queue, clock: MockClock) -> None:
    id = await queue.enqueue("q", b"")
    assert await queue.wait_for_completion(id, 0) == TimedOut()
    task = await wait_task(queue, id, limit=5)
    await clock.wait_for_sleepers(BG + 1)
    clock.advance(4.999)
    await asyncio.sleep(0)
    assert not task.done()
    clock.advance(0.001)
    assert await task == TimedOut()


async def test_several_waiters_all_wake(queue: Queue) -> None:
    id = await queue.enqueue("q", b"")
    tasks = [await wait_task(queue, id) for _ in range(3)]
    await queue.ack(await claim_one(queue))
    outs = await asyncio.gather(*tasks)
    assert all(isinstance(o, Done) for o in outs)


async def test_dropped_wait_is_withdrawn(queue: Queue) -> None:
    id = await queue.enqueue("q", b"")
    task = await wait_task(queue, id)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert not queue._core.waiters.waiting(id)
    await queue.ack(await claim_one(queue))  # delivering to nobody is fine


async def test_no_timeout_waits_until_done(queue: Queue) -> None:
    id = await queue.enqueue("q", b"")
    task = await wait_task(queue, id, limit=None)
    await queue.ack(await claim_one(queue))
    assert isinstance(await task, Done)


async def test_offloaded_payload_is_inline_in_outcomes(open_queue: object) -> None:
    q: Queue = await open_queue(payload_offload_threshold=4)  # type: ignore[operator]
    id = await q.enqueue("q", b"0123456789")
    task = await wait_task(q, id)
    await q.ack(await claim_one(q))
    out = await task
    assert isinstance(out, Done)
    assert out.record.payload == b"0123456789"
    id2 = (await q.enqueue_with("q", b"abcdefghij", EnqueueOptions(max_attempts=1))).id
    await q.dead_letter(await claim_one(q), "x")
    dead = await q.wait_for_completion(id2, 0)
    assert isinstance(dead, Dead)
    assert dead.record.payload == b"abcdefghij"
