"""Ownership as deterministic simulations: members on one `memory://` store,
each on its own mock clock, with scripted crashes, pauses, joins and releases
(see `owner_sim`). Defaults: ttl 15 s, heartbeat 3 s."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
from owner_sim import HostLocks, Sim, states

from durable.cluster.chain import CHAIN_PREFIX, OwnerChain, Reason, decode_version
from durable.cluster.members import Role, decode_member, member_name
from durable.cluster.owner import OWNER_LOCK, Ownership, State
from durable.errors import (
    InvalidArgument,
    MissingGuarantee,
    ObjectNotFound,
    ObjectStoreError,
    StoreClosed,
)
from durable.store.clock import MockClock
from durable.store.objects.base import Guarantee
from durable.store.objects.faults import FaultyObjectStore
from durable.store.objects.memory import MemoryObjectStore

TTL, HB = 15.0, 3.0
BOUND = TTL + 2 * HB  # a dead owner is replaced within this (issue 14)


@pytest.fixture
async def sim() -> AsyncIterator[Sim]:
    s = Sim(ttl=TTL, heartbeat=HB)
    yield s
    await s.close()
    assert s.violations == []


@pytest.fixture
async def locked_sim() -> AsyncIterator[Sim]:
    s = Sim(ttl=TTL, heartbeat=HB, locks=HostLocks())
    yield s
    await s.close()
    assert s.violations == []


async def _head(sim: Sim) -> tuple[str | None, Reason] | None:
    head = await OwnerChain(sim.objects).load()
    return None if head is None else (head.owner, head.reason)


async def test_first_worker_owns_at_once_and_a_second_is_a_standby(sim: Sim) -> None:
    a = await sim.join()
    assert a.ownership.state is State.OWNER
    assert a.owns
    await a.ownership.wait_owner()
    assert await _head(sim) == (a.id, Reason.START)
    record = decode_member("k", await sim.objects.get(member_name(a.id)))
    assert record.role is Role.OWNER
    b = await sim.join()
    assert b.ownership.state is State.STANDBY
    await sim.advance(30)
    assert [m.id for m in sim.owners()] == [a.id]  # the standby fenced nobody
    assert a.owner.lost == []
    assert b.owner.acquired == 0
    assert sim.commits[-1][0] == a.id
    await sim.check_epochs()


async def test_a_dead_owner_is_replaced_within_ttl_plus_two_heartbeats(sim: Sim) -> None:
    a = await sim.join()
    b = await sim.join()
    await sim.advance(7)
    crashed_at = sim.now
    await sim.crash(a)
    last_beat_ms = sim.heartbeats[a.id]
    took = await sim.until(lambda: b.owns, limit=BOUND)
    assert took <= BOUND
    assert sim.acquisitions[-1][1] - last_beat_ms >= TTL * 1000  # after a ttl of silence
    assert await _head(sim) == (b.id, Reason.TAKEOVER)
    assert b.owner.acquired == 1
    assert sim.commits[-1][0] == b.id
    assert sim.commits[-1][1] > crashed_at
    await sim.advance(3)
    with pytest.raises(Exception, match="does not exist"):  # the departed member's litter
        await sim.objects.get(member_name(a.id))
    await sim.check_epochs()


async def test_graceful_release_hands_over_within_one_heartbeat(sim: Sim) -> None:
    a = await sim.join()
    b = await sim.join()
    await sim.advance(4)
    await a.ownership.release()
    assert a.ownership.state is State.CLIENT
    assert a.owner.released == 1
    assert a.owner.lost == []
    assert decode_member("k", await sim.objects.get(member_name(a.id))).released
    took = await sim.until(lambda: b.owns, limit=HB, step=0.25)
    assert took <= HB
    assert await _head(sim) == (b.id, Reason.HANDOVER)
    assert await a.ownership.release() is None  # idempotent
    with pytest.raises(StoreClosed):
        await a.ownership.wait_owner()
    await sim.check_epochs()


async def test_only_the_lowest_id_standby_acquires_then_the_next(sim: Sim) -> None:
    a = await sim.join()
    b = await sim.join()
    c = await sim.join()
    await sim.advance(6)
    await sim.crash(a)
    await sim.until(lambda: b.owns, limit=BOUND)
    assert c.store.calls["create"] == 0  # c never even tried: b has the lower id
    assert c.ownership.state is State.STANDBY
    assert c.owner.acquired == 0
    await sim.advance(6)
    await sim.crash(b)
    await sim.until(lambda: c.owns, limit=BOUND)
    assert [who for who, _ in sim.acquisitions] == [a.id, b.id, c.id]
    await sim.check_epochs()


async def test_a_slow_lower_id_standby_is_waited_for_while_it_lives(sim: Sim) -> None:
    a = await sim.join()
    b = await sim.join()
    c = await sim.join()
    await sim.advance(6)
    await sim.crash(a)
    await sim.advance(TTL - 4)
    sim.pause(b)  # b stalls (less than a ttl) just before anyone judges a dead
    await sim.advance(2 * HB + 2)
    assert sim.owners() == []
    assert c.store.calls["create"] == 0  # a is dead to c, but b may still live
    sim.resume(b)
    await sim.until(lambda: b.owns, limit=2 * HB)
    assert c.owner.acquired == 0


async def test_an_owner_paused_past_the_ttl_commits_nothing_then_is_a_standby(sim: Sim) -> None:
    a = await sim.join()
    b = await sim.join()
    await sim.advance(4)
    sim.pause(a)
    await sim.until(lambda: b.owns, limit=BOUND)
    await sim.advance(2)
    fenced_seq = len(await sim.log_writers())
    sim.resume(a)
    # Woken: its clock jumped, so before anything else runs it is no longer valid.
    assert a.ownership.validity() is not None
    assert await a.owner.commit() is False
    await sim.step(0.5)
    assert a.ownership.state is State.STANDBY, states(sim)
    assert len(a.owner.lost) == 1
    assert b.owns
    assert b.owner.lost == []
    await sim.advance(20)
    assert [m.id for m in sim.owners()] == [b.id]
    assert all(who == b.id for who, _ in sim.commits[-20:])
    assert len(await sim.log_writers()) > fenced_seq
    await sim.check_epochs()


async def test_an_owner_paused_in_the_middle_of_a_heartbeat_put_self_fences(sim: Sim) -> None:
    a = await sim.join()
    b = await sim.join()
    await sim.advance(4)
    sim.pause(a)
    put = a.store.entered("put")
    a.clock.set(sim.now_ms + 2_000)  # its next beat starts, then SIGSTOP: the put hangs
    await put.wait()
    await sim.until(lambda: b.owns, limit=BOUND)
    sim.resume(a)  # the put lands now: the heartbeat it renews is as old as its start
    await sim.step(0.5)
    assert a.ownership.state is State.STANDBY
    assert "heartbeat" in a.owner.lost[0]
    await sim.advance(10)
    assert [m.id for m in sim.owners()] == [b.id]


async def test_a_lone_owner_paused_past_the_ttl_self_fences_then_owns_again(sim: Sim) -> None:
    a = await sim.join()
    await sim.advance(4)
    sim.pause(a)
    sim.now_ms += round(2 * TTL * 1000)
    sim.resume(a)
    assert a.ownership.validity() is not None
    await sim.step(0.5)
    assert a.owner.lost
    assert "heartbeat" in a.owner.lost[0]
    await sim.until(lambda: a.owns, limit=2 * HB)  # released, then took it again
    assert a.owner.acquired == 2
    assert await _reasons(sim) == [Reason.START, Reason.RELEASE, Reason.HANDOVER]
    await sim.check_epochs()


async def _reasons(sim: Sim) -> list[Reason]:
    names = await sim.objects.list(CHAIN_PREFIX)
    return [decode_version(name, await sim.objects.get(name)).reason for name in names]


async def test_an_owner_that_cannot_heartbeat_stops_its_writer_first(sim: Sim) -> None:
    a = await sim.join()
    b = await sim.join()
    await sim.advance(4)
    a.store.failing_puts = True
    stopped_at = None
    while a.ownership.state is State.OWNER:
        await sim.step(0.5)
        if a.owner.lost and stopped_at is None:
            stopped_at = sim.now
    assert stopped_at is not None
    assert "heartbeat" in a.owner.lost[0]
    assert b.owner.acquired == 0  # stopped before any standby could take over
    a.store.failing_puts = False
    await sim.until(lambda: len(sim.owners()) == 1, limit=BOUND)
    await sim.advance(10)
    assert len(sim.owners()) == 1
    await sim.check_epochs()


async def test_an_owner_draining_for_release_still_self_fences(sim: Sim) -> None:
    a = await sim.join()
    writer = a.owner.writer
    assert writer is not None
    a.owner.drain = asyncio.Event()
    releasing = asyncio.create_task(a.ownership.release())
    await a.owner.draining.wait()
    a.store.failing_puts = True
    for _ in range(5):  # 15 s of a drain without a heartbeat
        a.clock.advance(HB)
        await a.clock.wait_for_sleepers(1)  # the heartbeat loop (the other waits for the drain)
    assert writer.failure is not None
    assert "heartbeat" in str(writer.failure)
    a.store.failing_puts = False
    a.owner.drain.set()
    await releasing
    assert await _head(sim) == (None, Reason.RELEASE)


async def test_takeover_true_fences_the_owner_at_once(sim: Sim) -> None:
    a = await sim.join()
    await sim.advance(4)
    b = await sim.join(takeover=True)
    assert b.ownership.state is State.OWNER
    assert b.owns
    assert await _head(sim) == (b.id, Reason.TAKEOVER)
    # The old owner learns at its next commit (fenced by b's open marker) or,
    # idle, at its next chain poll: within one heartbeat either way.
    await sim.until(lambda: a.ownership.state is State.STANDBY, limit=HB)
    await sim.advance(20)
    assert [m.id for m in sim.owners()] == [b.id]
    await sim.check_epochs()


async def test_an_idle_owner_learns_of_a_takeover_from_the_chain(sim: Sim) -> None:
    a = await sim.join()
    a.owner.commit = _never  # type: ignore[method-assign]
    b = await sim.join(takeover=True)
    took = await sim.until(lambda: a.ownership.state is State.STANDBY, limit=HB)
    assert took <= HB
    assert "names member" in a.owner.lost[0]
    assert b.owns


async def _never() -> bool:
    return False


async def test_a_crashed_owners_object_at_startup_waits_a_ttl(sim: Sim) -> None:
    a = await sim.join()
    await sim.advance(4)
    await sim.crash(a)
    await sim.advance(30)  # long dead, but a new process cannot know that at once
    b = await sim.join()
    assert b.ownership.state is State.STANDBY  # first sight proves nothing
    took = await sim.until(lambda: b.owns, limit=TTL + HB)
    assert took >= TTL


async def test_on_a_local_dir_the_host_lock_proves_at_once_that_the_owner_died(
    locked_sim: Sim,
) -> None:
    sim, locks = locked_sim, locked_sim.locks
    assert locks is not None
    a = await sim.join()
    await sim.advance(4)
    assert locks.holders == {OWNER_LOCK: a.id}
    b = await sim.join()
    assert b.ownership.state is State.STANDBY  # the lock is held: the owner lives
    await sim.advance(4)
    assert locks.holders == {OWNER_LOCK: a.id}  # b probed and gave it back
    await sim.crash(a)  # its lock goes with it
    took = await sim.until(lambda: b.owns, limit=HB)
    assert took <= 0.5  # the next lock poll (one sim step), not the next heartbeat
    assert locks.holders == {OWNER_LOCK: b.id}
    await sim.crash(b)
    c = await sim.join()  # a new process after the crash: no ttl to wait
    assert c.ownership.state is State.OWNER
    assert c.owns


async def test_a_paused_owner_keeps_its_host_lock_so_the_ttl_decides(locked_sim: Sim) -> None:
    sim = locked_sim
    a = await sim.join()
    b = await sim.join()
    await sim.advance(4)
    sim.pause(a)
    took = await sim.until(lambda: b.owns, limit=BOUND)
    assert took >= TTL - HB  # no lock to prove it: a ttl of silence did
    assert sim.locks is not None
    assert sim.locks.holders == {OWNER_LOCK: a.id}
    sim.resume(a)
    await sim.advance(2 * HB)
    assert a.ownership.state is State.STANDBY
    assert sim.locks.holders == {OWNER_LOCK: b.id}  # the new owner took it once let go
    await sim.advance(20)
    assert [m.id for m in sim.owners()] == [b.id]  # and nobody flapped
    await sim.check_epochs()


async def test_after_a_takeover_the_old_owners_lock_does_not_mislead_a_standby(
    locked_sim: Sim,
) -> None:
    sim = locked_sim
    a = await sim.join()
    c = await sim.join()
    b = await sim.join(takeover=True)  # cannot get the lock: a holds it
    assert b.owns
    await sim.advance(30)
    assert [m.id for m in sim.owners()] == [b.id], states(sim)
    assert a.ownership.state is State.STANDBY
    assert c.owner.acquired == 0
    assert sim.locks is not None
    assert sim.locks.holders == {OWNER_LOCK: b.id}


async def test_two_workers_starting_at_once_race_and_one_owns(sim: Sim) -> None:
    a, b = sim.member(), sim.member()
    await asyncio.gather(a.ownership.start(), b.ownership.start())
    assert sorted(m.ownership.state.value for m in (a, b)) == ["owner", "standby"]
    assert a.store.calls["create"] + b.store.calls["create"] >= 2  # both tried
    assert len(await sim.objects.list(CHAIN_PREFIX)) == 1
    await sim.advance(30)
    assert len(sim.owners()) == 1
    await sim.check_epochs()


async def test_a_lost_chain_create_re_reads_and_decides_again(sim: Sim) -> None:
    a = await sim.join()
    b = await sim.join()
    c = await sim.join()
    await sim.advance(4)

    async def c_acts_first() -> None:  # between b's decision and its create
        chain = OwnerChain(sim.objects)
        assert await chain.load() is not None
        assert await chain.append(c.id, Reason.TAKEOVER)
        sim.pause(c)  # ... and c then stalls before opening the store

    b.store.before_create[CHAIN_PREFIX] = c_acts_first
    await sim.crash(a)
    await sim.until(lambda: not b.store.before_create, limit=BOUND)
    assert b.ownership.state is State.STANDBY
    assert b.owner.acquired == 0
    assert await _head(sim) == (c.id, Reason.TAKEOVER)
    await sim.until(lambda: b.owns, limit=BOUND)  # c is silent: b takes it from c
    await sim.check_epochs()


async def test_an_acquisition_that_fails_releases_and_stays_standby(sim: Sim) -> None:
    a = await sim.join()
    b = await sim.join()
    await sim.advance(4)
    b.owner.fail_acquire.append(RuntimeError("cannot open the queue"))
    await a.ownership.release()
    await sim.until(lambda: bool(b.owner.fail_acquire) is False, limit=HB)
    failed_at = sim.now
    assert b.ownership.state is State.STANDBY
    assert b.owner.acquired == 0
    assert await _head(sim) == (None, Reason.RELEASE)  # let go again
    await sim.until(lambda: b.owns, limit=2 * HB)  # retried after a back-off
    assert sim.now - failed_at >= HB


async def test_a_first_acquisition_that_fails_raises_from_start(sim: Sim) -> None:
    a = sim.member()
    a.owner.fail_acquire.append(RuntimeError("bad codec"))
    with pytest.raises(RuntimeError, match="bad codec"):
        await a.ownership.start()
    assert a.ownership.state is State.CLIENT
    assert decode_member("k", await sim.objects.get(member_name(a.id))).released
    assert await _head(sim) == (None, Reason.RELEASE)
    b = await sim.join()  # nobody waits for the failed member
    assert b.owns


async def test_a_standby_releases_without_touching_the_chain(sim: Sim) -> None:
    a = await sim.join()
    b = await sim.join()
    await sim.advance(4)
    await b.ownership.release()
    assert b.owner.released == 0
    assert await _head(sim) == (a.id, Reason.START)
    await sim.advance(20)
    assert [m.id for m in sim.owners()] == [a.id]


async def test_start_once_and_refuse_a_store_without_atomic_create(sim: Sim) -> None:
    a = await sim.join()
    with pytest.raises(InvalidArgument, match="started already"):
        await a.ownership.start()
    weak = FaultyObjectStore(MemoryObjectStore())
    weak.guarantees = frozenset()
    own = Ownership(weak, on_acquire=_no, on_lose=_no_reason, on_release=_no_release)
    with pytest.raises(MissingGuarantee):
        await own.start()
    assert Guarantee.ATOMIC_CREATE in sim.objects.guarantees


async def test_a_failing_first_put_raises_from_start() -> None:
    """A permanent error of the first put fails the start (a transient one
    is retried, like the log's reads at open)."""
    store = FaultyObjectStore(MemoryObjectStore())
    store.fail_next("put", ObjectNotFound("cluster/members/x"))
    own = Ownership(
        store, clock=MockClock(), on_acquire=_no, on_lose=_no_reason, on_release=_no_release
    )
    with pytest.raises(ObjectStoreError):
        await own.start()
    assert own.state is State.CLIENT


async def test_a_transient_error_at_the_start_is_retried() -> None:
    store = FaultyObjectStore(MemoryObjectStore())
    store.fail_next("put")
    store.fail_next("list")
    acquired: list[object] = []

    async def acquire() -> object:
        acquired.append(True)
        return _Stub()

    own = Ownership(
        store, clock=MockClock(), on_acquire=acquire, on_lose=_no_reason, on_release=_done
    )
    await own.start()
    assert own.state is State.OWNER
    assert acquired == [True]
    await own.release()


class _Stub:
    failure = None

    def stop(self, error: object) -> None:
        pass

    def add_stop_callback(self, fn: object) -> None:
        pass


async def _done() -> None:
    pass


async def _no() -> object:
    raise AssertionError("must not acquire")


async def _no_reason(reason: str) -> None:
    raise AssertionError("must not lose")


async def _no_release() -> None:
    raise AssertionError("must not release")
