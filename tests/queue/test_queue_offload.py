"""Payload offload (semantics 1.24): large payloads live in their own objects."""

from __future__ import annotations

import pytest
from conftest import Factory
from queue_helpers import blob_names, claim_one, snapshot

from durable.errors import DuplicateJobId, ObjectStoreError, PayloadMissing
from durable.store.clock import MockClock
from durable.store.objects import FaultyObjectStore
from durable.store.queue import (
    DEFAULT_PAYLOAD_OFFLOAD_THRESHOLD,
    EnqueueOptions,
    JobStatus,
    OpenOptions,
    Queue,
    QueueConfig,
)

T = 100  # a small threshold keeps the tests fast
BIG = b"B" * (T + 1)


async def opened(open_queue: object, **kw: object) -> Queue:
    kw.setdefault("payload_offload_threshold", T)
    return await open_queue(**kw)  # type: ignore[operator, no-any-return]


async def blobs(q: Queue) -> list[str]:
    await q.writer.flush()
    await q.writer.wait_idle()  # released objects are deleted after the commit
    return await blob_names(q.writer.objects)


async def test_over_threshold_is_offloaded_and_read_back(open_queue: object) -> None:
    q = await opened(open_queue)
    id = await q.enqueue("q", BIG)
    stored = q.job_record(id)
    assert stored is not None
    assert stored.payload == b""
    assert stored.payload_ref is not None
    assert stored.payload_ref != id
    assert id not in stored.payload_ref
    assert await blobs(q) == [stored.payload_ref]
    got = await q.get_job(id)
    assert got is not None
    assert got.payload == BIG
    claim = await claim_one(q)
    assert claim.payload == BIG


async def test_equal_to_threshold_stays_inline(open_queue: object) -> None:
    q = await opened(open_queue)
    id = await q.enqueue("q", b"x" * T)
    rec = q.job_record(id)
    assert rec is not None
    assert rec.payload == b"x" * T
    assert rec.payload_ref is None
    assert await blobs(q) == []


async def test_none_disables_offload(open_queue: object) -> None:
    q = await opened(open_queue, payload_offload_threshold=None)
    id = await q.enqueue("q", b"m" * (1 << 20))
    rec = q.job_record(id)
    assert rec is not None
    assert len(rec.payload) == 1 << 20
    assert rec.payload_ref is None
    assert await blobs(q) == []


async def test_default_threshold(open_queue: object) -> None:
    q: Queue = await open_queue()  # type: ignore[operator]
    inline = q.job_record(await q.enqueue("q", b"x" * DEFAULT_PAYLOAD_OFFLOAD_THRESHOLD))
    off = q.job_record(await q.enqueue("q", b"x" * (DEFAULT_PAYLOAD_OFFLOAD_THRESHOLD + 1)))
    assert inline is not None
    assert inline.payload_ref is None
    assert off is not None
    assert off.payload_ref is not None


async def test_batch_and_followups_offload(open_queue: object) -> None:
    q = await opened(open_queue)
    ids = await q.enqueue_batch("q", [BIG, b"small", BIG])
    refs = [r.payload_ref for r in (q.job_record(i) for i in ids) if r is not None]
    assert [ref is not None for ref in refs] == [True, False, True]
    assert len(await blobs(q)) == 2
    assert [c.payload for c in await q.claim_batch("q", 3)] == [BIG, b"small", BIG]


# ------------------------------------------------------- deleted on ...


async def test_deleted_on_ack_without_retention(open_queue: object) -> None:
    q = await opened(open_queue)
    await q.enqueue("q", BIG)
    await q.ack(await claim_one(q))
    assert await blobs(q) == []


async def test_kept_by_ack_with_retention_then_deleted_by_done_sweep(
    open_queue: object, clock: MockClock
) -> None:
    q = await opened(open_queue, default_queue_config=QueueConfig(keep_done_jobs=1))
    id = await q.enqueue("q", BIG)
    await q.ack(await claim_one(q))
    done = await q.get_job(id)
    assert done is not None
    assert done.payload == BIG
    assert len(await blobs(q)) == 1
    clock.advance(2)
    assert q.sweep_now().done == 1
    assert await blobs(q) == []


async def test_kept_through_nack_promotion_reaper_dead_letter_requeue_then_dead_sweep(
    open_queue: object, clock: MockClock
) -> None:
    q = await opened(open_queue, default_queue_config=QueueConfig(max_attempts=2))
    id = await q.enqueue("q", BIG)
    (ref,) = await blobs(q)
    await q.nack(await claim_one(q), "e")  # retry, scheduled
    clock.advance(1)
    q.promote_scheduled_now()
    await claim_one(q, lease=1)
    clock.advance(1)
    q.reap_now()  # out of attempts: reaper dead-letter
    rec = q.job_record(id)
    assert rec is not None
    assert rec.status is JobStatus.DEAD
    assert await blobs(q) == [ref]
    await q.requeue_dead_job(rec)
    claim = await claim_one(q)
    assert claim.payload == BIG
    await q.dead_letter(claim, "x")
    assert await blobs(q) == [ref]
    clock.advance(7 * 24 * 3600 + 1)
    assert q.sweep_now().dead == 1
    assert await blobs(q) == []


async def test_deleted_on_cancel_removed(open_queue: object) -> None:
    q = await opened(open_queue)
    id = await q.enqueue("q", BIG)
    await q.cancel(id)
    assert await blobs(q) == []


async def test_deleted_for_never_committed_records(open_queue: object) -> None:
    q = await opened(open_queue)
    await q.enqueue_with("q", b"", EnqueueOptions(dedup_key="d", id_override="taken"))
    assert (await q.enqueue_with("q", BIG, EnqueueOptions(dedup_key="d"))).is_new is False
    with pytest.raises(DuplicateJobId):
        await q.enqueue_with("q", BIG, EnqueueOptions(id_override="taken"))
    assert await blobs(q) == []


async def test_batch_object_write_failure_deletes_written_objects_and_fails(
    make_objects: Factory, clock: MockClock
) -> None:
    faulty = FaultyObjectStore(make_objects())
    q = await Queue.open(faulty, OpenOptions(clock=clock, payload_offload_threshold=T))
    try:
        before = snapshot(q)
        faulty.fail_next("create")
        with pytest.raises(ObjectStoreError):
            await q.enqueue_batch("q", [BIG, BIG, BIG])
        assert snapshot(q) == before
        assert await blob_names(faulty) == []
    finally:
        await q.close()


# ------------------------------------------------------------- missing


async def test_missing_object_of_a_live_job_is_payload_missing(open_queue: object) -> None:
    q = await opened(open_queue)
    id = await q.enqueue("q", BIG)
    rec = q.job_record(id)
    assert rec is not None
    assert rec.payload_ref is not None
    await q.writer.objects.delete([rec.payload_ref])
    with pytest.raises(PayloadMissing) as err:
        await q.get_job(id)
    assert err.value.id == id
    # claim errors but the claim stays committed (redelivered after its lease)
    with pytest.raises(PayloadMissing):
        await q.claim("q")
    assert q.stats("q").claimed == 1


async def test_get_job_racing_a_removal_is_none(
    open_queue: object, monkeypatch: pytest.MonkeyPatch
) -> None:
    q = await opened(open_queue)
    id = await q.enqueue("q", BIG)
    claim = await claim_one(q)
    real = q.view.blobs

    class Racing:
        async def get(self, name: str) -> bytes:
            await q.ack(claim)  # the record and its object go while we read
            await q.writer.wait_idle()
            return await real.get(name)

    monkeypatch.setattr(q.view, "blobs", Racing())
    assert await q.get_job(id) is None
