"""A deterministic simulation of a pool of `PoolMember`s sharing a partitioned store.

Every member has its own `PoolMember`, its own `MockClock` (kept at the
simulation's time while it runs, frozen while it is paused, so it jumps
when the member wakes), and its own gated handle on one shared `memory://`
store (`owner_sim.SimStore`: its I/O waits while the member is paused, and
forever once it crashed). Its ``on_acquire(p)`` opens a real `LogWriter` on
`PrefixedObjectStore(handle, partition_prefix(p))` at the member's
`PoolMember.epoch` of ``p``, with its `PoolMember.validity` as the writer's
validity check, so the log's open-marker fencing, its refusal of a stale
epoch (`StaleEpoch`) and the self-fence work underneath.

`PoolSim.step` moves time, lets every running member settle (both loops
parked on its clock, nothing in progress), lets every member commit once
to each partition it holds, and checks at every step that no two members
believe they hold one partition with valid heartbeats (on the simulation's
clock: a paused member still counts until its heartbeat goes stale).
`PoolSim.check_logs` reads every partition's log at the end: no log
object of a writer after a newer writer's open marker, and the open
markers' epochs never go backwards.
"""

from __future__ import annotations

import asyncio
import itertools
from dataclasses import dataclass, field

from owner_sim import START_MS, SimStore, Stepped, check_epochs

from durable.cluster.heartbeat import SELF_FENCE_FRACTION
from durable.cluster.manifest import partition_prefix
from durable.cluster.pool import PoolMember
from durable.errors import StaleEpoch, StoreError
from durable.store.clock import MockClock
from durable.store.log import LogWriter, WriteBatch
from durable.store.log.writer import LogOptions
from durable.store.objects.memory import MemoryObjectStore
from durable.store.objects.prefixed import PrefixedObjectStore

_names = itertools.count()


@dataclass
class Commit:
    """One durable commit: by ``member`` to ``partition`` through ``writer``."""

    member: str
    partition: int
    writer: bytes
    at_ms: int


@dataclass
class Partitions:
    """The engine's side, stood in: a real log writer per partition held."""

    member: SimMember
    writers: dict[int, LogWriter] = field(default_factory=dict)
    acquired: list[int] = field(default_factory=list)
    lost: list[tuple[int, str]] = field(default_factory=list)
    released: list[int] = field(default_factory=list)
    #: ``on_release`` drains until this is set (None: at once).
    drain: asyncio.Event | None = None
    #: Drains waiting for `drain`.
    blocked: int = 0
    #: Set whenever a drain starts waiting for `drain`.
    drain_blocked: asyncio.Event = field(default_factory=asyncio.Event)
    #: Partitions whose next ``on_acquire`` raises.
    fail_acquire: set[int] = field(default_factory=set)
    #: Partitions whose next ``on_acquire`` pauses the member (SIGSTOP) as
    #: it begins opening the log (the open goes on once it is resumed).
    pause_acquire: set[int] = field(default_factory=set)
    #: (partition, epoch) of every open the log refused (`StaleEpoch`).
    refused: list[tuple[int, int]] = field(default_factory=list)

    async def on_acquire(self, p: int) -> LogWriter:
        m = self.member
        if p in self.fail_acquire:
            self.fail_acquire.discard(p)
            raise RuntimeError(f"opening p{p} failed (scripted)")
        m.sim.acquiring(m, p)
        if p in self.pause_acquire:
            self.pause_acquire.discard(p)
            m.sim.pause(m)
        store = PrefixedObjectStore(m.store, partition_prefix(p))
        epoch = m.pool.epoch(p)
        try:
            writer = await LogWriter.open(store, LogOptions(checkpoint_on_close=False), epoch=epoch)
        except StaleEpoch:
            assert epoch is not None
            self.refused.append((p, epoch))
            raise
        writer.set_validity(lambda: m.pool.validity(p))
        self.writers[p] = writer
        self.acquired.append(p)
        return writer

    async def on_lose(self, p: int, reason: str) -> None:
        self.lost.append((p, reason))
        writer = self.writers.pop(p, None)
        if writer is not None:
            await writer.close()

    async def on_release(self, p: int) -> None:
        self.released.append(p)
        if self.drain is not None and not self.drain.is_set():
            self.blocked += 1
            self.drain_blocked.set()
            try:
                await self.drain.wait()
            finally:
                self.blocked -= 1
        writer = self.writers.pop(p, None)
        if writer is not None:
            await writer.close()

    async def commit(self) -> None:
        """One commit to each partition held (a refused one is not counted)."""
        for p, writer in list(self.writers.items()):
            value = f"{self.member.id}@{self.member.sim.now_ms}".encode()
            try:
                await writer.commit(WriteBatch().put(b"tick", value))
            except StoreError:
                continue
            self.member.sim.commits.append(
                Commit(self.member.id, p, writer.writer_id, self.member.sim.now_ms)
            )


@dataclass
class SimMember:
    """One member: its clock, its gated store, its pool membership, its partitions."""

    sim: PoolSim
    id: str
    clock: MockClock
    store: SimStore
    pool: PoolMember = field(init=False)
    parts: Partitions = field(init=False)
    paused: bool = False
    crashed: bool = False
    left: bool = False
    #: Set while paused (so that `PoolSim.settle` stops waiting for a member
    #: that paused itself mid-tick: `Partitions.pause_acquire`).
    stopped: asyncio.Event = field(default_factory=asyncio.Event)

    @property
    def running(self) -> bool:
        """Not paused, crashed or gone."""
        return not (self.paused or self.crashed or self.left)


class PoolSim(Stepped):
    """Members sharing ``partitions`` partitions of one `memory://` store."""

    def __init__(self, partitions: int = 8, *, ttl: float = 15.0, heartbeat: float = 3.0) -> None:
        self.partitions = partitions
        self.ttl = ttl
        self.heartbeat = heartbeat
        self.name = f"pool-sim-{next(_names)}"
        self.objects = MemoryObjectStore.named(self.name)
        self.now_ms = START_MS
        self.members: list[SimMember] = []
        #: The start time (sim clock) of each member's last successful heartbeat put.
        self.heartbeats: dict[str, int] = {}
        self.commits: list[Commit] = []
        #: (member, partition, time) of every ``on_acquire`` call.
        self.acquisitions: list[tuple[str, int, int]] = []
        self.violations: list[str] = []

    @property
    def now(self) -> float:
        """Seconds since the simulation started."""
        return (self.now_ms - START_MS) / 1000

    def member(self, member_id: str | None = None) -> SimMember:
        """A new member (not started), with an id above every earlier one."""
        mid = member_id or f"m{len(self.members) + 1:03d}"
        clock = MockClock(self.now_ms)
        store = SimStore(MemoryObjectStore.named(self.name), self, mid)  # type: ignore[arg-type]
        m = SimMember(self, mid, clock, store)
        m.parts = Partitions(m)
        m.pool = PoolMember(
            store,
            self.partitions,
            on_acquire=m.parts.on_acquire,
            on_lose=m.parts.on_lose,
            on_release=m.parts.on_release,
            clock=clock,
            ttl=self.ttl,
            heartbeat=self.heartbeat,
            member_id=mid,
        )
        self.members.append(m)
        return m

    async def join(self, member_id: str | None = None) -> SimMember:
        """A new member, started."""
        m = self.member(member_id)
        await m.pool.start()
        return m

    def running(self) -> list[SimMember]:
        """The members that run now."""
        return [m for m in self.members if m.running]

    def valid_now(self, m: SimMember) -> bool:
        """Whether ``m``'s heartbeat is valid on the simulation's clock."""
        last = self.heartbeats.get(m.id)
        return last is not None and self.now_ms - last <= self.ttl * 1000 * SELF_FENCE_FRACTION

    def believers(self, p: int) -> list[SimMember]:
        """Members (not crashed or gone) holding ``p`` on a heartbeat valid now."""
        return [
            m
            for m in self.members
            if not (m.crashed or m.left) and p in m.pool.owned and self.valid_now(m)
        ]

    def acquiring(self, m: SimMember, p: int) -> None:
        """``on_acquire(p)`` of ``m``: no other member may still hold ``p`` validly."""
        self.acquisitions.append((m.id, p, self.now_ms))
        others = [o.id for o in self.believers(p) if o is not m]
        if others:
            self.violations.append(f"t={self.now}: {m.id} opened p{p} while {others} held it")

    async def settle(self) -> None:
        """Until every running member is parked: both loops asleep on its
        clock, no decision, drain or loss in progress."""
        for _ in range(3):
            for m in self.running():
                async with asyncio.timeout(5):
                    if not await self._parked(m):
                        continue  # it paused itself mid-tick
                    if m.parts.blocked:  # a drain the test holds: let the rest run
                        for _ in range(50):
                            await asyncio.sleep(0)
                    else:
                        await m.pool.wait_idle()

    @staticmethod
    async def _parked(m: SimMember) -> bool:
        """Wait until both of ``m``'s loops sleep on its clock (True), or it
        pauses (False)."""
        sleeping = asyncio.ensure_future(m.clock.wait_for_sleepers(2))
        stopped = asyncio.ensure_future(m.stopped.wait())
        try:
            await asyncio.wait({sleeping, stopped}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            sleeping.cancel()
            stopped.cancel()
        return not m.paused

    async def step(self, seconds: float) -> None:
        """Move time by ``seconds``; settle; let every member commit; check."""
        self.now_ms += round(seconds * 1000)
        for m in self.running():
            m.clock.set(self.now_ms)
        await self.settle()
        for m in self.running():
            await m.parts.commit()
        await self.settle()
        for p in range(self.partitions):
            held = self.believers(p)
            if len(held) > 1:
                self.violations.append(f"t={self.now}: p{p} held by {[m.id for m in held]}")

    async def crash(self, m: SimMember) -> None:
        """Kill ``m`` (kill -9): no more I/O, nothing written; its writers stop."""
        m.crashed = True
        m.store.gate.clear()
        await m.pool.abort()
        for writer in m.parts.writers.values():
            writer.stop(StoreError("crashed"))

    async def leave(self, m: SimMember) -> None:
        """``m`` leaves gracefully (`PoolMember.release`)."""
        await m.pool.release()
        m.left = True

    def pause(self, m: SimMember) -> None:
        """SIGSTOP ``m``: its clock stops, its I/O waits."""
        m.paused = True
        m.stopped.set()
        m.store.gate.clear()

    def resume(self, m: SimMember) -> None:
        """SIGCONT ``m``: its clock jumps to now, then its I/O goes on."""
        m.clock.set(self.now_ms)
        m.paused = False
        m.stopped.clear()
        m.store.gate.set()

    def newest_table_holders(self) -> dict[int, str | None]:
        """Partition -> owner in the newest table any running member read."""
        tables = [m.pool.table for m in self.running()]
        table = max(tables, key=lambda t: t.version)
        return {p: s.owner if s.next is None else None for p, s in enumerate(table.slots)}

    def settled(self) -> bool:
        """Every partition held by exactly one running member, the one the newest
        table names with no move pending; loads within one of each other."""
        running = self.running()
        if not running:
            return False
        owners = self.newest_table_holders()
        for p in range(self.partitions):
            holders = [m.id for m in running if p in m.pool.owned]
            if holders != [owners[p]]:
                return False
        loads = [len(m.pool.owned) for m in running]
        return max(loads) - min(loads) <= 1

    def describe(self) -> str:
        """Every member's state and partitions, for assertion messages."""
        return str(
            {
                m.id: "crashed"
                if m.crashed
                else "left"
                if m.left
                else ("paused " if m.paused else "") + str(sorted(m.pool.owned))
                for m in self.members
            }
        )

    async def check_logs(self) -> int:
        """Every partition's log: no object of a writer after a newer writer's
        open marker; the number of commits in all logs."""
        total = 0
        for p in range(self.partitions):
            total += await check_epochs(PrefixedObjectStore(self.objects, partition_prefix(p)))
        return total

    async def close(self) -> None:
        """Stop every member (abort: no writes) and forget the store."""
        for m in self.members:
            m.store.gate.set()
            await m.pool.abort()
            for writer in m.parts.writers.values():
                writer.stop(StoreError("simulation over"))
        MemoryObjectStore.forget(self.name)
