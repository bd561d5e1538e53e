"""`PoolMember`: one worker process's membership of a pool sharing a partitioned store.

A partitioned store (`durable.cluster.manifest`) is P independent stores
below one root; the pool's members share them through the assignment table
(`durable.cluster.assignment`). From `PoolMember.start` to
`PoolMember.release` a member puts its member object every ``heartbeat``
(`durable.cluster.heartbeat.Heartbeat`, into the root's
``cluster/members/``) and *ticks* every ``heartbeat``: it reads the table
(one GET of the next version), LISTs the members and reads their objects
(`durable.cluster.members.Liveness`, on its own clock), then decides:

- partitions it owns whose ``next`` is set and that it drained (or never
  opened) are handed over (`durable.cluster.assignment.handover`); a lost
  race on the chain re-reads it and tries again until the version lands or
  the table no longer asks for it;
- if it is the coordinator (the lowest member id that may be alive) it
  writes the version `durable.cluster.assignment.plan` computes, and
  deletes the objects of departed members the table no longer names;
- then it applies the newest table: a partition the table gives it with no
  pending ``next`` is opened (``on_acquire(p)``, at the slot's epoch,
  `PoolMember.epoch`: its log writer's open marker fences any older writer
  of ``p``, and the log refuses an open at an epoch below its newest, so a
  member acting on a superseded table never fences a newer owner: safety
  rests on the log, never on the table); one whose ``next`` is set is
  drained in the background
  (``on_release(p)``) and handed over once drained; one the table gives to
  someone else (or at another epoch) is dropped (its writer stopped, then
  ``on_lose(p, reason)``).

A writer that stops by itself (fenced by a newer owner's open marker,
failed) is dropped the same way: ``on_lose(p, reason)``. Every member
self-fences: once its last successful heartbeat started more than 0.8 ttl
ago (`PoolMember.validity`, checked by each writer before every commit
through `LogWriter.set_validity`) its heartbeat loop and its tick stop
every writer it holds, draining ones too, before anything else (also on
waking from a pause); it decides and opens nothing until a heartbeat put
succeeded again. An observer judges a member dead only after a full ttl
without a change of its object, so a member stops committing before
anyone else may take its partitions over.

A lone member on a fresh store (no table, no other member object) owns all
P as soon as `PoolMember.start` returns: it is the coordinator, its first
plan gives it everything. `PoolMember.release` drains every partition it
holds (``on_release``), writes `durable.cluster.assignment.release`
(each partition to its ``next`` or the least-loaded other live member)
and puts its member object with ``released: true``. A `release` cancelled
(a caller's timeout) or failing part-way still leaves: every writer held or
draining is stopped, the member's tasks end, and its object says
``released: true``, so the next member takes its partitions at once
instead of finding a member that heartbeats on while owning nothing.

Cost per member and heartbeat: one PUT (its object), one GET of the next
table version, one LIST of the members and one GET per other member;
nothing per partition while nothing changes.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

from durable._logging import get_logger
from durable.cluster.assignment import (
    AssignmentChain,
    Table,
    handover,
    is_coordinator,
    plan,
    release,
)
from durable.cluster.heartbeat import (
    Heartbeat,
    beat_forever,
    forget_departed,
    observe_members,
    stop_tasks,
    tick_forever,
)
from durable.cluster.manifest import check_partitions, partition_prefix
from durable.cluster.members import Liveness, Role, Status, member_name
from durable.cluster.owner import DEFAULT_HEARTBEAT, DEFAULT_TTL, OwnerWriter, check_timing
from durable.errors import (
    InvalidArgument,
    MissingGuarantee,
    ObjectStoreError,
    SelfFenced,
    StaleEpoch,
    StoreClosed,
    StoreError,
)
from durable.store.clock import Clock, SystemClock
from durable.store.ids import IdGenerator
from durable.store.log.retry import DEFAULT_RETRY_SECONDS, retry_transient
from durable.store.objects.base import Guarantee, ObjectStore

__all__ = ["PoolMember"]

log = get_logger("durable.cluster")

#: Versions a member writes in one decision at most (handovers, plans, lost races):
#: what is left waits for the next tick.
_MAX_WRITES = 8


class PoolMember:
    """The membership of one worker process in the pool sharing the
    ``partitions`` partitions of the store at ``objects`` (its root).

    Callbacks (the engine's): ``on_acquire(p)`` opens partition ``p``'s
    store at epoch ``member.epoch(p)`` (its log writer, with
    `OpenOptions.epoch`: the open marker fences any older writer), hands
    ``lambda: member.validity(p)`` to the writer (`LogWriter.set_validity`),
    starts what runs on it and returns the writer; if it raises, ``p`` stays
    unopened and the next tick tries again (at `start`, the error
    propagates and the member leaves). `StaleEpoch` is no failure: the
    log holds a newer epoch, so a newer table version gives ``p`` to
    another; ``p`` stays unopened (logged at info), the next tick re-reads
    the table. ``on_lose(p, reason)`` stops what runs
    on ``p`` and closes it (its writer has stopped: no checkpoint).
    ``on_release(p)`` drains ``p`` (finishes or suspends what is in flight,
    checkpoints, closes the writer) before the member hands it over.

    ``self_fenced(p, reason)`` builds the error a writer is stopped with
    when ownership of ``p`` ends under it (default: `SelfFenced`).
    ``member_id`` (default: a new ULID, so later members sort higher) is
    for tests.
    """

    def __init__(
        self,
        objects: ObjectStore,
        partitions: int,
        *,
        on_acquire: Callable[[int], Awaitable[OwnerWriter]],
        on_lose: Callable[[int, str], Awaitable[None]],
        on_release: Callable[[int], Awaitable[None]],
        clock: Clock | None = None,
        ttl: float = DEFAULT_TTL,
        heartbeat: float = DEFAULT_HEARTBEAT,
        self_fenced: Callable[[int, str], StoreError] | None = None,
        member_id: str | None = None,
    ) -> None:
        ttl, heartbeat = check_timing(ttl, heartbeat)
        self.objects = objects
        self.partitions = check_partitions(partitions)
        self.clock: Clock = clock if clock is not None else SystemClock()
        self.ttl = ttl
        self.heartbeat = heartbeat
        self.member_id = member_id if member_id is not None else IdGenerator(self.clock).next()
        self._on_acquire = on_acquire
        self._on_lose = on_lose
        self._on_release = on_release
        self._self_fenced = self_fenced or self._default_fenced
        ttl_ms = round(ttl * 1000)
        self._beat = Heartbeat(objects, self.member_id, self.clock, ttl_ms)
        self._live = Liveness(ttl_ms)
        self._chain = AssignmentChain(objects, self.partitions)
        self._statuses: dict[str, Status] = {}
        #: Partition -> its writer (None while ``on_acquire`` runs), and its epoch.
        self._held: dict[int, OwnerWriter | None] = {}
        self._epochs: dict[int, int] = {}
        #: Partitions being drained (``on_release`` runs) -> their writers.
        self._draining: dict[int, OwnerWriter] = {}
        #: Partitions whose ``on_lose`` runs.
        self._losing: set[int] = set()
        self._started = False
        self._releasing = False
        self._transition = asyncio.Lock()
        self._changed = asyncio.Event()
        self._loops: list[asyncio.Task[None]] = []
        self._bg: set[asyncio.Task[None]] = set()
        self._log = log.bind(member=self.member_id, url=objects.url)

    # ------------------------------------------------------------- public

    @property
    def owned(self) -> frozenset[int]:
        """The partitions this member holds an open writer of now."""
        return frozenset(p for p, w in self._held.items() if w is not None)

    @property
    def table(self) -> Table:
        """The newest assignment table this member has read."""
        return self._chain.table

    def epoch(self, p: int) -> int | None:
        """The epoch at which this member opens or holds partition ``p`` (the
        table slot's), for ``on_acquire(p)`` to open ``p``'s log at
        (`OpenOptions.epoch`); None if it neither opens nor holds ``p``."""
        return self._epochs.get(p)

    def validity(self, p: int) -> str | None:
        """None while this member may commit to partition ``p``; else why not.

        Cheap and in memory, for `LogWriter.set_validity` of ``p``'s writer:
        a reason once the last successful heartbeat put started more than
        0.8 ttl ago on this member's clock, or once the member no longer
        holds ``p`` (a partition being drained is still held).
        """
        if p not in self._held and p not in self._draining:
            return f"member {self.member_id} does not own partition {p}"
        return self._beat.staleness(f"partition {p}")

    async def start(self) -> None:
        """Join: put the member object, make the first decision, open what
        the table gives this member. A lone member on a fresh store owns all
        partitions on return; one joining a pool gets its share later (the
        coordinator must first see its object change).

        Raises the store's error if the first reads or writes keep failing,
        and ``on_acquire``'s if it fails (the member has then left).
        """
        if self._started:
            raise InvalidArgument(f"PoolMember {self.member_id} was started already")
        if Guarantee.ATOMIC_CREATE not in self.objects.guarantees:
            raise MissingGuarantee(self.objects.url, Guarantee.ATOMIC_CREATE.value)
        self._started = True
        try:
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

            await retry_transient(first_decision, "the assignment table", DEFAULT_RETRY_SECONDS)
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
                    "pool",
                ),
                "pool watch",
            )
        )

    async def wait_owned(self, p: int) -> None:
        """Wait until this member holds partition ``p``; `StoreClosed` once it left."""
        while p not in self.owned:
            if self._releasing:
                raise StoreClosed(self.objects.url, f"member {self.member_id} left")
            changed = self._changed
            await changed.wait()

    async def wait_idle(self) -> None:
        """Wait until no decision, drain or loss is in progress."""
        while self._bg:
            await asyncio.gather(*self._bg, return_exceptions=True)
        async with self._transition:
            pass

    async def release(self) -> None:
        """Leave gracefully: drain every partition held (``on_release``),
        write the `release` version giving them away, put the member object
        with ``released: true``. Idempotent; raises the first ``on_release``
        error, after leaving all the same."""
        if self._releasing or not self._started:
            return
        self._releasing = True
        self._signal()
        try:
            errors = await self._release()
        except BaseException:
            # Cancelled (a caller's timeout) or failed part-way: leave as a crash
            # would, but say so, or the heartbeat would keep this member alive
            # and its partitions unowned for ever.
            await self._abandon(f"member {self.member_id} stopped while leaving")
            raise
        if errors:
            raise errors[0]

    async def _release(self) -> list[BaseException]:
        """`release` once it began: drain, write the release version, put the
        released member object; the ``on_release`` errors."""
        while self._bg:  # drains and losses in progress finish first
            await asyncio.gather(*self._bg, return_exceptions=True)
        errors: list[BaseException] = []
        async with self._transition:
            watch = self._loops[1:]  # the heartbeat goes on while draining
            for task in watch:
                task.cancel()
            await asyncio.gather(*watch, return_exceptions=True)
            held = sorted(p for p, w in self._held.items() if w is not None)
            drains = [(p, w) for p in held if (w := self._begin_drain(p)) is not None]
            results = await asyncio.gather(
                *(self._drain(p, w) for p, w in drains), return_exceptions=True
            )
            errors = [r for r in results if isinstance(r, BaseException)]
            try:
                await self._write_release()
            except ObjectStoreError as e:  # the others judge it dead after the ttl
                self._log.warning("writing the release version failed", error=str(e))
            await stop_tasks(self._loops, self._bg)
            try:
                await self._put(released=True)
            except ObjectStoreError as e:
                self._log.warning("putting the released member object failed", error=str(e))
        self._log.info("left the pool", partitions=held)
        return errors

    async def abort(self) -> None:
        """Stop every task at once and write nothing, like a process that
        died (others judge it dead after the ttl). No callback is called."""
        self._releasing = True
        await stop_tasks(self._loops, self._bg)
        self._held.clear()
        self._epochs.clear()
        self._draining.clear()
        self._signal()

    def __repr__(self) -> str:
        return f"PoolMember(member={self.member_id!r}, owned={sorted(self.owned)})"

    # -------------------------------------------------------------- loops

    async def _tick(self, *, first: bool = False) -> None:
        """Read the table and the members; decide; apply (under `_transition`)."""
        self._fence_if_stale()
        if self._releasing:
            return
        await (self._chain.load() if first else self._chain.poll())
        await self._observe()
        if self._beat.staleness("its partitions") is not None:
            return  # nothing is decided or opened before a heartbeat put succeeds again
        await self._decide()
        await self._apply(first=first)

    # ------------------------------------------------------------ observe

    async def _observe(self) -> None:
        """LIST the members; read every listed one and every one the table names
        (`observe_members`: a member whose object was deleted is gone)."""
        named = {m for s in self._chain.table.slots for m in (s.owner, s.next) if m is not None}
        self._statuses = await observe_members(
            self.objects, self._live, self.member_id, named, self.clock, self._log
        )

    # ----------------------------------------------------------- decisions

    async def _decide(self) -> None:
        """Hand over what drained; plan if coordinator; re-read and decide again
        after a lost race, until nothing is left to write."""
        for _ in range(_MAX_WRITES):
            table = self._chain.table
            self._drop_moved(table)
            ready = self._ready_to_hand_over(table)
            new = handover(self.member_id, table, *ready) if ready else None
            what = "handed over partitions" if new is not None else "planned"
            if new is None:
                new = plan(self.member_id, table, self._statuses)
            if new is None:
                break
            if await self._chain.append(new):
                self._log.info(what, version=new.version, partitions=ready or None)
            else:
                self._log.info("lost a race for the assignment table", version=new.version)
        if is_coordinator(self.member_id, self._statuses):
            await self._forget_departed()

    def _ready_to_hand_over(self, table: Table) -> list[int]:
        """Partitions the table asks this member to hand over, and that it holds
        no writer of any more (drained, lost, or never opened)."""
        return [
            p
            for p, slot in enumerate(table.slots)
            if slot.owner == self.member_id
            and slot.next is not None
            and p not in self._held
            and p not in self._draining
            and p not in self._losing
        ]

    def _drop_moved(self, table: Table) -> None:
        """Stop the writers of partitions the table gives to someone else (or to
        this member again, at a newer epoch: reopened)."""
        for p, writer in list(self._held.items()):
            slot = table.slots[p]
            if writer is not None and (
                slot.owner != self.member_id or slot.epoch != self._epochs.get(p)
            ):
                reason = (
                    f"assignment table version {table.version} gives partition {p} to "
                    f"member {slot.owner} at epoch {slot.epoch}"
                )
                self._lose(p, writer, reason, stop=True)

    async def _apply(self, *, first: bool) -> None:
        """Drain what is to be handed over; open what is this member's."""
        table = self._chain.table
        opening: list[tuple[int, int]] = []
        for p, slot in enumerate(table.slots):
            if slot.owner != self.member_id:
                continue
            if slot.next is not None:
                if (writer := self._begin_drain(p)) is not None:
                    self._spawn(self._drain_and_hand_over(p, writer), "drain")
            elif p not in self._held and p not in self._draining and p not in self._losing:
                opening.append((p, slot.epoch))
        if not opening:
            return
        results = await asyncio.gather(
            *(self._acquire(p, epoch) for p, epoch in opening), return_exceptions=True
        )
        for result in results:
            if isinstance(result, BaseException) and (first or not isinstance(result, Exception)):
                raise result

    async def _acquire(self, p: int, epoch: int) -> None:
        self._held[p] = None
        self._epochs[p] = epoch
        try:
            writer = await self._on_acquire(p)
        except StaleEpoch as e:  # a newer table gives p to another: read it next tick
            self._held.pop(p, None)
            self._epochs.pop(p, None)
            self._log.info(
                "a newer owner holds a partition", partition=p, epoch=epoch, newest=e.newest
            )
            return
        except BaseException as e:
            self._held.pop(p, None)
            self._epochs.pop(p, None)
            self._log.error("opening a partition failed", partition=p, error=repr(e))
            raise
        if p not in self._held:  # the member left meanwhile
            writer.stop(self._self_fenced(p, f"member {self.member_id} left the pool"))
            return
        self._held[p] = writer
        writer.add_stop_callback(lambda failure: self._lose(p, writer, str(failure)))
        self._log.info("owns a partition", partition=p, epoch=epoch)
        if writer.failure is not None:
            self._lose(p, writer, str(writer.failure))
        self._fence_if_stale()
        self._signal()

    def _lose(self, p: int, writer: OwnerWriter, reason: str, *, stop: bool = False) -> None:
        """``p``'s writer stopped, or must (``stop``): drop ``p`` now, call
        ``on_lose`` in the background. Ignored for a writer no longer held."""
        if self._held.get(p) is not writer:
            return
        del self._held[p]
        self._epochs.pop(p, None)
        if stop and writer.failure is None:
            writer.stop(self._self_fenced(p, reason))
        self._log.warning("lost a partition", partition=p, reason=reason)
        self._losing.add(p)
        self._spawn(self._after_loss(p, reason), "loss")
        self._signal()

    async def _after_loss(self, p: int, reason: str) -> None:
        try:
            await self._on_lose(p, reason)
        except Exception as e:
            self._log.error("stopping a lost partition failed", partition=p, error=repr(e))
        finally:
            self._losing.discard(p)

    def _begin_drain(self, p: int) -> OwnerWriter | None:
        """Move ``p``'s writer from held to draining: it stays valid (heartbeat
        permitting) while it drains, and its stop is no loss."""
        writer = self._held.get(p)
        if writer is None:
            return None
        del self._held[p]
        self._epochs.pop(p, None)
        self._draining[p] = writer
        return writer

    async def _drain(self, p: int, writer: OwnerWriter) -> None:
        """``on_release(p)`` of a partition `_begin_drain` moved to draining."""
        self._log.info("draining a partition", partition=p)
        try:
            await self._on_release(p)
        except BaseException:
            writer.stop(self._self_fenced(p, "draining it failed"))
            raise
        finally:
            self._draining.pop(p, None)
            self._signal()

    async def _drain_and_hand_over(self, p: int, writer: OwnerWriter) -> None:
        try:
            await self._drain(p, writer)
        except Exception as e:  # handed over all the same: the writer is stopped
            self._log.error("draining a partition failed", partition=p, error=repr(e))
        if self._releasing:
            return  # `release` gives it away
        try:
            async with self._transition:
                await self._chain.poll()
                await self._decide()
        except ObjectStoreError as e:  # the next tick retries
            self._log.warning("handing a partition over failed", partition=p, error=str(e))

    async def _write_release(self) -> None:
        await self._chain.poll()
        await self._observe()
        for _ in range(_MAX_WRITES):
            new = release(self.member_id, self._chain.table, self._statuses)
            if new is None or await self._chain.append(new):
                return

    async def _forget_departed(self) -> None:
        """Delete departed members' objects once no table slot names them."""
        named = {m for s in self._chain.table.slots for m in (s.owner, s.next) if m is not None}
        await forget_departed(self.objects, self._live, {self.member_id, *named}, self._log)

    # ------------------------------------------------------------ helpers

    async def _put(self, *, released: bool = False) -> None:
        role = Role.OWNER if self._held and not released else Role.STANDBY
        await self._beat.put(role, released=released)

    def _fence_if_stale(self) -> None:
        reason = self._beat.staleness("its partitions")
        if reason is None:
            return
        for p, writer in list(self._held.items()):
            if writer is not None:
                self._lose(p, writer, reason, stop=True)
        for p, writer in list(self._draining.items()):
            if writer.failure is None:
                writer.stop(self._self_fenced(p, reason))

    def _default_fenced(self, p: int, reason: str) -> StoreError:
        return SelfFenced(self.objects.url.rstrip("/") + "/" + partition_prefix(p), reason)

    def _signal(self) -> None:
        self._changed.set()
        self._changed = asyncio.Event()

    def _task(self, coro: Coroutine[Any, Any, None], what: str) -> asyncio.Task[None]:
        return asyncio.create_task(coro, name=f"durable-{what} {self.member_id}")

    def _spawn(self, coro: Coroutine[Any, Any, None], what: str) -> None:
        task = self._task(coro, f"pool {what}")
        self._bg.add(task)
        task.add_done_callback(self._reap)

    def _reap(self, task: asyncio.Task[None]) -> None:
        self._bg.discard(task)
        if not task.cancelled() and (error := task.exception()) is not None:
            self._log.error("pool task failed", error=repr(error))

    async def _abandon(self, reason: str) -> None:
        """Stop every writer held or draining (no callback: the engine is
        closing), every task, and put the member object with ``released:
        true`` (best effort) so the next member takes the partitions at once:
        the stopped writers commit nothing more (the new owner's open marker
        fences them all the same)."""
        for p, writer in [*self._held.items(), *self._draining.items()]:
            if writer is not None and writer.failure is None:
                writer.stop(self._self_fenced(p, reason))
        self._held.clear()
        self._epochs.clear()
        self._draining.clear()
        self._signal()
        await stop_tasks(self._loops, self._bg)
        try:
            await self._put(released=True)
        except ObjectStoreError as e:  # the others judge it dead after the ttl
            self._log.warning("putting the released member object failed", error=str(e))
        self._log.warning("left the pool abruptly", reason=reason)

    async def _leave(self) -> None:
        """A failed start: stop, close what opened, say so in the member object."""
        self._releasing = True
        await stop_tasks(self._loops, self._bg)
        opened = [(p, w) for p, w in self._held.items() if w is not None]
        self._held.clear()
        self._epochs.clear()
        self._signal()
        reason = f"member {self.member_id} failed to start"
        for p, writer in opened:
            writer.stop(self._self_fenced(p, reason))
            try:
                await self._on_lose(p, reason)
            except Exception as e:
                self._log.error("stopping a partition failed", partition=p, error=repr(e))
        try:  # else others judge it dead after the ttl
            await self._put(released=True)
        except ObjectStoreError as e:
            self._log.warning("putting the released member object failed", error=str(e))
