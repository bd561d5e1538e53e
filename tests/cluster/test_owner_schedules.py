"""Ownership under seeded random schedules of joins, crashes, pauses, resumes,
releases and takeovers (see `owner_sim`), checking at every step:

- at most one member owns validly at any moment (on the simulation's clock,
  paused members included), except right after a ``takeover=True`` join;
- no member acquires while another still owns validly (no acquisition from
  a stale read);
- once nothing happened for ttl + 2 heartbeats, while any member runs,
  exactly one running member owns the store (a dead owner is replaced
  within that bound);
- the log holds no object of a writer after a newer writer's open marker.
"""

from __future__ import annotations

import random

import pytest
from owner_sim import HostLocks, Sim, SimMember, states

TTL, HB, STEP = 15.0, 3.0, 0.5
QUIET = TTL + 2 * HB + STEP
STEPS = 600


async def _disrupt(sim: Sim, rng: random.Random) -> bool:
    """Maybe one event; True if something happened."""
    r = rng.random() * 4  # about one event in 30 steps: quiet stretches happen
    running = sim.running()
    paused = [m for m in sim.members if m.paused and not m.crashed]
    alive = [m for m in sim.members if not m.crashed and m.ownership.state.value != "client"]
    if (r < 0.03 and len(alive) < 5) or not alive:
        await sim.join(takeover=rng.random() < 0.1)
    elif r < 0.05 and running:
        await sim.crash(_pick(rng, running, sim))
    elif r < 0.07 and running and not paused:
        sim.pause(_pick(rng, running, sim))
    elif r < 0.10 and paused:
        sim.resume(rng.choice(paused))
    elif r < 0.115 and running:
        await _pick(rng, running, sim).ownership.release()
    elif r < 0.12 and paused:
        await sim.crash(rng.choice(paused))
    else:
        return False
    return True


def _pick(rng: random.Random, running: list[SimMember], sim: Sim) -> SimMember:
    """The owner half the time (the interesting case), else anyone."""
    owners = sim.owners()
    return owners[0] if owners and rng.random() < 0.5 else rng.choice(running)


@pytest.mark.parametrize("seed", range(12))
async def test_random_schedules_keep_one_owner_and_replace_a_dead_one(seed: int) -> None:
    rng = random.Random(seed)
    sim = Sim(ttl=TTL, heartbeat=HB, locks=HostLocks() if seed % 2 else None)
    try:
        await sim.join()
        quiet_since = sim.now
        checked = 0
        for _ in range(STEPS):
            if await _disrupt(sim, rng):
                quiet_since = sim.now
            await sim.step(STEP)
            assert sim.violations == [], sim.violations
            if sim.now - quiet_since >= QUIET and sim.running():
                owners = [m.id for m in sim.owners()]
                assert len(owners) == 1, f"t={sim.now}: owners {owners}, {states(sim)}"
                checked += 1
        assert checked > 0  # the schedule had quiet stretches to check
        assert len(sim.acquisitions) >= 2
        await sim.check_epochs()
    finally:
        await sim.close()
