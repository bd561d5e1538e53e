"""`Ownership`: one worker process's membership of a store, and whether it owns it.

A worker-role engine is a *member* of its store (`durable.cluster.members`):
from `Ownership.start` to `Ownership.release` it puts its member object
every ``heartbeat``, and it is in one of two states, `State.STANDBY` or
`State.OWNER` (`State.CLIENT` before it starts and once it released). A
standby reads the owner chain (`durable.cluster.chain`, one GET of the next
version per heartbeat) and the member objects it needs (the named owner's
and those with lower ids), judges them with `Liveness` on its own clock, and
acquires the store when `durable.cluster.decide.decide` says so: it creates
the next chain version naming itself (losing that create means another
member acted: it re-reads and decides again), then calls ``on_acquire``,
which opens the store's queue (whose open marker fences any older writer:
safety rests on that, never on the chain) and starts everything an owner
runs. ``on_acquire`` returns the log writer, seen through `OwnerWriter`.

The owner keeps its ownership valid by heartbeating: `Ownership.validity`
(which the engine hands to the writer, checked before every commit) names a
reason once the last successful member put *started* more than 0.8 ttl ago
on this member's clock, and the heartbeat loop then stops the writer
(``writer.stop(self_fenced(reason))``) before doing anything else. An
observer judges a member dead only after seeing its object unchanged for a
full ttl since it last changed, so an owner stops committing before any
standby may take over (0.2 ttl to spare for clocks that run at different
rates, and for the time from a validity check to its commit's create).

The owner loses the store when its writer stops (fenced by a newer owner's
open marker, self-fenced, or failed), or when the chain names another
member: the state becomes standby at once, then ``on_lose(reason)`` stops
the engine's workers and closes its queue, the host lock is let go, and if
the chain still names this member it writes a release version, so that
the lowest live standby (perhaps this member again) acquires. On a local
directory the owner also holds the host lock `OWNER_LOCK` (through the
``lock`` callback): a standby on the same host tries it every `LOCK_POLL`
seconds while the owner says it holds it there, and one that gets it knows
at once that the owner let it go (a process's locks die with it), instead
of waiting a ttl.

`Ownership.release` (on close) calls ``on_release`` (the engine drains and
closes its queue with a final checkpoint), then writes the release version,
puts the member object with ``released: true`` and lets go of the lock: a
standby sees the release at its next poll, within one heartbeat.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import inspect
import math
import socket
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, Protocol

from durable import events
from durable._logging import get_logger
from durable.cluster.chain import ChainVersion, OwnerChain, Reason
from durable.cluster.decide import Decision, decide
from durable.cluster.heartbeat import (
    SELF_FENCE_FRACTION,
    Heartbeat,
    beat_forever,
    forget_departed,
    observe_member,
    stop_tasks,
    tick_forever,
)
from durable.cluster.members import (
    MEMBERS_PREFIX,
    Liveness,
    Role,
    Status,
    member_id_of,
    member_name,
)
from durable.errors import (
    InvalidArgument,
    MissingGuarantee,
    ObjectStoreError,
    StoreClosed,
    StoreError,
)
from durable.store.clock import Clock, SystemClock
from durable.store.ids import IdGenerator
from durable.store.log.retry import DEFAULT_RETRY_SECONDS, retry_transient
from durable.store.objects.base import Guarantee, ObjectStore

__all__ = [
    "DEFAULT_HEARTBEAT",
    "DEFAULT_TTL",
    "OWNER_LOCK",
    "SELF_FENCE_FRACTION",
    "OwnerLock",
    "OwnerWriter",
    "Ownership",
    "State",
    "check_timing",
]

log = get_logger("durable.cluster")

#: Seconds without a change after which a member is dead.
DEFAULT_TTL = 15.0
#: Seconds between two puts of a member object.
DEFAULT_HEARTBEAT = 3.0
#: The host lock an owner holds on stores that have one (a local directory).
OWNER_LOCK = "cluster/owner.lock"
#: Seconds between two tries of the host lock by a standby on the owner's
#: host (a try is a non-blocking ``flock``: a system call, no I/O).
LOCK_POLL = 0.05


def check_timing(ttl: float, heartbeat: float) -> tuple[float, float]:
    """Check ``ttl`` and ``heartbeat`` (seconds); `InvalidArgument` naming the fix."""
    for name, value in (("ttl", ttl), ("heartbeat", heartbeat)):
        if (
            isinstance(value, bool)
            or not isinstance(value, int | float)
            or not math.isfinite(value)
            or value <= 0
        ):
            raise InvalidArgument(f"{name} must be a number of seconds > 0, got {value!r}")
    if heartbeat >= ttl / 2:
        raise InvalidArgument(
            f"heartbeat ({heartbeat} s) must be less than half the ttl ({ttl} s), so that a "
            "live member renews its heartbeat at least twice per ttl: lower heartbeat or "
            f"raise ttl (the defaults are ttl={DEFAULT_TTL}, heartbeat={DEFAULT_HEARTBEAT})"
        )
    return float(ttl), float(heartbeat)


class State(enum.Enum):
    """Where a member stands."""

    #: Not a member (before `Ownership.start`, after release or abort).
    CLIENT = "client"
    #: A member that does not own the store; it acquires when the owner goes.
    STANDBY = "standby"
    #: The member that owns the store.
    OWNER = "owner"


class OwnerWriter(Protocol):
    """What `Ownership` needs of the writer ``on_acquire`` opened (a `LogWriter`)."""

    @property
    def failure(self) -> StoreError | None:
        """Why the writer stopped, or None while it works."""
        ...

    def stop(self, error: StoreError) -> None:
        """Stop the writer now with ``error``: every later commit raises it."""
        ...

    def add_stop_callback(self, fn: Callable[[StoreError], object]) -> None:
        """Call ``fn(failure)`` once, when the writer stops."""
        ...


class OwnerLock(Protocol):
    """A held host lock (`ObjectStore.try_lock`'s result)."""

    def release(self) -> object:
        """Let go of the lock (may return an awaitable)."""
        ...


#: ``lock(name)``: take the host lock ``name`` without waiting; None if held elsewhere.
LockFn = Callable[[str], Awaitable[OwnerLock | None]]


class Ownership:
    """The membership of one worker process in the store at ``objects``.

    Callbacks (the engine's): ``on_acquire()`` opens the queue, hands
    `validity` to its writer, starts runtimes, services and the inbox
    applier, and returns the writer; if it raises, the ownership is let go
    again and this member stays a standby (backing off before it tries
    again). ``on_lose(reason)`` stops the workers and services and closes
    the queue (its writer has stopped: no checkpoint). ``on_release()``
    drains and closes the queue with a final checkpoint (from `release`).

    ``lock`` takes the store's host lock (`OWNER_LOCK`); pass None where
    the store has none (object stores: liveness by ttl only).
    ``self_fenced(reason)`` builds the error the writer is stopped with
    when ownership ends under it (default: `StoreClosed` naming the
    reason). ``member_id`` (default: a new ULID) and ``host`` (default: the
    host name) are for tests.
    """

    def __init__(
        self,
        objects: ObjectStore,
        *,
        on_acquire: Callable[[], Awaitable[OwnerWriter]],
        on_lose: Callable[[str], Awaitable[None]],
        on_release: Callable[[], Awaitable[None]],
        clock: Clock | None = None,
        ttl: float = DEFAULT_TTL,
        heartbeat: float = DEFAULT_HEARTBEAT,
        takeover: bool = False,
        lock: LockFn | None = None,
        self_fenced: Callable[[str], StoreError] | None = None,
        member_id: str | None = None,
        host: str | None = None,
    ) -> None:
        ttl, heartbeat = check_timing(ttl, heartbeat)
        self.objects = objects
        self.clock: Clock = clock if clock is not None else SystemClock()
        self.ttl = ttl
        self.heartbeat = heartbeat
        self.member_id = member_id if member_id is not None else IdGenerator(self.clock).next()
        self.host = host if host is not None else socket.gethostname()
        self._on_acquire = on_acquire
        self._on_lose = on_lose
        self._on_release = on_release
        self._lock_fn = lock
        self._self_fenced = self_fenced or (lambda reason: StoreClosed(objects.url, reason))
        self._takeover = takeover
        self._ttl_ms = round(ttl * 1000)
        self._beat = Heartbeat(objects, self.member_id, self.clock, self._ttl_ms)
        self._chain = OwnerChain(objects)
        self._live = Liveness(self._ttl_ms)
        self._state = State.CLIENT
        self._started = False
        self._releasing = False
        self._writer: OwnerWriter | None = None
        self._held: OwnerLock | None = None
        self._transition = asyncio.Lock()
        self._changed = asyncio.Event()
        self._loops: list[asyncio.Task[None]] = []
        self._bg: set[asyncio.Task[None]] = set()
        self._failures = 0
        self._retry_at_ms = 0
        self._log = log.bind(member=self.member_id, url=objects.url)

    # ------------------------------------------------------------- public

    @property
    def state(self) -> State:
        """Where this member stands now."""
        return self._state

    @property
    def head(self) -> ChainVersion | None:
        """The newest owner-chain version this member has read."""
        return self._chain.head

    def validity(self) -> str | None:
        """None while this member may commit as the owner; else why not.

        Cheap and in memory, for `LogWriter.set_validity`: a reason once
        the last successful heartbeat put started more than 0.8 ttl ago on
        this member's clock, or once the member no longer owns the store.
        """
        if self._state is not State.OWNER:
            return f"member {self.member_id} does not own the store ({self._state.value})"
        return self._beat.staleness("the store")

    async def start(self) -> None:
        """Join as a member and make the first decision: on return this member
        owns the store (``on_acquire`` returned) or is a standby.

        Raises the store's error if the first reads or writes fail, and
        ``on_acquire``'s if it fails at once (the member has then left).
        """
        if self._started:
            raise InvalidArgument(f"Ownership of member {self.member_id} was started already")
        if Guarantee.ATOMIC_CREATE not in self.objects.guarantees:
            raise MissingGuarantee(self.objects.url, Guarantee.ATOMIC_CREATE.value)
        self._started = True
        self._set_state(State.STANDBY)
        try:
            # Transient store errors at the start are retried like the log's
            # reads at open (a decision is safe to make again: it re-reads).
            await retry_transient(self._put, member_name(self.member_id), DEFAULT_RETRY_SECONDS)
            self._loops.append(
                self._task(
                    beat_forever(
                        self.clock, self.heartbeat, self._put, self._fence_if_stale, self._log
                    ),
                    "heartbeat",
                )
            )

            async def first_decision() -> None:
                async with self._transition:
                    await self._tick(first=True)

            await retry_transient(first_decision, "the owner chain", DEFAULT_RETRY_SECONDS)
        except BaseException:
            await self._leave()
            raise
        self._loops.append(
            self._task(
                tick_forever(
                    self.clock,
                    self.heartbeat,
                    lambda: self._releasing,
                    self._transition,
                    self._tick,
                    self._log,
                    "ownership",
                ),
                "watch",
            )
        )
        if self._lock_fn is not None:
            self._loops.append(self._task(self._lock_loop(), "host lock"))

    async def release(self) -> None:
        """Leave (on close): if this member owns the store, ``on_release()``
        drains and closes the queue first; then the release version, the
        member object with ``released: true``, the host lock. Idempotent.

        Raises ``on_release``'s error, after releasing all the same.
        """
        if self._releasing or not self._started:
            return
        self._releasing = True
        try:
            await self._release()
        except BaseException:
            # Cancelled (a caller's timeout) or failed part-way: leave as a crash
            # would, but say so, or the heartbeat would keep this member alive
            # (and its standbys waiting) for ever.
            await self._abandon(f"member {self.member_id} stopped while leaving")
            raise

    async def _release(self) -> None:
        """`release` once it began."""
        while self._bg:  # a loss in progress: ``on_lose`` first
            await asyncio.gather(*self._bg, return_exceptions=True)
        error: Exception | None = None
        async with self._transition:
            if self._state is State.OWNER:
                try:
                    await self._on_release()
                except Exception as e:  # the release is written all the same
                    self._log.error("draining for release failed", error=repr(e))
                    error = e
            self._writer = None
            self._set_state(State.CLIENT)
            await stop_tasks(self._loops, self._bg)
            await self._let_go(released=True)
        self._log.info("released membership")
        if error is not None:
            raise error

    async def _abandon(self, reason: str) -> None:
        """Stop the writer (no callback: the engine is closing) and every task,
        then let go as a release does (best effort), so a standby takes over
        at once: the stopped writer commits nothing more."""
        writer, self._writer = self._writer, None
        if writer is not None and writer.failure is None:
            writer.stop(self._self_fenced(reason))
        self._set_state(State.CLIENT)
        await stop_tasks(self._loops, self._bg)
        await self._let_go(released=True)
        self._log.warning("left abruptly", reason=reason)

    async def abort(self) -> None:
        """Stop every task of this member at once and write nothing, like a
        process that died (others judge it dead after the ttl; its host
        lock is let go). ``on_lose`` is not called."""
        self._releasing = True
        self._writer = None
        self._set_state(State.CLIENT)
        await stop_tasks(self._loops, self._bg)
        self._drop_lock()

    async def wait_owner(self) -> None:
        """Wait until this member owns the store; `StoreClosed` once it left."""
        while self._state is not State.OWNER or self._writer is None:
            if self._releasing:
                raise StoreClosed(self.objects.url, f"member {self.member_id} left")
            changed = self._changed
            await changed.wait()

    async def wait_idle(self) -> None:
        """Wait until no acquisition, loss or release is in progress."""
        while self._bg:
            await asyncio.gather(*self._bg, return_exceptions=True)
        async with self._transition:
            pass

    def __repr__(self) -> str:
        return f"Ownership(member={self.member_id!r}, {self._state.value})"

    # -------------------------------------------------------------- loops

    async def _lock_loop(self) -> None:
        """A standby on the owner's host: try the host lock every `LOCK_POLL`
        s, and decide at once when it is free (the owner's process is gone),
        not at the next heartbeat."""
        assert self._lock_fn is not None
        while True:
            await self.clock.sleep(LOCK_POLL)
            if self._releasing:
                return
            if not self._owner_locks_here():
                continue
            try:
                async with self._transition:
                    if not self._owner_locks_here():
                        continue
                    self._held = await self._lock_fn(OWNER_LOCK)
                    if self._held is not None:
                        await self._tick()  # acquires, or gives the lock back
            except ObjectStoreError as e:
                self._log.warning("ownership check failed", error=str(e))
            except Exception as e:  # a bug: keep the member alive, say why
                self._log.error("ownership check crashed", error=repr(e))

    def _owner_locks_here(self) -> bool:
        """A standby that holds no lock, and the owner the chain names last
        said it holds the host lock on this member's host."""
        head = self._chain.head
        if self._state is not State.STANDBY or self._writer is not None or self._held is not None:
            return False
        if head is None or head.owner in (None, self.member_id):
            return False
        assert head.owner is not None
        record = self._live.record(head.owner)
        return record is not None and record.role is Role.OWNER and record.locked_on == self.host

    async def _tick(self, *, first: bool = False) -> None:
        if self._releasing:
            return
        if self._state is State.OWNER:
            await self._owner_tick()
            return
        if self._writer is not None:
            return  # a loss in progress (`_after_loss`): no acquisition before ``on_lose``
        head = await (self._chain.load() if first else self._chain.poll())
        statuses = await self._observe(head, list_all=first)
        let_go = await self._probe_lock(head, statuses)
        while True:
            decision = decide(
                self.member_id,
                head,
                statuses,
                takeover=self._takeover,
                owner_let_go_lock=let_go,
                owning=self._owning(statuses),
            )
            if not decision.acquire or self.clock.now_ms() < self._retry_at_ms:
                if self._state is State.STANDBY:
                    self._drop_lock()
                return
            if await self._acquire(decision, first=first):
                return
            head, let_go = self._chain.head, False  # lost the race: decide again

    async def _owner_tick(self) -> None:
        self._fence_if_stale()
        head = await self._chain.poll()
        if head is not None and head.owner != self.member_id:
            self._lose(
                self._writer,
                f"the owner chain names member {head.owner} since version {head.version}",
                stop=True,
            )
            return
        if self._lock_fn is not None and self._held is None:
            self._held = await self._lock_fn(OWNER_LOCK)  # a takeover waits for it

    # ------------------------------------------------------------ observe

    async def _observe(self, head: ChainVersion | None, *, list_all: bool) -> dict[str, Status]:
        """Read the named owner's member object and those with lower ids;
        LIST the members too when the owner may be gone (or on ``list_all``)."""
        me, owner = self.member_id, head.owner if head is not None else None
        targets = {m for m in self._live.known() if m < me}
        if owner is not None and owner != me:
            targets.add(owner)
        for member in sorted(targets):
            await self._read_member(member)
        gone = (
            owner is None or owner == me or self._live.status(owner) in (Status.DEAD, Status.GONE)
        )
        if list_all or gone:
            listed = {m for m in map(member_id_of, await self.objects.list(MEMBERS_PREFIX)) if m}
            for member in sorted(m for m in listed - targets if m < me):
                await self._read_member(member)  # first sight: unknown until it changes
                targets.add(member)
        return {m: self._live.status(m) for m in targets}

    def _owning(self, statuses: dict[str, Status]) -> frozenset[str]:
        """The members observed whose latest record says they own the store."""
        return frozenset(
            m
            for m in statuses
            if (record := self._live.record(m)) is not None and record.role is Role.OWNER
        )

    async def _read_member(self, member: str) -> None:
        await observe_member(self.objects, self._live, member, self.clock, self._log)

    async def _probe_lock(self, head: ChainVersion | None, statuses: dict[str, Status]) -> bool:
        """Whether the named owner let go of the host lock: it said it held it
        on this host, and this member just got it (and keeps it for now)."""
        if self._lock_fn is None or head is None or head.owner in (None, self.member_id):
            return False
        assert head.owner is not None
        record = self._live.record(head.owner)
        if statuses.get(head.owner) in (Status.DEAD, Status.GONE):
            return False  # no need: the ttl has decided
        if record is None or record.role is not Role.OWNER or record.locked_on != self.host:
            return False  # the lock says nothing of this owner
        if self._held is None:
            self._held = await self._lock_fn(OWNER_LOCK)
        return self._held is not None

    # ---------------------------------------------------------- transitions

    async def _acquire(self, decision: Decision, *, first: bool) -> bool:
        """Take the store; False if another member wrote the chain first."""
        assert decision.reason is not None
        if self._lock_fn is not None and self._held is None:
            self._held = await self._lock_fn(OWNER_LOCK)  # None: held elsewhere, go on
        if not await self._chain.append(self.member_id, decision.reason):
            self._log.info("lost the race for the owner chain", head=repr(self._chain.head))
            return False
        self._takeover = False
        self._log.info("acquiring the store", why=decision.why, version=self._chain.head)
        self._set_state(State.OWNER)
        try:
            await self._put()
            writer = await self._on_acquire()
        except BaseException as e:
            self._failures += 1
            backoff = min(self._ttl_ms, round(self.heartbeat * 1000) * 2 ** (self._failures - 1))
            self._retry_at_ms = self.clock.now_ms() + backoff
            self._set_state(State.STANDBY)
            self._log.error(
                "acquiring the store failed: released it, staying a standby",
                error=repr(e),
                retry_in_s=backoff / 1000,
            )
            await self._let_go()
            if first or not isinstance(e, Exception):
                raise
            return True
        self._failures = 0
        self._writer = writer
        writer.add_stop_callback(lambda failure: self._lose(writer, str(failure)))
        if writer.failure is not None:
            self._lose(writer, str(writer.failure))
        else:
            self._set_state(State.OWNER)  # wakes `wait_owner`
            self._log.info("owns the store", version=self._chain.head)
            events.emit("takeover", url=self.objects.url, member=self.member_id, why=decision.why)
            await self._forget_departed()
        return True

    def _lose(self, writer: OwnerWriter | None, reason: str, *, stop: bool = False) -> None:
        """The owner's writer stopped, or must (``stop``: stop it first): become
        a standby now, clean up in the background. Ignored for a writer no
        longer current; while releasing, only the stop (the release closes
        the writer itself)."""
        if writer is None or writer is not self._writer:
            return
        if stop and writer.failure is None:
            writer.stop(self._self_fenced(reason))
        if self._releasing or self._state is not State.OWNER:
            return
        self._set_state(State.STANDBY)
        self._log.warning("lost the store", reason=reason)
        self._spawn(self._after_loss(writer, reason))

    async def _after_loss(self, writer: OwnerWriter, reason: str) -> None:
        async with self._transition:
            if self._writer is not writer:
                return
            try:
                await self._on_lose(reason)
            except Exception as e:  # still a standby: say why
                self._log.error("stopping after the loss of the store failed", error=repr(e))
            self._writer = None
            if not self._releasing:
                await self._let_go()

    async def _let_go(self, *, released: bool = False) -> None:
        """After owning (or failing to): if the chain still names this member,
        write a release version; then let go of the host lock (in that order,
        so a standby on the host, which takes the lock at once, finds the
        release in the chain: the handover is recorded as one); put the member
        object as a standby (``released``: gone for good)."""
        try:
            head = await self._chain.poll()
            while head is not None and head.owner == self.member_id:
                if await self._chain.append(None, Reason.RELEASE):
                    self._log.info("released the store", version=self._chain.head)
                    break
                head = self._chain.head
            self._drop_lock()
            await self._put(released=released)
        except ObjectStoreError as e:  # a later tick (or the others' ttl) recovers
            self._log.warning("letting go of the store failed", error=str(e))
        finally:
            self._drop_lock()

    async def _forget_departed(self) -> None:
        """Delete the objects of members seen dead or released (bounded litter)."""
        await forget_departed(self.objects, self._live, {self.member_id}, self._log)

    # ------------------------------------------------------------ helpers

    async def _put(self, *, released: bool = False) -> None:
        """Put this member's object; on success, the heartbeat is renewed as of
        the put's start."""
        role = Role.OWNER if self._state is State.OWNER else Role.STANDBY
        locked_on = self.host if self._held is not None and not released else None
        await self._beat.put(role, released=released, locked_on=locked_on)

    def _fence_if_stale(self) -> None:
        if self._state is State.OWNER and self._writer is not None:
            reason = self.validity()
            if reason is not None:
                self._lose(self._writer, reason, stop=True)

    def _drop_lock(self) -> None:
        held, self._held = self._held, None
        if held is not None:
            result = held.release()
            if inspect.isawaitable(result):
                self._spawn(_awaited(result))

    def _set_state(self, state: State) -> None:
        self._state = state
        self._changed.set()
        self._changed = asyncio.Event()

    def _task(self, coro: Coroutine[Any, Any, None], what: str) -> asyncio.Task[None]:
        return asyncio.create_task(coro, name=f"durable-{what} {self.member_id}")

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        task = self._task(coro, "ownership")
        self._bg.add(task)
        task.add_done_callback(self._reap)

    def _reap(self, task: asyncio.Task[None]) -> None:
        self._bg.discard(task)
        if not task.cancelled() and (error := task.exception()) is not None:
            self._log.error("ownership task failed", error=repr(error))

    async def _leave(self) -> None:
        """A failed start: stop, let go, and say so in the member object."""
        self._releasing = True
        self._writer = None
        self._set_state(State.CLIENT)
        await stop_tasks(self._loops, self._bg)
        self._drop_lock()
        with contextlib.suppress(ObjectStoreError):  # else others judge it dead after the ttl
            await self._put(released=True)


async def _awaited(result: Awaitable[object]) -> None:
    await result
