"""A deterministic simulation of several members of one store, in one process.

Every member has its own `Ownership`, its own `MockClock` (kept at the
simulation's time while it runs, frozen while it is paused: a paused
process sees no time pass, then its clock jumps when it wakes, like after
SIGSTOP/SIGCONT), and its own handle on one shared `memory://` store behind
a gate (`SimStore`) that blocks its I/O while it is paused and forever once
it crashed. The "store owner" the ownership drives is `StoreOwner`: its
``on_acquire`` opens a real `LogWriter` on the shared store, so the log's
open-marker fencing works underneath; its `StoreOwner.commit` checks the
ownership's validity first, as `LogWriter.set_validity` does.

`Sim.advance` moves time step by step, lets every running member settle
(its loops parked on its clock, no transition in progress), lets
every owner try a commit, and checks the invariants at every step.
"""

from __future__ import annotations

import asyncio
import itertools
from collections import Counter
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from durable.cluster.members import MEMBERS_PREFIX
from durable.cluster.owner import SELF_FENCE_FRACTION, OwnerLock, Ownership, State
from durable.errors import ObjectStoreError, StoreError
from durable.store.clock import MockClock
from durable.store.log import LogWriter, WriteBatch
from durable.store.log.format import LOG_PREFIX, decode_log
from durable.store.log.writer import LogOptions
from durable.store.objects.base import ObjectStore
from durable.store.objects.memory import MemoryObjectStore

START_MS = 1_700_000_000_000
_names = itertools.count()


class SimStore(ObjectStore):
    """One member's handle on the shared store: gated, counted, scriptable."""

    def __init__(self, inner: ObjectStore, sim: Sim, member_id: str) -> None:
        self.inner = inner
        self.sim = sim
        self.member_id = member_id
        self.guarantees = inner.guarantees
        self.gate = asyncio.Event()
        self.gate.set()
        self.calls: Counter[str] = Counter()
        #: Puts of this member's object that fail before reaching the store.
        self.failing_puts = False
        #: Awaited before each create of a name starting with a key's prefix.
        self.before_create: dict[str, Callable[[], Awaitable[None]]] = {}
        self._entered: dict[str, asyncio.Event] = {}

    def entered(self, op: str) -> asyncio.Event:
        """An event set when the next call of ``op`` enters (before the gate)."""
        return self._entered.setdefault(op, asyncio.Event())

    @property
    def url(self) -> str:
        return self.inner.url

    async def _enter(self, op: str) -> None:
        self.calls[op] += 1
        if (event := self._entered.pop(op, None)) is not None:
            event.set()
        await self.gate.wait()

    async def get(self, name: str) -> bytes:
        await self._enter("get")
        return await self.inner.get(name)

    async def put(self, name: str, data: bytes) -> None:
        started = self.sim.now_ms
        await self._enter("put")
        if self.failing_puts and name.startswith(MEMBERS_PREFIX):
            raise ObjectStoreError("simulated put failure", name=name)
        await self.inner.put(name, data)
        if name == MEMBERS_PREFIX + self.member_id:
            self.sim.heartbeats[self.member_id] = max(
                self.sim.heartbeats.get(self.member_id, started), started
            )

    async def create(self, name: str, data: bytes) -> None:
        await self._enter("create")
        for prefix, hook in list(self.before_create.items()):
            if name.startswith(prefix):
                del self.before_create[prefix]
                await hook()
        await self.inner.create(name, data)

    async def list(self, prefix: str) -> list[str]:
        await self._enter("list")
        return await self.inner.list(prefix)

    async def delete(self, names: Iterable[str]) -> None:
        doomed = list(names)
        await self._enter("delete")
        await self.inner.delete(doomed)


class HostLocks:
    """Host locks shared by the members "on one host" (like flock: a
    process's locks go when it dies; `Ownership.abort` lets them go)."""

    def __init__(self) -> None:
        self.holders: dict[str, str] = {}

    def lock_fn(self, member_id: str) -> Callable[[str], Awaitable[OwnerLock | None]]:
        async def lock(name: str) -> OwnerLock | None:
            await asyncio.sleep(0)
            if name in self.holders:
                return None
            self.holders[name] = member_id
            return _HeldLock(self, name, member_id)

        return lock


@dataclass
class _HeldLock:
    locks: HostLocks
    name: str
    member_id: str
    released: bool = False

    def release(self) -> None:
        assert not self.released, "a lock released twice"
        self.released = True
        if self.locks.holders.get(self.name) == self.member_id:
            del self.locks.holders[self.name]


class _Writer:
    """A `LogWriter` as `OwnerWriter`, with `stop` (part A adds `LogWriter.stop`)."""

    def __init__(self, writer: LogWriter) -> None:
        self.writer = writer

    @property
    def failure(self) -> StoreError | None:
        return self.writer.failure

    def stop(self, error: StoreError) -> None:
        stop = getattr(self.writer, "stop", None)
        if stop is not None:
            stop(error)
        elif self.writer.failure is None:
            self.writer._fail(error, [])

    def add_stop_callback(self, fn: Callable[[StoreError], object]) -> None:
        self.writer.add_stop_callback(fn)


@dataclass
class StoreOwner:
    """The engine's side, stood in: a real log writer while the member owns."""

    member: SimMember
    writer: LogWriter | None = None
    acquired: int = 0
    lost: list[str] = field(default_factory=list)
    released: int = 0
    #: Make the next ``on_acquire`` calls raise this.
    fail_acquire: list[BaseException] = field(default_factory=list)
    #: ``on_release`` drains until this is set (None: at once).
    drain: asyncio.Event | None = None
    #: Set when ``on_release`` begins.
    draining: asyncio.Event = field(default_factory=asyncio.Event)

    async def on_acquire(self) -> _Writer:
        self.member.sim.acquiring(self.member)
        if self.fail_acquire:
            raise self.fail_acquire.pop(0)
        writer = await LogWriter.open(self.member.store, LogOptions(checkpoint_on_close=False))
        self.writer = writer
        self.acquired += 1
        return _Writer(writer)

    async def on_lose(self, reason: str) -> None:
        self.lost.append(reason)
        writer, self.writer = self.writer, None
        if writer is not None:
            await writer.close()

    async def on_release(self) -> None:
        self.released += 1
        self.draining.set()
        if self.drain is not None:
            await self.drain.wait()
        writer, self.writer = self.writer, None
        if writer is not None:
            await writer.close()

    async def commit(self) -> bool:
        """One commit; False if refused: when the ownership is not valid, it
        stops the writer first, as `LogWriter.set_validity` makes the writer
        do; or when the writer fails (`Fenced` by a newer writer's marker)."""
        writer = self.writer
        if writer is None:
            return False
        reason = self.member.ownership.validity()
        if reason is not None:
            _Writer(writer).stop(StoreError(f"self-fenced: {reason}"))
            return False
        value = f"{self.member.id}@{self.member.sim.now_ms}".encode()
        try:
            await writer.commit(WriteBatch().put(b"tick", value))
        except StoreError:
            return False
        self.member.sim.commits.append((self.member.id, self.member.sim.now_ms))
        return True


@dataclass
class SimMember:
    """One member: its clock, its gated store, its ownership, its store owner."""

    sim: Sim
    id: str
    clock: MockClock
    store: SimStore
    ownership: Ownership = field(init=False)
    owner: StoreOwner = field(init=False)
    takeover: bool = False
    paused: bool = False
    crashed: bool = False

    @property
    def running(self) -> bool:
        """Started, not paused, crashed or released."""
        return not (self.paused or self.crashed) and self.ownership.state is not State.CLIENT

    @property
    def owns(self) -> bool:
        """It believes it owns the store: owner with a writer, valid on its clock."""
        return (
            self.ownership.state is State.OWNER
            and self.owner.writer is not None
            and self.ownership.validity() is None
        )


class Stepped:
    """Time moved by `step`: `advance` and `until`, shared by the simulations."""

    @property
    def now(self) -> float:
        """Seconds since the simulation started."""
        raise NotImplementedError

    async def step(self, seconds: float) -> None:
        """Move time by ``seconds`` and let everything settle."""
        raise NotImplementedError

    def describe(self) -> str:
        """What a failed `until` reports besides the time."""
        return ""

    async def advance(self, seconds: float, step: float = 0.5) -> None:
        """`step` until ``seconds`` have passed."""
        for _ in range(round(seconds / step)):
            await self.step(step)

    async def until(self, cond: Callable[[], bool], limit: float, step: float = 0.5) -> float:
        """Step until ``cond()``; the seconds it took (AssertionError past ``limit``)."""
        began = self.now
        while not cond():
            if self.now - began > limit:
                detail = self.describe()
                raise AssertionError(
                    f"not within {limit} s (t={self.now})" + (f": {detail}" if detail else "")
                )
            await self.step(step)
        return self.now - began


class Sim(Stepped):
    """Members of one `memory://` store, driven step by step on mock time."""

    def __init__(
        self,
        *,
        ttl: float = 15.0,
        heartbeat: float = 3.0,
        locks: HostLocks | None = None,
        check: bool = True,
    ) -> None:
        self.ttl = ttl
        self.heartbeat = heartbeat
        self.locks = locks
        self.check = check
        self.name = f"owner-sim-{next(_names)}"
        self.objects = MemoryObjectStore.named(self.name)
        self.now_ms = START_MS
        self.members: list[SimMember] = []
        #: The start time (sim clock) of each member's last successful heartbeat put.
        self.heartbeats: dict[str, int] = {}
        #: (member, time) of every durable commit of a store owner.
        self.commits: list[tuple[str, int]] = []
        #: (member, time) of every ``on_acquire`` call.
        self.acquisitions: list[tuple[str, int]] = []
        self.violations: list[str] = []

    @property
    def now(self) -> float:
        """Seconds since the simulation started."""
        return (self.now_ms - START_MS) / 1000

    def member(self, *, takeover: bool = False, member_id: str | None = None) -> SimMember:
        """A new member (not started), with an id above every earlier one."""
        mid = member_id or f"m{len(self.members) + 1:03d}"
        clock = MockClock(self.now_ms)
        store = SimStore(MemoryObjectStore.named(self.name), self, mid)
        m = SimMember(self, mid, clock, store, takeover=takeover)
        m.owner = StoreOwner(m)
        m.ownership = Ownership(
            store,
            on_acquire=m.owner.on_acquire,
            on_lose=m.owner.on_lose,
            on_release=m.owner.on_release,
            clock=clock,
            ttl=self.ttl,
            heartbeat=self.heartbeat,
            takeover=takeover,
            lock=self.locks.lock_fn(mid) if self.locks is not None else None,
            member_id=mid,
            host="sim-host",
        )
        self.members.append(m)
        return m

    async def join(self, *, takeover: bool = False) -> SimMember:
        """A new member, started (it decided: owner or standby)."""
        m = self.member(takeover=takeover)
        await m.ownership.start()
        return m

    def running(self) -> list[SimMember]:
        """The members that run now."""
        return [m for m in self.members if m.running]

    def owners(self) -> list[SimMember]:
        """Running members that believe they own the store."""
        return [m for m in self.running() if m.owns]

    def valid_now(self, m: SimMember) -> bool:
        """Whether ``m``'s ownership is valid on the simulation's clock (a
        paused member's own clock is frozen, its heartbeat is not)."""
        last = self.heartbeats.get(m.id)
        return (
            m.ownership.state is State.OWNER
            and last is not None
            and self.now_ms - last <= self.ttl * 1000 * SELF_FENCE_FRACTION
        )

    def acquiring(self, m: SimMember) -> None:
        """``on_acquire`` of ``m`` was called: no other member may still own."""
        self.acquisitions.append((m.id, self.now_ms))
        if m.takeover:
            return
        for other in self.members:
            if other is not m and not other.crashed and self.valid_now(other):
                self.violations.append(
                    f"t={self.now}: {m.id} acquired while {other.id} still owned validly"
                )

    async def settle(self) -> None:
        """Until every running member is parked: its loops (heartbeat, watch,
        and with host locks the lock poll) asleep on its clock, no
        acquisition, loss or release in progress."""
        loops = 2 if self.locks is None else 3
        for _ in range(3):
            for m in self.running():
                async with asyncio.timeout(5):
                    await m.clock.wait_for_sleepers(loops)
                    await m.ownership.wait_idle()

    async def step(self, seconds: float) -> None:
        """Move time by ``seconds``; settle; let every owner commit; check."""
        self.now_ms += round(seconds * 1000)
        for m in self.running():
            m.clock.set(self.now_ms)
        await self.settle()
        for m in self.running():
            await m.owner.commit()
        await self.settle()
        if self.check:
            self.check_invariants()

    async def crash(self, m: SimMember) -> None:
        """Kill ``m`` (kill -9): no more I/O, no release; its locks go."""
        m.crashed = True
        m.store.gate.clear()
        await m.ownership.abort()
        if m.owner.writer is not None:
            _Writer(m.owner.writer).stop(StoreError("crashed"))

    def pause(self, m: SimMember) -> None:
        """SIGSTOP ``m``: its clock stops, its I/O waits."""
        m.paused = True
        m.store.gate.clear()

    def resume(self, m: SimMember) -> None:
        """SIGCONT ``m``: its clock jumps to now, then its I/O goes on."""
        m.clock.set(self.now_ms)
        m.paused = False
        m.store.gate.set()

    def check_invariants(self) -> None:
        """At most one member believes it owns the store (a paused one if its
        heartbeat is valid on the simulation's clock), unless a
        ``takeover=True`` member just fenced one; and no running member
        believes it owns on a heartbeat that is stale on the simulation's clock."""
        believers: list[SimMember] = []
        for m in self.members:
            if m.crashed:
                continue
            if m.paused and self.valid_now(m):
                believers.append(m)
            elif m.running and m.owns:
                believers.append(m)
                if not self.valid_now(m):
                    self.violations.append(f"t={self.now}: {m.id} owns on a stale heartbeat")
        if len(believers) > 1 and not any(m.takeover for m in believers):
            self.violations.append(f"t={self.now}: {[m.id for m in believers]} all own")

    async def log_writers(self) -> list[tuple[int, bytes, bool]]:
        """(seq, writer id, marker) of every log object, in order."""
        return await log_writers(self.objects)

    async def check_epochs(self) -> None:
        """No log object of a writer after a newer writer's open marker."""
        await check_epochs(self.objects)

    async def close(self) -> None:
        """Stop every member (abort: no writes) and forget the store."""
        for m in self.members:
            m.store.gate.set()
            await m.ownership.abort()
            if m.owner.writer is not None:
                _Writer(m.owner.writer).stop(StoreError("simulation over"))
        MemoryObjectStore.forget(self.name)


async def log_writers(objects: ObjectStore) -> list[tuple[int, bytes, bool]]:
    """(seq, writer id, marker) of every log object of the store at ``objects``, in order."""
    out = []
    for name in await objects.list(LOG_PREFIX):
        obj = decode_log(name, await objects.get(name))
        out.append((obj.seq, obj.writer, obj.marker))
    return out


async def check_epochs(objects: ObjectStore) -> int:
    """No log object of a writer after a newer writer's open marker, and no
    open marker at an epoch below an earlier one's (epochs never go backwards),
    in the store at ``objects``; the number of commits (non-marker objects)."""
    current: bytes | None = None
    retired: set[bytes] = set()
    commits = 0
    newest: int | None = None
    for name in await objects.list(LOG_PREFIX):
        obj = decode_log(name, await objects.get(name))
        seq, writer = obj.seq, obj.writer
        if obj.marker:
            if current is not None and current != writer:
                retired.add(current)
            current = writer
            if obj.epoch is not None:
                assert newest is None or obj.epoch >= newest, (
                    f"log object {seq}: an open marker at epoch {obj.epoch} after one at {newest}"
                )
                newest = obj.epoch
        else:
            commits += 1
        assert writer not in retired, f"log object {seq} by a fenced writer"
        assert writer == current, f"log object {seq} by a writer without a marker"
    return commits


def states(sim: Sim) -> dict[str, Any]:
    """Every member's state, for assertion messages."""
    return {m.id: m.ownership.state.value for m in sim.members}
