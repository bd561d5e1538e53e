"""`PartitionedSession`: an `Engine`'s hold on a partitioned store.

A store created with ``partitions=P`` (`durable.cluster.manifest`) is P
ordinary stores below one root, each at ``partition_prefix(p)``. The
engine's hold on it is one `PartitionStore` per partition — the issue-14
`StoreSession` over ``PrefixedObjectStore(root, partition_prefix(p))`` with
the membership taken out: a worker engine is one `PoolMember` of the root,
whose assignment table says which partitions it owns. An owned partition
runs the owner's mode (its `Queue`, whose writer checks
``pool.validity(p)`` before every commit, the codec record, the workflow
runtimes, the default services, the inbox applier); any other is reached
as a client (a followed view, writes through that partition's inbox). A
lone worker owns all P as soon as the pool member starts: no other
coordination, and nothing per run beyond one hash to route it.

Everything that reaches a run asks the engine for the run's partition
(`durable.decorators.engine.Engine.for_run`), which is a `PartitionEngine`
(a `durable.decorators.base.EngineBase`): its ``mode``, ``queue`` and
``workflows`` are that partition's and its default services (the ``@job``
runner) are that partition's own instances; the configuration and the
routing are the engine's. The runtimes of a partition are built with its
`PartitionEngine`, so the runner, the terminal hook and the workflow
contexts of a run reach its own partition without routing.

The services added with `Engine.add_service` run once per engine: started
once every partition is reached, stopped first on close (before the
partitions drain and are handed over).

Signal keys have a home partition (`signal_home`): a child run's key is
homed with the child (so with its parent), any other by its hash. An owned
partition's runtimes take a `PartitionSignalRoute` over the partition's
`Outbox` (`durable.engine.signals`: a wait on a key homed elsewhere
registers there by message, and the home forwards its signal); the outbox
applies a message to a partition this engine owns at once, and writes it
into another's inbox otherwise.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from durable._logging import get_logger
from durable.cluster.applier import InboxApplier
from durable.cluster.manifest import Manifest, partition_of, partition_prefix
from durable.cluster.outbox import Destination, Destinations, Outbox
from durable.cluster.pool import PoolMember
from durable.cluster.signal_route import PartitionSignalRoute
from durable.decorators.base import EngineBase
from durable.decorators.children import child_key
from durable.decorators.modes import OwnerMode
from durable.decorators.request_keys import request_run
from durable.decorators.services import default_services
from durable.decorators.session import Role, StoreSession
from durable.errors import NoEngine, SelfFenced
from durable.store.clock import SystemClock
from durable.store.ids import IdGenerator
from durable.store.objects.prefixed import PrefixedObjectStore

if TYPE_CHECKING:
    from collections.abc import Callable

    from durable.decorators.engine import Engine
    from durable.decorators.handles import WorkflowHandle
    from durable.decorators.modes import Mode
    from durable.decorators.runtimes import WorkflowQueues
    from durable.engine.delivery import StepRunner
    from durable.engine.hooks import TerminalHook
    from durable.engine.runtime import RuntimeOptions, WorkflowRuntime
    from durable.store.log import LogWriter
    from durable.store.objects.base import ObjectStore
    from durable.store.queue import Queue
    from durable.store.queue.worker import Slots

__all__ = ["PartitionEngine", "PartitionStore", "PartitionedSession", "signal_home"]

log = get_logger("durable.decorators")

#: ULIDs `PartitionedSession.new_id` tries for one in an owned partition
#: (owning one partition of 1000, 4,000 tries miss with probability e^-4).
_MINT_TRIES = 4 * 1000

#: What every child run's signal key starts with (`child_key`).
_CHILD_KEY_PREFIX = child_key("")


def signal_home(key: str, partitions: int) -> int:
    """The home partition of signal key ``key``: a child run's key
    (`durable.decorators.children.child_key`) lives with the child, minted
    into its parent's partition, so the child's terminal signal and its
    parent's wait stay local; a request's keys
    (`durable.decorators.request_keys`) live with the run they are for; any
    other key by its hash (`partition_of`)."""
    if key.startswith(_CHILD_KEY_PREFIX) and len(key) > len(_CHILD_KEY_PREFIX):
        return partition_of(key[len(_CHILD_KEY_PREFIX) :], partitions)
    if (run_id := request_run(key)) is not None:  # a request's keys live with its run
        return partition_of(run_id, partitions)
    return partition_of(key, partitions)


class _RoutedOwnerMode(OwnerMode):
    """An owned partition's mode: its runtimes' signals take ``route``."""

    def __init__(
        self, queue: Queue, route: PartitionSignalRoute, pending: dict[str, bytes]
    ) -> None:
        super().__init__(queue, pending)
        self._route = route

    def runtime(
        self, runner: StepRunner, hook: TerminalHook | None, options: RuntimeOptions
    ) -> WorkflowRuntime:
        """A runtime that runs work, its signals routed by key."""
        runtime = super().runtime(runner, hook, options)
        runtime.signals.route = self._route
        return runtime


class PartitionEngine(EngineBase):
    """The engine as one partition sees it; see the module docstring."""

    def __init__(self, engine: Engine, partition: int) -> None:
        super().__init__(engine.concurrency_limits(), [f() for f in default_services()])
        self._engine = engine
        #: This facade's partition.
        self.partition = partition
        self.role = engine.role
        self.codec = engine.codec
        self.clock = engine.clock
        self.retention = engine.retention
        self.max_attempts_without_progress = engine.max_attempts_without_progress
        self.replace_codec_record = engine.replace_codec_record
        self.executors = engine.executors
        self.threads = engine.threads
        #: The partition's store session (set by `PartitionedSession`).
        self.store: PartitionStore | None = None

    @property
    def engine(self) -> Engine:
        """The engine this is a partition of."""
        return self._engine

    @property
    def mode(self) -> Mode:
        """The partition's mode now (its owner's queue, or a client view)."""
        from durable.decorators.engine import _raise_if_fenced

        store = self.store
        mode = store.mode if store is not None else None
        if mode is None:
            raise NoEngine(f"partition {self.partition} of the engine")
        _raise_if_fenced(mode)
        return mode

    @property
    def workflows(self) -> WorkflowQueues:
        """The partition's workflow runtimes."""
        store = self.store
        workflows = store.workflows if store is not None else None
        if workflows is None:
            raise NoEngine(f"partition {self.partition} of the engine")
        self.mode  # noqa: B018  (raises Fenced for a fenced owner)
        return workflows

    @property
    def store_session(self) -> PartitionStore | None:
        """The partition's session (None before the engine reached it)."""
        return self.store

    @property
    def owner(self) -> bool:
        """True while this engine owns the partition."""
        return self.store is not None and self.store.owner

    @property
    def partition_count(self) -> int | None:
        """The engine's partition count."""
        return self._engine.partition_count

    def for_run(self, run_id: str) -> EngineBase:
        """The partition of ``run_id`` (the engine's routing)."""
        return self._engine.for_run(run_id)

    def for_key(self, key: str) -> EngineBase:
        """The home partition of signal key ``key`` (the engine's routing)."""
        return self._engine.for_key(key)

    def co_located(self, base: str, with_run: str) -> str:
        """``base`` as an id in ``with_run``'s partition (the engine's)."""
        return self._engine.co_located(base, with_run)

    def new_run_id(self) -> str:
        """A new run id (the engine's generator)."""
        return self._engine.new_run_id()

    def handle(self, run_id: str) -> WorkflowHandle[Any]:
        """A handle on run ``run_id`` (the engine's: it routes)."""
        return self._engine.handle(run_id)

    def slots_for(self, queue: str, limit: int) -> Slots | None:
        """The engine's slots of ``queue`` (shared by every partition)."""
        return self._engine.slots_for(queue, limit)

    def service_queues(self) -> frozenset[str]:
        """The engine's service queues (no workflow worker runs on those)."""
        return self._engine.service_queues()

    def record_errors(self, errors: list[BaseException]) -> None:
        """Errors of stopping the partition's mode, raised when the engine exits."""
        self._engine.record_errors(errors)

    def __repr__(self) -> str:
        return f"PartitionEngine({self.partition}, of {self._engine!r})"


class PartitionStore(StoreSession):
    """One partition's store: a `StoreSession` without membership."""

    def __init__(self, facade: PartitionEngine, objects: ObjectStore, role: Role) -> None:
        super().__init__(facade, objects, None, role=role, ttl=1.0, heartbeat=0.2, takeover=False)
        self._objects, self._owned_objects = objects, False
        self._partitions = 1
        self._destinations: Destinations | None = None
        self._outbox: Outbox | None = None

    def route_signals(self, partitions: int, destinations: Destinations) -> None:
        """Route signal keys across the ``partitions`` (see the module docstring)."""
        self._partitions, self._destinations = partitions, destinations

    @property
    def applier(self) -> InboxApplier | None:
        """The partition's inbox applier while this engine owns it."""
        return self._applier

    async def _enter(self, mode: Mode) -> None:
        """As `StoreSession._enter`; an owner's mode routes signal keys and
        runs the partition's outbox (records left by a dead owner first)."""
        destinations = self._destinations
        if isinstance(mode, OwnerMode) and destinations is not None:
            facade = self._engine
            assert isinstance(facade, PartitionEngine)
            partitions = self._partitions
            outbox = Outbox(mode.queue, destinations, facade.clock)
            route = PartitionSignalRoute(
                facade.partition, partitions, outbox, lambda key: signal_home(key, partitions)
            )
            mode = _RoutedOwnerMode(mode.queue, route, mode.pending)
            self._outbox = outbox
        await super()._enter(mode)
        if self._outbox is not None:
            self._outbox.start()

    async def _leave(self, *, drain: bool) -> None:
        """As `StoreSession._leave`, the outbox stopped first (a last pass
        when draining; what is left is the next owner's to send)."""
        if self._outbox is not None:
            outbox, self._outbox = self._outbox, None
            if drain:
                await outbox.stop()
            else:
                outbox.abort()
        await super()._leave(drain=drain)

    async def send_pending(self) -> None:
        """Send what the partition's outbox holds now (nothing when it is
        empty or the partition is not owned here)."""
        outbox = self._outbox
        if outbox is not None and outbox.pending:
            await outbox.send_now()

    async def own(self, validity: Any, epoch: int | None) -> LogWriter:
        """Open the partition as its owner at ``epoch`` (the pool gave it to
        this member; `StaleEpoch` if a newer owner opened it already)."""
        return await self._own(validity, epoch)

    async def lose(self, reason: str) -> None:
        """The partition is another's now: stop, serve it as a client."""
        await self._lose(reason)

    async def release(self) -> None:
        """Drain and close the owner's mode (before a handover)."""
        await self._release()

    async def serve_as_client(self, *, wait: bool) -> None:
        """Reach the partition as a client (if not already in a mode)."""
        await self._become_client(wait=wait)


class PartitionedSession:
    """The partitioned store of one running `Engine`; see the module docstring."""

    def __init__(
        self,
        engine: Engine,
        objects: ObjectStore,
        owned_objects: bool,
        manifest: Manifest,
        *,
        role: Role,
        ttl: float,
        heartbeat: float,
    ) -> None:
        self._engine = engine
        self._objects = objects
        self._owned_objects = owned_objects
        #: The store's partition count.
        self.partitions = manifest.partitions
        self.role = role
        self._ttl, self._heartbeat = ttl, heartbeat
        self.facades = [PartitionEngine(engine, p) for p in range(self.partitions)]
        self._changed = asyncio.Event()  # set when a partition's mode changes here
        self._prefixed = [
            PrefixedObjectStore(objects, partition_prefix(p)) for p in range(self.partitions)
        ]
        for p, facade in enumerate(self.facades):
            facade.store = PartitionStore(facade, self._prefixed[p], role)
            facade.store.route_signals(self.partitions, self.destination)
            facade.store.on_change = self._changed.set
        self._pool: PoolMember | None = None
        self._ids = IdGenerator(engine.clock)
        self._closing = False

    def _store(self, p: int) -> PartitionStore:
        store = self.facades[p].store
        assert store is not None
        return store

    # ------------------------------------------------------------- state

    def facade_of(self, run_id: str) -> PartitionEngine:
        """The facade of the partition that holds ``run_id`` (or a key, a group)."""
        return self.facades[partition_of(run_id, self.partitions)]

    def facade_of_key(self, key: str) -> PartitionEngine:
        """The facade of signal key ``key``'s home partition (`signal_home`)."""
        return self.facades[signal_home(key, self.partitions)]

    async def send_pending(self) -> None:
        """Send the messages every partition owned here has staged so far
        (before a signal: a wait or timeout this process committed reaches
        the key's home first, as on one store)."""
        for facade in self.facades:
            if facade.store is not None:
                await facade.store.send_pending()

    def destination(self, p: int) -> Destination:
        """How a partition's outbox reaches partition ``p``: its store, and
        its applier while this engine owns it."""
        return Destination(self._prefixed[p], self._store(p).applier)

    def new_id(self) -> str:
        """A new run id: a ULID of this process's generator that lands in a
        partition this engine owns, when it owns some but not all (a pool
        member), so a run its own caller starts commits locally with no hop
        through another owner's inbox; any ULID otherwise (a lone owner, a
        standby, a client: spread over every partition by the hash). About
        P / owned ULIDs and hashes per id."""
        run_id = self._ids.next()
        owned = {p for p, facade in enumerate(self.facades) if facade.owner}
        if not owned or len(owned) == self.partitions:
            return run_id
        for _ in range(_MINT_TRIES):
            if partition_of(run_id, self.partitions) in owned:
                break
            run_id = self._ids.next()
        return run_id

    @property
    def owner(self) -> bool:
        """True while this engine owns every partition (a lone worker)."""
        return all(f.owner for f in self.facades)

    @property
    def opened(self) -> bool:
        """True once every partition is reached (owned or as a client)."""
        return all(f.store is not None and f.store.mode is not None for f in self.facades)

    # --------------------------------------------------------- open/close

    async def open(self) -> None:
        """Join the pool (a worker) and reach every partition."""
        try:
            if self.role == "worker":
                objects = self._objects
                self._pool = PoolMember(
                    objects,
                    self.partitions,
                    on_acquire=self._acquire,
                    on_lose=self._lose,
                    on_release=self._release,
                    clock=SystemClock(),
                    ttl=self._ttl,
                    heartbeat=self._heartbeat,
                    self_fenced=lambda p, reason: SelfFenced(
                        f"{objects.url}/{partition_prefix(p)}", reason
                    ),
                )
                await self._pool.start()
            for p in range(self.partitions):
                if self._store(p).mode is None:
                    await self._store(p).serve_as_client(wait=self.role == "worker")
            await self._engine.start_services()  # the engine's own: once, not per partition
        except BaseException:
            await self.close()
            raise

    async def close(self) -> None:
        """Drain and hand over every owned partition, close every one. Idempotent."""
        self._closing = True
        for facade in self.facades:  # no run starts a new step from now on
            workflows = facade.store.workflows if facade.store is not None else None
            if workflows is not None:
                workflows.draining.set()
        self._engine.record_errors(await self._engine.stop_services())
        if self._pool is not None:
            pool, self._pool = self._pool, None
            await pool.release()  # drains each owned partition (`_release`)
        for facade in self.facades:
            if facade.store is not None:
                await facade.store.close()
        if self._owned_objects:
            await self._objects.close()
            self._owned_objects = False

    async def wait_for_owner(self, owner: bool) -> None:
        """Wait until this engine owns every partition (``owner``) or none."""

        def reached() -> bool:
            owned = [f.owner for f in self.facades]
            return (all(owned) if owner else not any(owned)) and self.opened

        await self.wait_until(reached)

    async def wait_until(self, predicate: Callable[[], bool]) -> None:
        """Wait until ``predicate()`` holds, checked again each time a
        partition changes mode here (owned, lost, released, reached as a
        client): no polling."""
        while not predicate():
            self._changed.clear()  # no await since the check: no change slips by
            await self._changed.wait()

    # ------------------------------------------------------------ the pool

    async def _acquire(self, p: int) -> LogWriter:
        pool = self._pool
        assert pool is not None
        writer = await self._store(p).own(lambda: pool.validity(p), pool.epoch(p))
        log.info("engine owns a partition", url=writer.url, partition=p, member=pool.member_id)
        return writer

    async def _lose(self, p: int, reason: str) -> None:
        log.warning("engine lost a partition; serving it as a client", partition=p, reason=reason)
        await self._store(p).lose(reason)

    async def _release(self, p: int) -> None:
        await self._store(p).release()
        if not self._closing:  # handed over while running: reach it as a client
            await self._store(p).serve_as_client(wait=True)
