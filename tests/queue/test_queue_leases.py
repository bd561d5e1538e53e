"""Leases (semantics 1.5): renewal, the lease handle, the settlement fence."""

from __future__ import annotations

import asyncio

import pytest
from queue_helpers import claim_one, snapshot

from durable.errors import CancelRequested, ClaimLost
from durable.store.clock import MockClock
from durable.store.queue import (
    CancelOutcome,
    CancelToken,
    Claim,
    JobStatus,
    LeaseHandle,
    Queue,
    QueueConfig,
)


async def test_renew_sets_expiry_from_now_and_may_shorten(queue: Queue, clock: MockClock) -> None:
    await queue.enqueue("q", b"")
    claim = await claim_one(queue, lease=30)
    before = snapshot(queue)
    clock.advance(10)
    assert queue.renew_lease(claim, 60) == clock.now_ms() + 60_000
    assert queue.lease_expiry("q", claim.id) == clock.now_ms() + 60_000
    assert queue.renew_lease(claim, 1) == clock.now_ms() + 1000  # shorter is allowed
    assert snapshot(queue) == before  # renewal writes nothing


async def test_renewed_lease_is_not_reaped(queue: Queue, clock: MockClock) -> None:
    await queue.enqueue("q", b"")
    claim = await claim_one(queue, lease=10)
    clock.advance(9)
    queue.renew_lease(claim, 10)
    clock.advance(9)
    assert queue.reap_now() == 0
    await queue.ack(claim)


async def test_shortened_lease_is_reaped_at_the_new_expiry(queue: Queue, clock: MockClock) -> None:
    await queue.enqueue("q", b"")
    claim = await claim_one(queue, lease=60)
    queue.renew_lease(claim, 2)
    clock.advance(2)
    assert queue.reap_now() == 1


async def test_renew_after_settlement_is_claim_lost(queue: Queue) -> None:
    await queue.enqueue("q", b"")
    claim = await claim_one(queue)
    await queue.ack(claim)
    with pytest.raises(ClaimLost):
        queue.renew_lease(claim, 10)
    assert queue.lease_expiry("q", claim.id) is None


async def test_renew_after_reap_is_claim_lost(queue: Queue, clock: MockClock) -> None:
    await queue.enqueue("q", b"")
    claim = await claim_one(queue, lease=1)
    clock.advance(1)
    queue.reap_now()
    with pytest.raises(ClaimLost):
        queue.renew_lease(claim, 10)


async def test_renew_with_a_stale_token_is_claim_lost(queue: Queue, clock: MockClock) -> None:
    await queue.enqueue("q", b"")
    first = await claim_one(queue, lease=1)
    clock.advance(1)
    queue.reap_now()
    second = await claim_one(queue)
    assert second.id == first.id
    with pytest.raises(ClaimLost):
        queue.renew_lease(first, 10)
    assert queue.renew_lease(second, 10) == clock.now_ms() + 10_000


async def test_renew_after_cancel_request_is_refused(queue: Queue) -> None:
    await queue.enqueue("q", b"")
    claim = await claim_one(queue)
    assert await queue.cancel(claim.id) is CancelOutcome.REQUESTED
    with pytest.raises(CancelRequested):
        queue.renew_lease(claim, 10)
    with pytest.raises(CancelRequested):
        claim.lease.ensure_at_least(10)
    await queue.ack(claim)  # still settleable


async def test_ensure_at_least_extends_with_margin_only_if_shorter(
    queue: Queue, clock: MockClock
) -> None:
    await queue.enqueue("q", b"")
    claim = await claim_one(queue, lease=30)
    start = clock.now_ms()
    # 30 s left >= 10 s + 5 s margin: unchanged
    assert claim.lease.ensure_at_least(10) == start + 30_000
    # 30 s left < 60 s + 5 s: extended to now + 65 s
    assert claim.lease.ensure_at_least(60) == start + 65_000
    clock.advance(50)
    # 15 s left: never shortened by a smaller request
    assert claim.lease.ensure_at_least(1) == start + 65_000
    assert queue.lease_expiry("q", claim.id) == start + 65_000
    assert claim.lease.expiry() == start + 65_000


async def test_lease_handle_errors(queue: Queue, clock: MockClock) -> None:
    await queue.enqueue("q", b"")
    claim = await claim_one(queue, lease=1)
    clock.advance(1)
    queue.reap_now()
    with pytest.raises(ClaimLost):
        claim.lease.ensure_at_least(5)


async def test_detached_handle_succeeds_without_effect() -> None:
    h = LeaseHandle.detached()
    h.ensure_at_least(100)
    h.renew(1)
    assert h.expiry() is None
    assert not h.cancel_token.is_cancelled()


async def test_lease_handle_exposes_the_cancel_token(queue: Queue) -> None:
    await queue.enqueue("q", b"")
    claim = await claim_one(queue)
    assert claim.lease.cancel_token is claim.cancel_token
    waiter = asyncio.create_task(claim.cancel_token.wait())
    await asyncio.sleep(0)
    assert not waiter.done()
    await queue.cancel(claim.id)
    await asyncio.wait_for(waiter, 1)
    assert claim.cancel_token.is_cancelled()


async def test_a_child_token_fires_with_its_parent_never_the_other_way(queue: Queue) -> None:
    """Firing a child cancels neither the claim's token nor its lease; a cancel
    of the job fires every child, and a child of a fired token starts fired."""
    await queue.enqueue("q", b"")
    claim = await claim_one(queue, lease=30)
    own, other = claim.cancel_token.child(), claim.cancel_token.child()
    own.fire()
    assert own.is_cancelled()
    assert not claim.cancel_token.is_cancelled()
    assert not other.is_cancelled()
    claim.lease.ensure_at_least(60)  # renewals go on
    waiter = asyncio.create_task(other.wait())
    await asyncio.sleep(0)
    assert not waiter.done()
    assert await queue.cancel(claim.id) is CancelOutcome.REQUESTED
    await asyncio.wait_for(waiter, 1)
    assert claim.cancel_token.child().is_cancelled()
    grandchild = CancelToken().child().child()
    assert not grandchild.is_cancelled()


async def test_on_fire_calls_back_once_at_once_if_fired_and_can_unregister() -> None:
    parent = CancelToken()
    child = parent.child()
    calls: list[str] = []
    child.on_fire(lambda: calls.append("child"))
    gone = child.on_fire(lambda: calls.append("unregistered"))
    gone()
    gone()  # a second unregister is a no-op
    parent.on_fire(lambda: calls.append("parent"))
    assert calls == []
    parent.fire()  # fires the child too: each callback once
    parent.fire()
    child.fire()
    assert sorted(calls) == ["child", "parent"]
    late: list[str] = []
    unregister = child.on_fire(lambda: late.append("late"))
    assert late == ["late"]  # already fired: called at once
    unregister()  # a no-op once it ran


async def test_lease_expiry_of_unknown_job_is_none(queue: Queue) -> None:
    assert queue.lease_expiry("q", "nope") is None


# ------------------------------------------------------ settlement fence


async def settle_call(queue: Queue, claim: Claim, how: str) -> object:
    if how == "ack":
        return await queue.ack(claim)  # type: ignore[func-returns-value]
    if how == "nack":
        return await queue.nack(claim, "e")
    return await queue.dead_letter(claim, "e")  # type: ignore[func-returns-value]


async def test_claim_settleable_after_expiry_until_reaped(queue: Queue, clock: MockClock) -> None:
    await queue.enqueue("q", b"")
    claim = await claim_one(queue, lease=1)
    clock.advance(100)
    await queue.ack(claim)  # the reaper has not run: still ours
    assert queue.stats("q").done == 1
    assert queue.reap_now() == 0


@pytest.mark.parametrize("settle", ["ack", "nack", "dead_letter"])
async def test_settling_a_reaped_claim_is_claim_lost(
    queue: Queue, clock: MockClock, settle: str
) -> None:
    await queue.enqueue("q", b"")
    claim = await claim_one(queue, lease=1)
    clock.advance(1)
    assert queue.reap_now() == 1
    before = snapshot(queue)
    with pytest.raises(ClaimLost) as err:
        await settle_call(queue, claim, settle)
    assert err.value.id == claim.id
    assert snapshot(queue) == before


@pytest.mark.parametrize("settle", ["ack", "nack", "dead_letter"])
async def test_settling_twice_is_claim_lost(queue: Queue, settle: str) -> None:
    await queue.enqueue("q", b"")
    claim = await claim_one(queue)
    await queue.ack(claim)
    before = snapshot(queue)
    with pytest.raises(ClaimLost):
        await settle_call(queue, claim, settle)
    assert snapshot(queue) == before


async def test_old_claim_cannot_settle_a_redelivery(queue: Queue, clock: MockClock) -> None:
    await queue.enqueue("q", b"")
    old = await claim_one(queue, lease=1)
    clock.advance(1)
    queue.reap_now()
    new = await claim_one(queue)
    with pytest.raises(ClaimLost):
        await queue.ack(old)
    rec = queue.job_record(new.id)
    assert rec is not None
    assert rec.status is JobStatus.CLAIMED
    assert rec.attempts == 2
    await queue.ack(new)


async def test_settlement_uses_the_stored_record_not_the_claim_copy(open_queue: object) -> None:
    q: Queue = await open_queue(  # type: ignore[operator]
        default_queue_config=QueueConfig(keep_done_jobs=3600)
    )
    await q.enqueue("q", b"")
    claim = await claim_one(q)
    await q.cancel(claim.id)  # sets cancel_requested on the stored record
    assert claim.record.cancel_requested is False
    await q.ack(claim)
    done = q.job_record(claim.id)
    assert done is not None
    assert done.status is JobStatus.DONE
    assert done.cancel_requested
