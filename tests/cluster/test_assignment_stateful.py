"""The assignment table under hypothesis-chosen schedules (see `assignment_sim`):
joins, crashes, pauses, resumes, graceful leaves, lost races on the chain,
divergent views (a member that stops seeing another's heartbeats change) and
time passing. After every rule:

- no stale owner opens a partition after a newer one (markers' epochs go up
  in every partition's modelled log), and two members that both believe they
  own a partition opened it at increasing epochs;
- once nothing happened for ttl + 2 heartbeats (and no view diverges) while
  a member runs, every partition is owned by a running member, no move is
  pending, and the load is balanced within one.
"""

from __future__ import annotations

import asyncio
from typing import Any

from assignment_sim import Member, Sim
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

TTL, HB, STEP = 15.0, 3.0, 0.5
QUIET = TTL + 2 * HB + STEP
MAX_MEMBERS = 5


class Pool(RuleBasedStateMachine):
    """A pool of members on 6 partitions, driven one rule at a time."""

    def __init__(self) -> None:
        super().__init__()
        self.loop = asyncio.new_event_loop()
        self.sim = Sim(6, ttl=TTL, heartbeat=HB)
        self.changed = 0.0
        self.checked = 0

    def run(self, coro: Any) -> Any:
        return self.loop.run_until_complete(coro)

    def teardown(self) -> None:
        self.loop.close()

    def _changed(self) -> None:
        self.changed = self.sim.now

    def _alive(self) -> list[Member]:
        return [m for m in self.sim.members if not (m.crashed or m.released)]

    def _diverged(self) -> bool:
        return any(m.objects.frozen for m in self.sim.running())

    @precondition(lambda self: len(self._alive()) < MAX_MEMBERS)
    @rule()
    def join(self) -> None:
        self.run(self.sim.join())
        self._changed()

    @precondition(lambda self: self._alive())
    @rule(data=st.data())
    def crash(self, data: st.DataObject) -> None:
        self.sim.crash(data.draw(st.sampled_from(self._alive())))
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
        self.run(data.draw(st.sampled_from(self.sim.running())).leave())
        self._changed()

    @precondition(lambda self: self.sim.running())
    @rule(data=st.data())
    def lose_a_race(self, data: st.DataObject) -> None:
        data.draw(st.sampled_from(self.sim.running())).objects.lose_next_race = True
        self._changed()

    @precondition(lambda self: len(self.sim.running()) >= 2)
    @rule(data=st.data())
    def diverge(self, data: st.DataObject) -> None:
        running = self.sim.running()
        m = data.draw(st.sampled_from(running))
        other = data.draw(st.sampled_from([o for o in running if o is not m]))
        self.run(self.sim.blind(m, other))
        self._changed()

    @precondition(lambda self: any(m.objects.frozen for m in self.sim.members))
    @rule()
    def converge(self) -> None:
        for m in self.sim.members:
            self.sim.unblind(m)
        self._changed()

    @rule(steps=st.integers(1, 30))
    def advance(self, steps: int) -> None:
        for _ in range(steps):
            self.run(self.sim.step(STEP))
            self._check_liveness()

    @rule()
    def wait_until_settled(self) -> None:
        self.converge()
        while self.sim.now - self.changed < QUIET:
            self.run(self.sim.step(STEP))
        self._check_liveness()

    def _check_liveness(self) -> None:
        if self.sim.now - self.changed >= QUIET and self.sim.running() and not self._diverged():
            assert self.sim.settled(), self.sim.describe()
            self.checked += 1

    @invariant()
    def safe(self) -> None:
        assert self.sim.violations == [], self.sim.violations


Pool.TestCase.settings = settings(max_examples=40, stateful_step_count=25, deadline=None)
test_pool = Pool.TestCase
