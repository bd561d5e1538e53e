"""`PoolMember` as deterministic simulations: members sharing the partitions
of one `memory://` store, each on its own mock clock, with real log writers
per partition (see `pool_sim`). Defaults: 8 partitions, ttl 15 s, heartbeat 3 s."""

from __future__ import annotations

import asyncio
import random
from collections.abc import AsyncIterator

import pytest
from pool_sim import PoolSim

from durable._logging import capture_logs
from durable.cluster.assignment import AssignmentChain
from durable.cluster.manifest import partition_prefix
from durable.cluster.members import decode_member, member_name
from durable.cluster.pool import PoolMember
from durable.errors import InvalidArgument, ObjectNotFound, StoreClosed
from durable.store.log import LogWriter
from durable.store.log.writer import LogOptions
from durable.store.objects.prefixed import PrefixedObjectStore

P, TTL, HB = 8, 15.0, 3.0
BOUND = TTL + 2 * HB  # every partition owned again within this after a change (issue 15)


@pytest.fixture
async def sim() -> AsyncIterator[PoolSim]:
    s = PoolSim(P, ttl=TTL, heartbeat=HB)
    yield s
    await s.close()
    assert s.violations == []


async def test_a_lone_member_owns_every_partition_when_start_returns(sim: PoolSim) -> None:
    a = await sim.join()
    assert a.pool.owned == frozenset(range(P))
    assert sorted(a.parts.acquired) == list(range(P))
    assert all(a.pool.validity(p) is None for p in range(P))
    await a.pool.wait_owned(P - 1)  # at once
    table = await AssignmentChain(sim.objects, P).load()
    assert table is not None
    assert table.version == 1
    assert [s.owner for s in table.slots] == [a.id] * P
    await sim.advance(6)
    assert {c.partition for c in sim.commits} == set(range(P))
    assert await sim.check_logs() == len(sim.commits)


async def test_joiners_get_their_share_within_the_bound_balanced(sim: PoolSim) -> None:
    a = await sim.join()
    await sim.advance(4)
    b = await sim.join()
    assert b.pool.owned == frozenset()  # the coordinator must see it change first
    took = await sim.until(sim.settled, limit=BOUND)
    assert took <= BOUND
    assert len(a.pool.owned) == len(b.pool.owned) == P // 2
    assert sorted(a.parts.released) == sorted(b.pool.owned)  # drained, then handed over
    ra, rb = len(a.parts.released), len(b.parts.released)
    c = await sim.join()
    took = await sim.until(sim.settled, limit=BOUND)
    assert took <= BOUND
    assert sorted(len(m.pool.owned) for m in (a, b, c)) == [2, 3, 3]
    assert sorted(a.parts.released[ra:] + b.parts.released[rb:]) == sorted(c.pool.owned)
    assert a.parts.lost == []
    assert b.parts.lost == []
    await sim.advance(30)  # stable: nothing moves
    assert sim.settled()
    assert len(sim.acquisitions) == P + P // 2 + len(c.pool.owned)
    assert await sim.check_logs() == len(sim.commits)


async def test_a_crashed_members_partitions_are_owned_again_within_the_bound(
    sim: PoolSim,
) -> None:
    a = await sim.join()
    b = await sim.join()
    c = await sim.join()
    await sim.until(sim.settled, limit=BOUND)
    await sim.advance(2)
    victim = b  # not the coordinator
    orphans = victim.pool.owned
    await sim.crash(victim)
    took = await sim.until(sim.settled, limit=BOUND)
    assert took <= BOUND
    assert orphans <= a.pool.owned | c.pool.owned
    assert len(a.pool.owned) + len(c.pool.owned) == P
    await sim.crash(a)  # the coordinator now
    took = await sim.until(sim.settled, limit=BOUND)
    assert took <= BOUND
    assert c.pool.owned == frozenset(range(P))
    await sim.advance(2 * HB)  # the departed members' litter goes
    for gone in (a, b):
        with pytest.raises(ObjectNotFound):
            await sim.objects.get(member_name(gone.id))
    assert await sim.check_logs() == len(sim.commits)


async def test_a_member_paused_past_the_ttl_commits_nothing_after_waking(sim: PoolSim) -> None:
    a = await sim.join()
    b = await sim.join()
    await sim.until(sim.settled, limit=BOUND)
    await sim.advance(1)
    held = b.pool.owned
    old_writers = {w.writer_id for w in b.parts.writers.values()}
    sim.pause(b)
    paused_at = sim.now_ms
    took = await sim.until(lambda: a.pool.owned == frozenset(range(P)), limit=BOUND)
    assert took <= BOUND
    sim.resume(b)
    woke_at = sim.now_ms
    await sim.step(0.5)
    assert {p for p, _ in b.parts.lost} == set(held)  # self-fenced on waking
    assert all("heartbeat" in reason for _, reason in b.parts.lost)
    late = [c for c in sim.commits if c.writer in old_writers and c.at_ms > paused_at]
    assert late == []
    await sim.until(sim.settled, limit=BOUND)  # alive again: it gets a share back
    assert len(b.pool.owned) == P // 2
    assert all(c.member != b.id or c.writer not in old_writers for c in sim.commits[-P:])
    assert woke_at > paused_at
    assert await sim.check_logs() == len(sim.commits)


async def test_a_short_pause_moves_nothing_and_its_writers_self_fence(sim: PoolSim) -> None:
    a = await sim.join()
    b = await sim.join()
    await sim.until(sim.settled, limit=BOUND)
    before = (a.pool.owned, b.pool.owned)
    versions = a.pool.table.version
    sim.pause(b)
    await sim.until(lambda: not sim.valid_now(b), limit=TTL)  # stale, not dead: 2.5 s short
    assert sim.now_ms - sim.heartbeats[b.id] <= 0.8 * TTL * 1000 + 500
    sim.resume(b)
    await sim.step(0.5)
    assert {p for p, _ in b.parts.lost} == set(before[1])  # fenced itself on waking
    await sim.until(sim.settled, limit=2 * HB)
    assert (a.pool.owned, b.pool.owned) == before  # reopened, same table
    assert a.pool.table.version == versions
    assert await sim.check_logs() == len(sim.commits)


async def test_a_graceful_leave_drains_and_hands_over_within_a_heartbeat(sim: PoolSim) -> None:
    a = await sim.join()
    b = await sim.join()
    c = await sim.join()
    await sim.until(sim.settled, limit=BOUND)
    held = b.pool.owned
    await sim.leave(b)
    assert sorted(b.parts.released) == sorted(held)
    assert b.parts.lost == []
    assert b.pool.owned == frozenset()
    assert decode_member("k", await sim.objects.get(member_name(b.id))).released
    took = await sim.until(sim.settled, limit=HB)
    assert took <= HB
    assert len(a.pool.owned) + len(c.pool.owned) == P
    await b.pool.release()  # idempotent
    with pytest.raises(StoreClosed):
        await b.pool.wait_owned(0)
    assert await sim.check_logs() == len(sim.commits)


async def test_the_last_member_leaving_leaves_everything_to_the_next(sim: PoolSim) -> None:
    a = await sim.join()
    await sim.advance(2)
    await sim.leave(a)
    b = await sim.join()  # a released: no ttl to wait
    assert b.pool.owned == frozenset(range(P))
    assert await sim.check_logs() == len(sim.commits)


async def test_a_leave_cancelled_while_draining_still_leaves_everything_to_the_next(
    sim: PoolSim,
) -> None:
    a = await sim.join()
    a.parts.drain = asyncio.Event()  # the drain never ends by itself
    await sim.advance(2)
    leaving = asyncio.ensure_future(a.pool.release())

    async def every_drain_blocked() -> None:
        while a.parts.blocked < P:
            a.parts.drain_blocked.clear()
            await a.parts.drain_blocked.wait()

    await asyncio.wait_for(every_drain_blocked(), 10)
    leaving.cancel()  # e.g. the engine's caller timed out
    with pytest.raises(asyncio.CancelledError):
        await leaving
    a.left = True
    # Its writers are stopped and its heartbeat too: it says it left.
    assert all(w.failure is not None for w in a.parts.writers.values())
    assert a.pool.owned == frozenset()
    record = decode_member(member_name(a.id), await sim.objects.get(member_name(a.id)))
    assert record.released
    b = await sim.join()  # no ttl to wait
    assert b.pool.owned == frozenset(range(P))
    assert await sim.check_logs() == len(sim.commits)


async def test_a_drain_keeps_committing_until_done_then_hands_over(sim: PoolSim) -> None:
    a = await sim.join()
    a.parts.drain = asyncio.Event()
    await sim.advance(2)
    b = await sim.join()
    await sim.until(lambda: bool(a.parts.released), limit=BOUND)
    draining = a.parts.released[0]
    await sim.advance(2 * HB)
    assert draining in a.parts.writers  # still draining: nobody else opened it
    assert draining not in b.pool.owned
    assert a.pool.validity(draining) is None  # its last commits go through
    a.parts.drain.set()
    took = await sim.until(sim.settled, limit=2 * HB)
    assert took <= 2 * HB
    assert a.parts.lost == []
    assert await sim.check_logs() == len(sim.commits)


async def test_a_lost_handover_race_is_retried_until_it_lands(sim: PoolSim) -> None:
    a = await sim.join()
    await sim.advance(2)
    b = await sim.join()
    chain = AssignmentChain(sim.objects, P)

    async def race() -> None:  # another writer takes the version a's handover wanted
        table = await chain.load()
        assert table is not None
        await chain.append(type(table)(table.version + 1, table.partitions, table.slots))

    a.store.before_create["cluster/assignment/"] = race
    took = await sim.until(sim.settled, limit=BOUND)
    assert "cluster/assignment/" not in a.store.before_create  # the race happened
    assert took <= BOUND
    assert len(b.pool.owned) == P // 2
    assert await sim.check_logs() == len(sim.commits)


async def test_a_writer_fenced_by_a_newer_open_marker_drops_its_partition(
    sim: PoolSim,
) -> None:
    a = await sim.join()
    await sim.advance(1)
    # an intruder opens partition 3 (as a stale table's owner would): a's writer is fenced
    intruder = await LogWriter.open(
        PrefixedObjectStore(sim.objects, partition_prefix(3)), LogOptions(checkpoint_on_close=False)
    )
    await sim.step(0.5)
    assert 3 not in a.pool.owned
    assert [p for p, _ in a.parts.lost] == [3]
    assert "another writer" in a.parts.lost[0][1]
    await intruder.close()
    await sim.until(lambda: 3 in a.pool.owned, limit=2 * HB)  # the table still says a: reopened
    assert await sim.check_logs() == len(sim.commits)


async def test_bad_arguments_are_refused(sim: PoolSim) -> None:
    async def noop(*_: object) -> None:
        return None

    async def never(_: int) -> None:
        raise AssertionError

    with pytest.raises(InvalidArgument, match="partitions"):
        PoolMember(sim.objects, 0, on_acquire=never, on_lose=noop, on_release=noop)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgument, match="heartbeat"):
        PoolMember(
            sim.objects,
            P,
            on_acquire=never,
            on_lose=noop,
            on_release=noop,
            ttl=2,
            heartbeat=1,  # type: ignore[arg-type]
        )
    a = await sim.join()
    with pytest.raises(InvalidArgument, match="started already"):
        await a.pool.start()
    assert a.pool.validity(P) is not None  # not a partition it holds


async def test_crash_pause_join_and_leave_in_one_run(sim: PoolSim) -> None:
    """The issue's scenario, scripted: 3 members; one crashes mid-run, another
    pauses past the ttl then wakes, a fourth joins, then one leaves: after each
    change every partition is owned again within the bound, balanced."""
    members = [await sim.join() for _ in range(3)]
    await sim.until(sim.settled, limit=BOUND)
    await sim.advance(1.5)
    await sim.crash(members[0])
    assert await sim.until(sim.settled, limit=BOUND) <= BOUND
    sim.pause(members[1])
    assert await sim.until(sim.settled, limit=BOUND) <= BOUND
    assert members[2].pool.owned == frozenset(range(P))
    sim.resume(members[1])
    await sim.step(0.5)
    assert members[1].pool.owned == frozenset()  # dropped on waking
    assert await sim.until(sim.settled, limit=BOUND) <= BOUND
    d = await sim.join()
    assert await sim.until(sim.settled, limit=BOUND) <= BOUND
    assert sorted(len(m.pool.owned) for m in (members[1], members[2], d)) == [2, 3, 3]
    await sim.leave(members[2])
    assert await sim.until(sim.settled, limit=BOUND) <= BOUND
    assert len(members[1].pool.owned) == len(d.pool.owned) == P // 2
    assert await sim.check_logs() == len(sim.commits)


@pytest.mark.parametrize("seed", range(12))
async def test_random_scripts_keep_every_partition_owned(seed: int) -> None:
    """Seeded random scripts of joins, crashes, pauses, resumes and leaves at
    random times; after the last change every partition is owned within the
    bound, and no log has a commit of a fenced writer."""
    rng = random.Random(seed)
    sim = PoolSim(P, ttl=TTL, heartbeat=HB)
    try:
        await sim.join()
        for _ in range(8):
            await sim.advance(rng.choice([0.5, 1.5, 3.0, 6.0, 18.0]))
            running = sim.running()
            paused = [m for m in sim.members if m.paused]
            action = rng.choice(["join", "crash", "pause", "resume", "leave"])
            if action == "join" or not running:
                await sim.join()
            elif action == "crash" and len(running) > 1:
                await sim.crash(rng.choice(running))
            elif action == "pause" and len(running) > 1:
                sim.pause(rng.choice(running))
            elif action == "resume" and paused:
                sim.resume(rng.choice(paused))
            elif action == "leave" and len(running) > 1:
                await sim.leave(rng.choice(running))
        for m in sim.members:
            if m.paused:
                sim.resume(m)
        took = await sim.until(sim.settled, limit=BOUND)
        assert took <= BOUND, sim.describe()
        assert sim.violations == []
        assert await sim.check_logs() == len(sim.commits)
    finally:
        await sim.close()


async def test_a_partition_that_fails_to_open_is_tried_again_at_the_next_tick(
    sim: PoolSim,
) -> None:
    a = await sim.join()
    await sim.advance(2)
    b = sim.member()
    b.parts.fail_acquire = {0, 1, 2, 3, 4, 5, 6, 7}
    await b.pool.start()
    took = await sim.until(sim.settled, limit=BOUND + HB)  # one tick more: a failed open
    assert took <= BOUND + HB
    assert len(b.pool.owned) == P // 2
    assert b.parts.fail_acquire == set(range(P)) - b.pool.owned  # each failed once
    assert a.parts.lost == []
    assert await sim.check_logs() == len(sim.commits)


async def test_a_failing_open_at_start_leaves_and_raises(sim: PoolSim) -> None:
    a = sim.member()
    a.parts.fail_acquire = {5}
    with pytest.raises(RuntimeError, match="p5"):
        await a.pool.start()
    assert a.pool.owned == frozenset()
    assert a.parts.writers == {}  # what opened was closed
    assert sorted(p for p, _ in a.parts.lost) == [0, 1, 2, 3, 4, 6, 7]
    assert decode_member("k", await sim.objects.get(member_name(a.id))).released
    a.left = True
    b = await sim.join()  # a said it left: no ttl to wait
    assert b.pool.owned == frozenset(range(P))


async def test_an_open_at_a_superseded_epoch_is_refused_and_fences_no_one(sim: PoolSim) -> None:
    """b is given partitions at epoch 2 and pauses while opening their logs
    (its read of the table and its open are not one step). a judges it dead,
    takes them back at epoch 3 and opens them. When b wakes, its opens at
    epoch 2 finish: the logs refuse them (`StaleEpoch`), so a's writers are
    not fenced; b drops them quietly (logged at info) and gets a share later."""
    a = await sim.join()
    await sim.advance(1)
    b = sim.member()
    b.parts.pause_acquire = set(range(P))
    await b.pool.start()
    await sim.until(lambda: b.paused, limit=BOUND)
    given = {p for p, s in enumerate(a.pool.table.slots) if s.owner == b.id}
    assert len(given) == P // 2
    assert all(a.pool.table.slots[p].epoch == 2 for p in given)
    b.parts.pause_acquire.clear()
    await sim.until(lambda: a.pool.owned == frozenset(range(P)), limit=BOUND)
    assert all(a.pool.table.slots[p].epoch == 3 for p in given)
    with capture_logs() as logs:
        sim.resume(b)
        await sim.step(0.5)
    assert sorted(b.parts.refused) == sorted((p, 2) for p in given)
    assert b.pool.owned == frozenset()
    assert a.parts.lost == []  # no stale marker fenced the newer owner
    refusals = [e for e in logs if e["event"] == "a newer owner holds a partition"]
    assert sorted(e["partition"] for e in refusals) == sorted(given)
    assert {e["log_level"] for e in refusals} == {"info"}
    assert not [e for e in logs if e["log_level"] == "error"]
    took = await sim.until(sim.settled, limit=BOUND)  # b is alive: it gets a share
    assert took <= BOUND
    assert len(b.pool.owned) == P // 2
    assert await sim.check_logs() == len(sim.commits)
