"""The assignment table as deterministic simulations: a pool of members on one
memory store (see `assignment_sim`), with scripted joins, crashes, pauses,
releases, lost races on the chain and divergent views. Defaults: ttl 15 s,
heartbeat 3 s, 8 partitions."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from assignment_sim import Sim, coordinators

from durable.cluster.members import member_name

TTL, HB = 15.0, 3.0
BOUND = TTL + 2 * HB  # every partition owned again within this after a change


@pytest.fixture
async def sim() -> AsyncIterator[Sim]:
    s = Sim(8, ttl=TTL, heartbeat=HB)
    yield s
    assert s.violations == []


async def test_the_first_member_owns_everything_and_joiners_get_their_share(sim: Sim) -> None:
    a = await sim.join()
    assert sorted(a.open) == list(range(8))
    assert sim.settled()
    b = await sim.join()
    took = await sim.until(sim.settled, limit=BOUND)
    assert took <= 4 * HB  # seen alive, move planned, handed over, opened
    assert (len(a.open), len(b.open)) == (4, 4)
    c = await sim.join()
    await sim.until(sim.settled, limit=BOUND)
    assert sorted(len(m.open) for m in (a, b, c)) == [2, 3, 3]
    await sim.advance(60)
    assert sim.settled()
    assert len(sim.plans) == 3  # sticky: nothing is planned while nothing changes
    assert sim.fenced == 0  # every move was a handover: nobody was fenced


@pytest.mark.parametrize("which", ["owner", "coordinator"])
async def test_a_crashed_members_partitions_are_owned_again_within_the_bound(
    sim: Sim, which: str
) -> None:
    a, b, c = await sim.join(), await sim.join(), await sim.join()
    await sim.until(sim.settled, limit=BOUND)
    await sim.advance(1.5)
    victim = a if which == "coordinator" else c
    lost = sorted(victim.open)
    sim.crash(victim)
    took = await sim.until(sim.settled, limit=BOUND)
    assert took <= BOUND
    assert took >= TTL - HB  # judged dead only after a ttl of silence
    survivors = [m for m in (a, b, c) if m is not victim]
    assert sorted(len(m.open) for m in survivors) == [4, 4]
    for p in lost:
        assert sim.logs[p].last_marker() in {(2, m.id) for m in survivors} | {
            (3, m.id) for m in survivors
        }


async def test_a_member_paused_past_the_ttl_loses_its_partitions_and_gets_a_share_back(
    sim: Sim,
) -> None:
    a, b, c = await sim.join(), await sim.join(), await sim.join()
    await sim.until(sim.settled, limit=BOUND)
    held = sorted(b.open)
    sim.pause(b)
    took = await sim.until(sim.settled, limit=BOUND)
    assert took <= BOUND
    assert all(p not in b.open or not b.valid() for p in held)  # self-fenced first
    sim.resume(b)
    await sim.step(0.5)
    assert b.open == {} or all(
        sim.logs[p].last_marker() == (e, b.id) for p, (e, _) in b.open.items()
    )
    took = await sim.until(sim.settled, limit=BOUND)
    assert sorted(len(m.open) for m in (a, b, c)) == [2, 3, 3]


async def test_a_short_pause_moves_nothing(sim: Sim) -> None:
    a, b = await sim.join(), await sim.join()
    await sim.until(sim.settled, limit=BOUND)
    plans, held = len(sim.plans), dict(b.open)
    sim.pause(b)
    await sim.advance(TTL * 0.6)
    sim.resume(b)
    await sim.advance(30)
    assert sim.settled()
    assert b.open == held  # same writers, same epochs
    assert len(sim.plans) == plans
    assert len(a.open) == 4


async def test_a_graceful_leave_hands_over_within_a_heartbeat(sim: Sim) -> None:
    a, b, c = await sim.join(), await sim.join(), await sim.join()
    await sim.until(sim.settled, limit=BOUND)
    await sim.advance(1)
    await b.leave()
    assert b.open == {}
    took = await sim.until(sim.settled, limit=BOUND)
    assert took <= HB
    assert sorted(len(m.open) for m in (a, c)) == [4, 4]
    assert sim.fenced == 0


async def test_the_last_member_leaving_leaves_everything_to_the_next_one(sim: Sim) -> None:
    a = await sim.join()
    await a.leave()
    assert all(s.owner is None for s in a.chain.table.slots)
    b = await sim.join()
    assert sorted(b.open) == list(range(8))
    assert all(s.epoch == 3 for s in b.chain.table.slots)  # 1, released at 2, then 3


async def test_a_lost_race_on_the_chain_is_re_read_and_decided_again(sim: Sim) -> None:
    a = await sim.join()
    a.objects.lose_next_race = True
    b = await sim.join()
    await sim.until(sim.settled, limit=BOUND)
    assert sim.lost_races >= 1
    assert (len(a.open), len(b.open)) == (4, 4)
    # The owner's handover loses too: it retries until it lands.
    a.objects.lose_next_race = True
    c = await sim.join()
    await sim.until(sim.settled, limit=BOUND)
    assert sim.lost_races >= 2
    assert sorted(len(m.open) for m in (a, b, c)) == [2, 3, 3]


async def test_two_coordinators_after_divergent_views_cost_only_liveness(sim: Sim) -> None:
    """b stops seeing a's heartbeats change: after a ttl it judges a dead and,
    lowest in its view, plans too; it takes a's partitions at a higher epoch
    (a's next commits are fenced by the new markers); a keeps planning its own
    way. Once b sees a again, the pool settles."""
    a, b, c = await sim.join(), await sim.join(), await sim.join()
    await sim.until(sim.settled, limit=BOUND)
    await sim.blind(b, a)
    await sim.advance(TTL + 2 * HB)
    assert {"m001", "m002"} <= {*coordinators(sim)}
    assert sim.fenced > 0  # a was fenced by the log, not by the table
    sim.unblind(b)
    took = await sim.until(sim.settled, limit=BOUND)
    assert took <= BOUND
    assert coordinators(sim) == [a.id]
    assert sorted(len(m.open) for m in (a, b, c)) == [2, 3, 3]


async def test_an_owner_that_dies_before_handing_over_gives_it_to_its_next() -> None:
    sim = Sim(8, ttl=TTL, heartbeat=HB, drain=60)  # draining never ends here
    a = await sim.join()
    b = await sim.join()
    await sim.advance(2 * HB)
    moving = [p for p, s in enumerate(a.chain.table.slots) if s.next == b.id]
    assert len(moving) == 4
    assert sorted(a.open) == list(range(8))  # a keeps committing while it drains
    sim.crash(a)
    took = await sim.until(sim.settled, limit=BOUND)
    assert took <= BOUND
    assert sorted(b.open) == list(range(8))
    assert sim.violations == []


async def test_a_draining_owner_commits_until_drained_then_hands_over() -> None:
    sim = Sim(4, ttl=TTL, heartbeat=HB, drain=5)
    a = await sim.join()
    before = sim.commits
    b = await sim.join()
    took = await sim.until(sim.settled, limit=BOUND)
    # b seen alive (2 beats), the drain, a's next tick hands over, b's next tick opens.
    assert 5 <= took <= 2 * HB + 5 + 2 * HB
    assert (len(a.open), len(b.open)) == (2, 2)
    assert sim.commits - before >= 4 * 10  # no partition stood still while draining
    assert sim.fenced == 0
    assert sim.violations == []


async def test_a_newcomer_with_the_lowest_id_becomes_the_coordinator(sim: Sim) -> None:
    b = await sim.join("m500")
    c = await sim.join("m600")
    await sim.until(sim.settled, limit=BOUND)
    a = await sim.join("m100")
    await sim.until(sim.settled, limit=BOUND)
    assert coordinators(sim) == [a.id]
    assert sorted(len(m.open) for m in (a, b, c)) == [2, 3, 3]
    assert sim.fenced == 0  # it waited to see the owners alive: it took nothing from them


async def test_a_departed_member_whose_object_was_deleted_stops_counting() -> None:
    """The lowest member owns nothing (more members than partitions), so no table
    names it; it crashes and its object is deleted (by a coordinator that judged it
    dead first, or an operator) while the others last saw it alive. They must judge
    it gone, not alive for ever: the next-lowest becomes the coordinator and takes
    over what a member crashing next held."""
    sim = Sim(2, ttl=TTL, heartbeat=HB)
    b, c = await sim.join("m500"), await sim.join("m600")
    await sim.until(sim.settled, limit=BOUND)
    a = await sim.join("m100")
    await sim.until(lambda: coordinators(sim) == [a.id], limit=BOUND)
    assert sim.settled()
    assert a.open == {}  # balanced: it owns nothing, no table slot names it
    sim.crash(a)
    await sim.objects.delete([member_name(a.id)])
    await sim.until(lambda: coordinators(sim) == [b.id], limit=2 * HB)
    lost = dict(c.open)  # partition -> (epoch, open order)
    sim.crash(c)
    took = await sim.until(sim.settled, limit=BOUND)
    assert took <= BOUND
    assert sorted(b.open) == [0, 1]
    for p, (epoch, _) in lost.items():
        assert sim.logs[p].last_marker() == (epoch + 1, b.id)
    assert sim.violations == []


async def test_a_member_acting_on_a_superseded_table_is_refused_by_the_log() -> None:
    """Hypothesis's example (test_assignment_stateful), scripted. With asymmetric
    views, m001 (the coordinator) judges m003 dead while m003 runs: in one tick
    m003 reads the version giving it p0 and p1 at epoch 2, then m001 writes the
    next, giving them to itself at epoch 3, and opens them; m003 acts on what it
    read. Its opens at epoch 2 come after m001's at 3: the log refuses them
    (`StaleEpoch`), so m001 is not fenced and no marker goes back."""
    sim = Sim(6, ttl=TTL, heartbeat=HB)
    a, b = await sim.join(), await sim.join()
    await sim.advance(15)
    await sim.blind(b, a)
    c = await sim.join()
    await sim.join()
    await sim.blind(a, c)
    await sim.join()
    await sim.advance(18)
    assert sim.violations == []
    assert sim.refused == 2
    for p in (0, 1):
        assert sim.logs[p].last_marker() == (3, a.id)
        assert a.open[p][0] == 3  # never fenced by the stale opener
        assert p not in c.open
    for log in sim.logs:  # epochs never go backwards in any log
        epochs = [epoch for epoch, _, marker in log.entries if marker]
        assert epochs == sorted(epochs)
    for m in sim.members:
        sim.unblind(m)
    took = await sim.until(sim.settled, limit=BOUND)
    assert took <= BOUND
    assert sim.violations == []
