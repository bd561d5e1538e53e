"""`PoolMember` under hypothesis-chosen schedules (see `pool_sim`: real
`PoolMember`s, a real `LogWriter` per partition held on a
`PrefixedObjectStore`, a `MockClock` per member): joins, crashes (abort),
pauses, resumes, graceful leaves and time passing, on 4 partitions.

- After every rule: never two members (not crashed or gone) holding one
  partition with heartbeats valid on the simulation's clock, and no
  ``on_acquire`` of a partition another member still holds validly
  (`PoolSim.violations`).
- Once nothing happened for ttl + 2 heartbeats while a member runs (and at
  the end, after waking the paused ones): every
  partition held by exactly one running member, the one the newest table
  names, no move pending, loads within one (`PoolSim.settled`).
- At the end, in every partition's log: no commit by a writer after a newer
  writer's open marker, and every commit a writer acknowledged is there
  (`PoolSim.check_logs`).
"""

from __future__ import annotations

import asyncio
from typing import Any

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)
from pool_sim import PoolSim, SimMember

P, TTL, HB, STEP = 4, 15.0, 3.0, 1.5
QUIET = TTL + 2 * HB  # the bound, after the last change
MAX_MEMBERS = 4


class Pool(RuleBasedStateMachine):
    """A pool of `PoolMember`s on ``P`` partitions, driven one rule at a time."""

    def __init__(self) -> None:
        super().__init__()
        self.loop = asyncio.new_event_loop()
        self.sim = PoolSim(P, ttl=TTL, heartbeat=HB)
        self.changed = self.sim.now
        self.checked = 0

    def run(self, coro: Any) -> Any:
        return self.loop.run_until_complete(coro)

    def teardown(self) -> None:
        try:
            for m in self.sim.members:  # wake the paused; then the pool must settle
                if m.paused:
                    self.sim.resume(m)
                    self._changed()
            if self.sim.running():
                self.wait_until_settled()
            commits = self.run(self.sim.check_logs())
            assert commits == len(self.sim.commits), (commits, len(self.sim.commits))
        finally:
            self.run(self.sim.close())
            self.loop.close()

    def _changed(self) -> None:
        self.changed = self.sim.now

    def _alive(self) -> list[SimMember]:
        return [m for m in self.sim.members if not (m.crashed or m.left)]

    @initialize(members=st.integers(1, 3), gap=st.integers(0, 2))
    def pool(self, members: int, gap: int) -> None:
        """A pool to start from: ``members`` joining ``gap`` steps apart."""
        for _ in range(members):
            self.join()
            self.advance(gap)

    @precondition(lambda self: len(self._alive()) < MAX_MEMBERS)
    @rule()
    def join(self) -> None:
        self.run(self.sim.join())
        self._changed()

    @precondition(lambda self: self._alive())
    @rule(data=st.data())
    def crash(self, data: st.DataObject) -> None:
        self.run(self.sim.crash(data.draw(st.sampled_from(self._alive()))))
        self._changed()

    @precondition(lambda self: self.sim.running())
    @rule(data=st.data())
    def pause(self, data: st.DataObject) -> None:
        self.sim.pause(data.draw(st.sampled_from(self.sim.running())))
        self._changed()

    @precondition(lambda self: any(m.paused for m in self._alive()))
    @rule(data=st.data())
    def resume(self, data: st.DataObject) -> None:
        self.sim.resume(data.draw(st.sampled_from([m for m in self._alive() if m.paused])))
        self._changed()

    @precondition(lambda self: self.sim.running())
    @rule(data=st.data())
    def leave(self, data: st.DataObject) -> None:
        self.run(self.sim.leave(data.draw(st.sampled_from(self.sim.running()))))
        self._changed()

    @rule(steps=st.integers(1, 12))
    def advance(self, steps: int) -> None:
        for _ in range(steps):
            self.run(self.sim.step(STEP))
            self._check_liveness()

    @precondition(lambda self: self.sim.running())
    @rule()
    def wait_until_settled(self) -> None:
        while self.sim.now - self.changed < QUIET:
            self.run(self.sim.step(STEP))
        self._check_liveness()
        assert self.checked > 0

    def _check_liveness(self) -> None:
        if self.sim.now - self.changed >= QUIET and self.sim.running():
            assert self.sim.settled(), f"t={self.sim.now}: {self.sim.describe()}"
            self.checked += 1

    @invariant()
    def safe(self) -> None:
        assert self.sim.violations == [], self.sim.violations


Pool.TestCase.settings = settings(max_examples=25, stateful_step_count=20, deadline=None)
test_pool = Pool.TestCase
