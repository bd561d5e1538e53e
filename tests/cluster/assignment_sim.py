"""A deterministic simulation of a pool of members sharing P partitions.

Every member heartbeats its member object, judges the others with its own
`Liveness`, reads the assignment table through its own `AssignmentChain`
and writes the versions `plan` (if it is the coordinator), `handover` (for
partitions it drained) and `release` (when it leaves) compute; all on one
`MemoryObjectStore`, on the simulation's mock time (a paused member sees no
time pass: it neither ticks nor commits, then wakes with its clock jumped).

A member *ticks* every heartbeat: self-fence if its last successful
heartbeat started more than 0.8 ttl ago, put its heartbeat, poll the chain,
read every listed member and every member the table names, recording a
known member whose object was deleted as gone (`observe_members`, as the
real `PoolMember` does) (phase A); then
decide and write, re-reading and deciding again after a lost race (phase
B); then open the partitions the table gives it and close those it no
longer owns. Every step, every running member with a valid heartbeat
commits once to each partition it has open.

Each partition's log is modelled (`PartitionLog`) as `LogWriter.open` with
``epoch=`` behaves: opening writes a marker ``(epoch, member)``, unless the
newest marker carries a higher epoch: then the open is refused, nothing is
written (`StaleEpoch`) and the member re-reads the table at its next tick
(a member that read a table before a newer version landed and opens after
the newer owner did). A commit lands only while the member's marker is the
last one (the log's fencing: a newer owner's marker fences the older one).
Checked at every step (`Sim.violations`):

- markers go up: a marker's epoch is above the previous marker's, or equal
  for the same member reopening (no stale owner ever opens after a newer:
  by construction, through the refusal; a different member at an equal
  epoch would be the table's fault);
- two members that both believe they own a partition (its writer open and
  their heartbeat valid on the simulation's clock, paused members included)
  opened it at increasing epochs: the later one is the higher.

`Sim.settled` is the liveness condition the tests wait for: every partition
owned (open, at the table's epoch, no move pending) by a running member,
balanced within one among the running members.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import msgpack

from durable._logging import get_logger
from durable.cluster.assignment import (
    ASSIGNMENT_PREFIX,
    AssignmentChain,
    Table,
    assignment_name,
    handover,
    is_coordinator,
    plan,
    release,
)
from durable.cluster.heartbeat import observe_members
from durable.cluster.members import (
    Liveness,
    MemberRecord,
    Role,
    Status,
    encode_member,
    member_id_of,
    member_name,
)
from durable.errors import ObjectNotFound
from durable.store.objects.base import ObjectStore
from durable.store.objects.memory import MemoryObjectStore

SELF_FENCE = 0.8

_log = get_logger("tests.assignment_sim")


class SimClock:
    """The simulation's time as a `Clock` (for the real helpers that read it)."""

    def __init__(self, sim: Sim) -> None:
        self.sim = sim

    def now_ms(self) -> int:
        """The simulation's now."""
        return self.sim.now_ms

    async def sleep(self, seconds: float) -> None:
        """Not used: the simulation moves time itself."""
        raise NotImplementedError("the simulation steps its members; nothing sleeps")


class SimObjects(ObjectStore):
    """One member's handle on the shared store, with scripted faults: frozen
    reads of other members' objects (a divergent view) and lost races."""

    def __init__(self, inner: ObjectStore) -> None:
        self.inner = inner
        self.guarantees = inner.guarantees
        #: Member ids whose object reads return these bytes, whatever is stored.
        self.frozen: dict[str, bytes | None] = {}
        #: Before this handle's next create of a table version, another
        #: writer creates that version first (a copy of the head): a lost race.
        self.lose_next_race = False
        self.creates = 0

    @property
    def url(self) -> str:
        return self.inner.url

    async def get(self, name: str) -> bytes:
        member = member_id_of(name)
        if member is not None and member in self.frozen:
            data = self.frozen[member]
            if data is None:
                raise ObjectNotFound(name)
            return data
        return await self.inner.get(name)

    async def put(self, name: str, data: bytes) -> None:
        await self.inner.put(name, data)

    async def create(self, name: str, data: bytes) -> None:
        if self.lose_next_race and name.startswith(ASSIGNMENT_PREFIX):
            self.lose_next_race = False
            version = int(name[len(ASSIGNMENT_PREFIX) :])
            previous = await self.inner.get(assignment_name(version - 1))
            await self.inner.create(name, _copy_as(previous, version))
        self.creates += 1
        await self.inner.create(name, data)

    async def list(self, prefix: str) -> list[str]:
        return await self.inner.list(prefix)

    async def delete(self, names: Iterable[str]) -> None:
        await self.inner.delete(list(names))


def _copy_as(previous: bytes, version: int) -> bytes:
    """The bytes of a no-op version ``version``: the previous table again."""
    m = msgpack.unpackb(previous, raw=False)
    m["version"] = version
    return msgpack.packb(m, use_bin_type=True)


@dataclass
class PartitionLog:
    """One partition's log, modelled: markers and commits, in order."""

    #: (epoch, member, marker) of every object.
    entries: list[tuple[int, str, bool]] = field(default_factory=list)

    def last_marker(self) -> tuple[int, str] | None:
        """The newest open marker's (epoch, member)."""
        for epoch, member, marker in reversed(self.entries):
            if marker:
                return epoch, member
        return None

    def open(self, member: str, epoch: int) -> tuple[bool, str | None]:
        """Write ``member``'s open marker at ``epoch``, as `LogWriter.open`
        does: (False, None), nothing written, when the newest marker carries
        a higher epoch; else (True, a violation if the markers went back)."""
        last = self.last_marker()
        if last is not None and epoch < last[0]:
            return False, None  # StaleEpoch: a newer owner holds the partition
        self.entries.append((epoch, member, True))
        if last is not None and (epoch < last[0] or (epoch == last[0] and member != last[1])):
            return True, f"{member} opened at epoch {epoch} after {last[1]} at epoch {last[0]}"
        return True, None

    def commit(self, member: str, epoch: int) -> bool:
        """A commit: it lands only while ``member``'s marker is the last."""
        if self.last_marker() != (epoch, member):
            return False
        self.entries.append((epoch, member, False))
        return True


class Member:
    """One worker process of the pool."""

    def __init__(self, sim: Sim, member_id: str) -> None:
        self.sim = sim
        self.id = member_id
        self.objects = SimObjects(sim.objects)
        self.chain = AssignmentChain(self.objects, sim.partitions)
        self.live = Liveness(sim.ttl_ms)
        self.counter = 0
        self.last_ok_ms: int | None = None
        self.next_tick_ms = sim.now_ms
        #: Partition -> the epoch its writer was opened at (and the open order).
        self.open: dict[int, tuple[int, int]] = {}
        #: Partition -> when it began draining for a handover.
        self.draining: dict[int, int] = {}
        self.statuses: dict[str, Status] = {}
        self.paused = False
        self.crashed = False
        self.released = False

    @property
    def running(self) -> bool:
        """Not paused, crashed or released."""
        return not (self.paused or self.crashed or self.released)

    def valid(self) -> bool:
        """Its heartbeat is fresh on the simulation's clock (its own, unless paused)."""
        last = self.last_ok_ms
        return last is not None and self.sim.now_ms - last <= self.sim.ttl_ms * SELF_FENCE

    def fence_if_stale(self) -> None:
        """Stop every writer when the heartbeat is stale."""
        if not self.valid():
            self.open.clear()
            self.draining.clear()

    async def beat(self, *, released: bool = False) -> None:
        """Put the member object (a plain put; renews the heartbeat)."""
        started = self.sim.now_ms
        self.counter += 1
        record = MemberRecord(self.counter, Role.OWNER, released)
        await self.objects.put(member_name(self.id), encode_member(record))
        self.last_ok_ms = started

    async def read(self) -> None:
        """Phase A: fence if stale, beat, poll the chain, observe members."""
        self.fence_if_stale()
        await self.beat()
        await self.chain.poll()
        named = {m for s in self.chain.table.slots for m in (s.owner, s.next) if m is not None}
        self.statuses = await observe_members(
            self.objects, self.live, self.id, named, self.sim.clock, _log
        )

    async def act(self) -> None:
        """Phase B: hand over what drained, plan if coordinator; then apply."""
        for _ in range(4):
            table = self.chain.table
            drained = self._drained(table)
            for p in drained:
                self.open.pop(p, None)  # the writer is closed before the handover
            new = handover(self.id, table, *drained) if drained else None
            if new is None:
                new = plan(self.id, table, self.statuses)
                if new is not None:
                    self.sim.plans.append((self.id, self.sim.now_ms))
            if new is None:
                break
            if not await self.chain.append(new):
                self.sim.lost_races += 1
        self.apply(self.chain.table)

    def _drained(self, table: Table) -> list[int]:
        out = []
        for p, slot in enumerate(table.slots):
            if slot.owner != self.id or slot.next is None:
                continue
            began = self.draining.setdefault(p, self.sim.now_ms)
            if p not in self.open or self.sim.now_ms - began >= self.sim.drain_ms:
                out.append(p)
        return out

    def apply(self, table: Table) -> None:
        """Close what the table no longer gives this member; open what it does."""
        for p in list(self.open):
            slot = table.slots[p]
            if slot.owner != self.id or slot.epoch != self.open[p][0]:
                del self.open[p]
        for p in list(self.draining):
            if table.slots[p].owner != self.id or table.slots[p].next is None:
                del self.draining[p]
        if not self.valid():
            return
        for p, slot in enumerate(table.slots):
            if slot.owner == self.id and slot.next is None and p not in self.open:
                opened, bad = self.sim.logs[p].open(self.id, slot.epoch)
                if bad is not None:
                    self.sim.violate(f"p{p}: {bad}")
                if opened:
                    self.open[p] = (slot.epoch, next(self.sim.opens))
                else:
                    self.sim.refused += 1  # the next tick re-reads the table

    def commit(self) -> None:
        """One commit to each open partition (a fenced one is dropped)."""
        self.fence_if_stale()
        for p, (epoch, _) in list(self.open.items()):
            if self.sim.logs[p].commit(self.id, epoch):
                self.sim.commits += 1
            else:
                del self.open[p]  # fenced by a newer marker
                self.sim.fenced += 1

    async def leave(self) -> None:
        """Drain everything, give it away (`release`), then say released."""
        self.open.clear()
        self.draining.clear()
        await self.read()
        self.open.clear()
        for _ in range(4):
            new = release(self.id, self.chain.table, self.statuses)
            if new is None or await self.chain.append(new):
                break
            self.sim.lost_races += 1
        await self.beat(released=True)
        self.released = True


class Sim:
    """Members sharing ``partitions`` partitions of one memory store."""

    def __init__(
        self,
        partitions: int = 8,
        *,
        ttl: float = 15.0,
        heartbeat: float = 3.0,
        drain: float = 0.0,
    ) -> None:
        self.partitions = partitions
        self.ttl_ms = round(ttl * 1000)
        self.heartbeat_ms = round(heartbeat * 1000)
        self.drain_ms = round(drain * 1000)
        self.objects = MemoryObjectStore()
        self.now_ms = 0
        self.clock = SimClock(self)
        self.members: list[Member] = []
        self.logs = [PartitionLog() for _ in range(partitions)]
        self.opens = itertools.count()
        self.violations: list[str] = []
        self.plans: list[tuple[str, int]] = []
        self.lost_races = 0
        self.commits = 0
        self.fenced = 0
        #: Opens the log refused (a stale epoch).
        self.refused = 0

    @property
    def now(self) -> float:
        """Seconds since the simulation started."""
        return self.now_ms / 1000

    def violate(self, what: str) -> None:
        """Record a broken invariant."""
        self.violations.append(f"t={self.now}: {what}")

    async def join(self, member_id: str | None = None) -> Member:
        """A new member; its first tick runs at once."""
        m = Member(self, member_id or f"m{len(self.members) + 1:03d}")
        self.members.append(m)
        await self._tick([m])
        return m

    def running(self) -> list[Member]:
        """The members that run now."""
        return [m for m in self.members if m.running]

    async def _tick(self, due: list[Member]) -> None:
        for m in due:
            await m.read()
        for m in due:
            await m.act()
            m.next_tick_ms = self.now_ms + self.heartbeat_ms

    async def step(self, seconds: float) -> None:
        """Move time; tick the members due (all read, then all act); commit; check."""
        self.now_ms += round(seconds * 1000)
        await self._tick([m for m in self.running() if self.now_ms >= m.next_tick_ms])
        for m in self.running():
            m.commit()
        self.check()

    async def advance(self, seconds: float, step: float = 0.5) -> None:
        """`step` until ``seconds`` have passed."""
        for _ in range(round(seconds / step)):
            await self.step(step)

    async def until(self, cond: Callable[[], bool], limit: float, step: float = 0.5) -> float:
        """Step until ``cond()``; the seconds it took (AssertionError past ``limit``)."""
        began = self.now
        while not cond():
            if self.now - began >= limit:
                raise AssertionError(f"not within {limit} s (t={self.now}): {self.describe()}")
            await self.step(step)
        return self.now - began

    def crash(self, m: Member) -> None:
        """kill -9: no more ticks or commits, nothing written."""
        m.crashed = True

    def pause(self, m: Member) -> None:
        """SIGSTOP: no ticks or commits until resumed."""
        m.paused = True

    def resume(self, m: Member) -> None:
        """SIGCONT: its clock jumps to now; it ticks at once if one is overdue."""
        m.paused = False

    async def blind(self, m: Member, other: Member) -> None:
        """From now, ``m`` reads ``other``'s object as it is now (a stale view:
        after a ttl, ``m`` judges ``other`` dead, whatever ``other`` does)."""
        try:
            m.objects.frozen[other.id] = await self.objects.get(member_name(other.id))
        except ObjectNotFound:
            m.objects.frozen[other.id] = None

    def unblind(self, m: Member) -> None:
        """``m`` reads every member's object as stored again."""
        m.objects.frozen.clear()

    def check(self) -> None:
        """Two believers of a partition opened it at increasing epochs."""
        for p in range(self.partitions):
            believers = sorted(
                (m.open[p][1], m.open[p][0], m.id)
                for m in self.members
                if not (m.crashed or m.released) and p in m.open and m.valid()
            )
            for (_, e1, m1), (_, e2, m2) in itertools.pairwise(believers):
                if e2 <= e1:
                    self.violate(f"p{p}: {m1} (epoch {e1}) and {m2} (epoch {e2}) both own it")

    def settled(self) -> bool:
        """Every partition owned by a running member (open, at the table's
        epoch, no move pending), balanced within one among running members."""
        running = {m.id: m for m in self.running()}
        if not running:
            return False
        table = next(iter(running.values())).chain.table
        for m in running.values():
            if m.chain.table.version > table.version:
                table = m.chain.table
        for p, slot in enumerate(table.slots):
            owner = running.get(slot.owner) if slot.owner is not None else None
            if owner is None or slot.next is not None:
                return False
            if owner.open.get(p, (None,))[0] != slot.epoch:
                return False
        loads = [len(table.owned_by(m)) for m in running]
        return max(loads) - min(loads) <= 1

    def describe(self) -> str:
        """The members and the newest table, for assertion messages."""
        states = {
            m.id: ("crashed" if m.crashed else "paused" if m.paused else "released")
            if not m.running
            else sorted(m.open)
            for m in self.members
        }
        heads = [m.chain.table for m in self.members]
        head = max(heads, key=lambda t: t.version) if heads else None
        return f"members {states}, table {head}"


def coordinators(sim: Sim) -> list[str]:
    """The running members that believe they coordinate (by their last reads)."""
    return [m.id for m in sim.running() if is_coordinator(m.id, m.statuses)]
