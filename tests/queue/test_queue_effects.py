"""SettlementEffects (semantics 1.21): where effects apply, and how."""

from __future__ import annotations

import pytest
from queue_helpers import blob_names, claim_one, snapshot

from durable.errors import (
    ClaimLost,
    ConflictingKvEffect,
    DuplicateJobId,
    InvalidOption,
    KvValueTooLarge,
)
from durable.store.clock import MockClock
from durable.store.keyspace import MAX_KV_VALUE_SIZE, user_key
from durable.store.queue import (
    AlreadyEnqueued,
    CancelOutcome,
    DeadLettered,
    EnqueueOptions,
    EnqueueRequest,
    JobStatus,
    New,
    Queue,
    QueueConfig,
    Retried,
    SettlementEffects,
)


def kv(q: Queue, key: bytes) -> bytes | None:
    return q.writer.state.get(user_key(key))


def fx() -> SettlementEffects:
    return SettlementEffects().enqueue("next", b"follow-up").kv_put(b"k", b"v").kv_delete(b"old")


async def seed_old(q: Queue) -> None:
    await q.commit_effects(SettlementEffects().kv_put(b"old", b"1"))


def followups(q: Queue) -> int:
    return q.stats("next").pending + q.stats("next").scheduled


# ------------------------------------------------------- the table of 1.21


async def test_ack_with_applies_effects(queue: Queue) -> None:
    await seed_old(queue)
    await queue.enqueue("q", b"")
    results = await queue.ack_with(await claim_one(queue), fx())
    assert len(results) == 1
    assert isinstance(results[0], New)
    assert (kv(queue, b"k"), kv(queue, b"old")) == (b"v", None)
    follow = await claim_one(queue, "next")
    assert (follow.id, follow.payload) == (results[0].id, b"follow-up")


async def test_ack_with_on_a_lost_claim_applies_nothing(queue: Queue, clock: MockClock) -> None:
    await seed_old(queue)
    await queue.enqueue("q", b"")
    claim = await claim_one(queue, lease=1)
    clock.advance(1)
    queue.reap_now()
    before = snapshot(queue)
    with pytest.raises(ClaimLost):
        await queue.ack_with(claim, fx())
    assert snapshot(queue) == before


async def test_dead_letter_with_applies_effects(queue: Queue) -> None:
    await seed_old(queue)
    await queue.enqueue("q", b"")
    results = await queue.dead_letter_with(await claim_one(queue), "bad", fx())
    assert [r.is_new for r in results] == [True]
    assert (kv(queue, b"k"), kv(queue, b"old"), followups(queue)) == (b"v", None, 1)


async def test_dead_letter_with_on_a_lost_claim_applies_nothing(queue: Queue) -> None:
    await queue.enqueue("q", b"")
    claim = await claim_one(queue)
    await queue.ack(claim)
    before = snapshot(queue)
    with pytest.raises(ClaimLost):
        await queue.dead_letter_with(claim, "x", fx())
    assert snapshot(queue) == before


async def test_nack_with_retry_discards_effects(queue: Queue) -> None:
    await seed_old(queue)
    await queue.enqueue("q", b"")
    assert await queue.nack_with(await claim_one(queue), "e", fx()) == Retried()
    assert (kv(queue, b"k"), kv(queue, b"old"), followups(queue)) == (None, b"1", 0)


async def test_nack_with_exhausted_applies_effects(queue: Queue) -> None:
    await seed_old(queue)
    await queue.enqueue_with("q", b"", EnqueueOptions(max_attempts=1))
    outcome = await queue.nack_with(await claim_one(queue), "e", fx())
    assert isinstance(outcome, DeadLettered)
    assert [r.is_new for r in outcome.results] == [True]
    assert (kv(queue, b"k"), kv(queue, b"old"), followups(queue)) == (b"v", None, 1)


async def test_cancel_with_removed_applies_effects(queue: Queue) -> None:
    await seed_old(queue)
    id = await queue.enqueue("q", b"")
    outcome, results = await queue.cancel_with(id, fx())
    assert outcome is CancelOutcome.REMOVED
    assert [r.is_new for r in results] == [True]
    assert (kv(queue, b"k"), kv(queue, b"old"), followups(queue)) == (b"v", None, 1)


async def test_cancel_with_requested_or_not_found_discards(queue: Queue) -> None:
    await seed_old(queue)
    id = await queue.enqueue("q", b"")
    await claim_one(queue)
    assert await queue.cancel_with(id, fx()) == (CancelOutcome.REQUESTED, [])
    assert await queue.cancel_with("unknown", fx()) == (CancelOutcome.NOT_FOUND, [])
    assert (kv(queue, b"k"), kv(queue, b"old"), followups(queue)) == (None, b"1", 0)


async def test_enqueue_with_effects_new_applies(queue: Queue) -> None:
    await seed_old(queue)
    res = await queue.enqueue_with_effects("q", b"", EnqueueOptions(dedup_key="d"), fx())
    assert res.is_new
    assert (kv(queue, b"k"), kv(queue, b"old"), followups(queue)) == (b"v", None, 1)


async def test_enqueue_with_effects_dedup_hit_discards(queue: Queue) -> None:
    first = await queue.enqueue_with("q", b"", EnqueueOptions(dedup_key="d"))
    before = snapshot(queue)
    res = await queue.enqueue_with_effects("q", b"", EnqueueOptions(dedup_key="d"), fx())
    assert res == AlreadyEnqueued(first.id)
    assert snapshot(queue) == before


# ------------------------------------------------------------- mechanics


async def test_followup_with_future_run_at_lands_scheduled(queue: Queue, clock: MockClock) -> None:
    await queue.enqueue("q", b"")
    effects = SettlementEffects().enqueue("next", b"", EnqueueOptions(run_at=clock.now_ms() + 1000))
    (res,) = await queue.ack_with(await claim_one(queue), effects)
    rec = queue.job_record(res.id)
    assert rec is not None
    assert rec.status is JobStatus.SCHEDULED


async def test_followup_dedup_hit_downgrades_without_failing(queue: Queue) -> None:
    existing = await queue.enqueue_with("next", b"", EnqueueOptions(dedup_key="d"))
    await queue.enqueue("q", b"")
    effects = (
        SettlementEffects()
        .enqueue("next", b"a", EnqueueOptions(dedup_key="d"))
        .enqueue("next", b"b", EnqueueOptions(dedup_key="e"))
        .enqueue("next", b"c", EnqueueOptions(dedup_key="e"))  # hits the one just above
        .kv_put(b"k", b"v")
    )
    results = await queue.ack_with(await claim_one(queue), effects)
    assert results[0] == AlreadyEnqueued(existing.id)
    assert isinstance(results[1], New)
    assert results[2] == AlreadyEnqueued(results[1].id)
    assert kv(queue, b"k") == b"v"
    assert queue.stats("next").pending == 2
    assert queue.stats("q").done == 1


async def test_followup_duplicate_id_fails_the_whole_settlement(queue: Queue) -> None:
    await queue.enqueue_with("other", b"", EnqueueOptions(id_override="taken"))
    await queue.enqueue("q", b"")
    claim = await claim_one(queue)
    before = snapshot(queue)
    effects = (
        SettlementEffects()
        .kv_put(b"k", b"v")
        .enqueue("next", b"", EnqueueOptions(id_override="taken"))
    )
    with pytest.raises(DuplicateJobId):
        await queue.ack_with(claim, effects)
    assert snapshot(queue) == before
    await queue.ack(claim)  # the claim is still held


async def test_two_followups_with_one_id_fail(queue: Queue) -> None:
    before = snapshot(queue)
    effects = (
        SettlementEffects()
        .enqueue("next", b"", EnqueueOptions(id_override="same"))
        .enqueue("next", b"", EnqueueOptions(id_override="same"))
    )
    with pytest.raises(DuplicateJobId):
        await queue.commit_effects(effects)
    assert snapshot(queue) == before


async def test_commit_effects_alone(queue: Queue) -> None:
    results = await queue.commit_effects(SettlementEffects().enqueue("a", b"x").kv_put(b"k", b"v"))
    assert [r.is_new for r in results] == [True]
    assert kv(queue, b"k") == b"v"
    assert queue.stats("a").pending == 1


async def test_kv_compare_commit(queue: Queue) -> None:
    effects = SettlementEffects().kv_put(b"guard", b"2").enqueue("a", b"")
    assert await queue.kv_compare_commit(b"guard", b"1", effects) is None  # absent != b"1"
    assert queue.stats("a").pending == 0
    assert kv(queue, b"guard") is None
    results = await queue.kv_compare_commit(b"guard", None, effects)
    assert results is not None
    assert results[0].is_new
    assert kv(queue, b"guard") == b"2"
    assert await queue.kv_compare_commit(b"guard", None, effects) is None
    again = await queue.kv_compare_commit(b"guard", b"2", SettlementEffects().kv_delete(b"guard"))
    assert again == []
    assert kv(queue, b"guard") is None


async def test_caller_keys_cannot_collide_with_internal_keys(queue: Queue) -> None:
    from durable.store.queue import keys

    internal = keys.stats_key("q", "pending")
    await queue.commit_effects(SettlementEffects().kv_put(internal, b"\xff" * 8))
    assert queue.stats("q").pending == 0
    assert kv(queue, internal) == b"\xff" * 8


# ------------------------------------------------------------- validation


def test_key_both_put_and_deleted_is_rejected() -> None:
    with pytest.raises(ConflictingKvEffect) as err:
        SettlementEffects().kv_put(b"k", b"v").kv_delete(b"k")
    assert err.value.key == b"k"
    with pytest.raises(ConflictingKvEffect):
        SettlementEffects().kv_delete(b"k").kv_put(b"k", b"v")
    direct = SettlementEffects(kv_puts={b"k": b"v"}, kv_deletes=[b"k"])
    with pytest.raises(ConflictingKvEffect):
        direct.validate()


def test_oversized_value_is_rejected_by_the_builder() -> None:
    SettlementEffects().kv_put(b"k", b"x" * MAX_KV_VALUE_SIZE)
    with pytest.raises(KvValueTooLarge) as err:
        SettlementEffects().kv_put(b"k", b"x" * (MAX_KV_VALUE_SIZE + 1))
    assert (err.value.size, err.value.max) == (MAX_KV_VALUE_SIZE + 1, 262_144)


def test_bad_effect_types() -> None:
    with pytest.raises(InvalidOption):
        SettlementEffects().kv_put("k", b"v")  # type: ignore[arg-type]
    with pytest.raises(InvalidOption):
        EnqueueRequest("q", "text")  # type: ignore[arg-type]
    assert SettlementEffects().is_empty()


@pytest.mark.parametrize("where", ["ack", "enqueue", "commit", "cancel"])
async def test_oversized_value_set_directly_writes_nothing(queue: Queue, where: str) -> None:
    id = await queue.enqueue("q", b"")
    claim = await claim_one(queue) if where == "ack" else None
    big = SettlementEffects(
        enqueues=[EnqueueRequest("next", b"y" * 300_000)],
        kv_puts={b"k": b"x" * (MAX_KV_VALUE_SIZE + 1)},
    )
    calls = {
        "ack": lambda: queue.ack_with(claim, big),  # type: ignore[arg-type]
        "enqueue": lambda: queue.enqueue_with_effects("q", b"z" * 300_000, None, big),
        "commit": lambda: queue.commit_effects(big),
        "cancel": lambda: queue.cancel_with(id, big),
    }
    before = snapshot(queue)
    with pytest.raises(KvValueTooLarge):
        await calls[where]()
    assert snapshot(queue) == before
    assert await blob_names(queue.writer.objects) == []  # no payload object written


async def test_discarded_followups_leave_no_payload_objects(open_queue: object) -> None:
    q: Queue = await open_queue(  # type: ignore[operator]
        payload_offload_threshold=10, default_queue_config=QueueConfig(max_attempts=5)
    )
    await q.enqueue("q", b"")
    big = SettlementEffects().enqueue("next", b"x" * 100)
    assert await q.nack_with(await claim_one(q), "e", big) == Retried()
    assert await blob_names(q.writer.objects) == []
    hit = await q.enqueue_with("d", b"", EnqueueOptions(dedup_key="k"))
    res = await q.commit_effects(
        SettlementEffects().enqueue("d", b"y" * 100, EnqueueOptions(dedup_key="k"))
    )
    assert res == [AlreadyEnqueued(hit.id)]
    assert await blob_names(q.writer.objects) == []
    await q.writer.wait_idle()
