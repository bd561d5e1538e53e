"""`StoreSession`: an `Engine`'s hold on its store, in its role.

- ``role="client"``: the engine never owns the store. It reads through a
  followed view and writes requests into the store's inbox
  (`durable.decorators.modes.ClientMode`); it fences nobody and heartbeats
  nothing. A store that no worker ever opened raises `StoreNotInitialized`.
- ``role="worker"`` (the default): the engine is a *member*
  (`durable.cluster.owner.Ownership`). Entering it decides at once: with no
  live owner it acquires the store before returning (a lone process runs
  its work as before); otherwise it is a *standby*, serving as a client
  meanwhile, and takes over when the owner dies (within ttl + 2
  heartbeats; at once on a local directory, through a host lock) or
  releases (within one heartbeat). ``takeover=True`` acquires at once,
  fencing the owner.

Acquiring opens the store's `Queue` (its open marker fences any older
writer), hands the writer the ownership's validity check, checks the
codec record, then runs the owner's mode: runtimes that run work, the
engine's services, and the `InboxApplier` that applies other processes'
requests. Losing the store (fenced by a newer owner, or a heartbeat that
could not be renewed for 0.8 ttl) stops all of that at once and goes back to
client mode as a standby: calls in progress on the owner's queue then raise
`Fenced`; later calls go through the inbox to the new owner. Closing drains
(deliveries finish or suspend, services stop), closes the queue with a
final checkpoint, and releases the store to a standby.

The client view, once opened, stays open for the engine's life, so a wait
that began while this engine was a client still ends after it took over.
"""

from __future__ import annotations

import asyncio
import os
from typing import TYPE_CHECKING, Any, Literal

from durable._logging import get_logger
from durable.cluster.applier import InboxApplier
from durable.cluster.client import ClientQueue
from durable.cluster.owner import Ownership, State
from durable.decorators.codec_record import check_codec_record, ensure_codec_record
from durable.decorators.modes import ClientMode, Mode, OwnerMode
from durable.decorators.runtimes import WorkflowQueues
from durable.engine.runtime import WorkflowRuntime
from durable.errors import SelfFenced, StoreNotInitialized
from durable.store.clock import SystemClock
from durable.store.log import LogWriter
from durable.store.objects.base import Guarantee, ObjectStore
from durable.store.objects.url import resolve_store
from durable.store.queue import OpenOptions, Queue

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from durable.decorators.base import EngineBase

__all__ = ["Role", "StoreSession"]

log = get_logger("durable.decorators")

#: An engine's role on its store.
Role = Literal["worker", "client"]

#: How long a standby waits for the owner it saw to create the store.
_INIT_WAIT = 10.0


class StoreSession:
    """The store of one running `Engine`; see the module docstring."""

    def __init__(
        self,
        engine: EngineBase,
        url: str | os.PathLike[str] | ObjectStore,
        storage_options: Mapping[str, Any] | None,
        *,
        role: Role,
        ttl: float,
        heartbeat: float,
        takeover: bool,
        resolved: tuple[ObjectStore, bool] | None = None,
    ) -> None:
        self._engine = engine
        self._resolved = resolved
        self._url = url
        self._storage_options = storage_options
        self.role = role
        self._ttl = ttl
        self._heartbeat = heartbeat
        self._takeover = takeover
        self._objects: ObjectStore | None = None
        self._owned_objects = False
        self._ownership: Ownership | None = None
        self._client: ClientQueue | None = None
        self._mode: Mode | None = None
        self._workflows: WorkflowQueues | None = None
        self._applier: InboxApplier | None = None
        self._switch = asyncio.Lock()
        self._changed = asyncio.Condition()
        self._closed = False
        #: Called whenever the mode changes (entered, or left).
        self.on_change: Callable[[], None] | None = None

    # ------------------------------------------------------------- state

    @property
    def mode(self) -> Mode | None:
        """What the engine runs on now (None before open and after close)."""
        return self._mode

    @property
    def workflows(self) -> WorkflowQueues | None:
        """The workflow runtimes of the current mode."""
        return self._workflows

    @property
    def owner(self) -> bool:
        """True while this engine owns its store."""
        return self._mode is not None and self._mode.owner

    @property
    def ownership(self) -> Ownership | None:
        """The membership of a worker-role engine (None for a client)."""
        return self._ownership

    def runtime_of_queue(self, queue: str) -> WorkflowRuntime | None:
        """The runtime of ``queue`` (a workflow queue, or a job queue a
        service runs), for the owner's inbox applier."""
        for service in self._engine.started_services():
            runtime_of = getattr(service, "runtime_of", None)
            if callable(runtime_of):
                found = runtime_of(queue)
                if isinstance(found, WorkflowRuntime):
                    return found
        workflows = self._workflows
        return workflows.runtime_for(queue) if workflows is not None else None

    # --------------------------------------------------------- open/close

    async def open(self) -> None:
        """Reach the store in the engine's role (see the module docstring)."""
        if self._resolved is not None:  # the engine resolved it to read its manifest
            (objects, owned), self._resolved = self._resolved, None
        else:
            objects, owned = await resolve_store(self._url, self._storage_options)
        self._objects, self._owned_objects = objects, owned
        try:
            if self.role == "client":
                await self._become_client(wait=False)
                return
            self._ownership = Ownership(
                objects,
                on_acquire=self._acquire,
                on_lose=self._lose,
                on_release=self._release,
                clock=SystemClock(),  # real time: the engine's clock may be a MockClock
                ttl=self._ttl,
                heartbeat=self._heartbeat,
                takeover=self._takeover,
                lock=objects.try_lock if Guarantee.PROCESS_LOCK in objects.guarantees else None,
                self_fenced=lambda reason: SelfFenced(objects.url, reason),
            )
            await self._ownership.start()
            if self._ownership.state is not State.OWNER:
                await self._become_client(wait=True)
        except BaseException:
            await self.close()
            raise

    async def close(self) -> None:
        """Drain, release the store (an owner) and close. Idempotent."""
        if self._ownership is not None:
            ownership, self._ownership = self._ownership, None
            await ownership.release()  # an owner drains first (`_release`)
        async with self._switch:
            await self._leave(drain=True)
        if self._client is not None:
            client, self._client = self._client, None
            await client.close()
        if self._objects is not None and self._owned_objects:
            await self._objects.close()
        self._objects = None
        self._closed = True
        async with self._changed:
            self._changed.notify_all()

    # ------------------------------------------------------ the ownership

    async def _acquire(self) -> LogWriter:
        """Open the store as its owner and run the owner's mode."""
        ownership = self._ownership
        assert ownership is not None
        writer = await self._own(ownership.validity)
        log.info("engine owns the store", url=writer.url, member=ownership.member_id)
        return writer

    async def _own(self, validity: Callable[[], str | None], epoch: int | None = None) -> LogWriter:
        """Open the store's `Queue` (its writer checks ``validity`` before
        every commit; its open marker carries ``epoch``, and a log whose
        newest marker carries a higher one raises `StaleEpoch`) and run the
        owner's mode on it; its writer."""
        objects, engine = self._objects, self._engine
        assert objects is not None
        # The ownership protocol judged any other holder gone: take the log over.
        queue = await Queue.open(
            objects, OpenOptions(clock=engine.clock, epoch=epoch, takeover=True)
        )
        try:
            queue.writer.set_validity(validity)
            # Before any run is read or written (durable on return).
            await ensure_codec_record(
                queue.kv.internal(), engine.codec, queue.kv.url, replace=engine.replace_codec_record
            )
            async with self._switch:
                await self._leave(drain=False)
                pending = self._client.started if self._client is not None else None
                await self._enter(OwnerMode(queue, pending))
                self._applier = InboxApplier(objects, queue.kv, self.runtime_of_queue, engine.clock)
                self._applier.start()
        except BaseException:
            async with self._switch:
                await self._leave(drain=False)
            await queue.close()
            raise
        return queue.writer

    async def _lose(self, reason: str) -> None:
        """The store is another's now: stop at once, serve as a standby."""
        log.warning("engine lost the store; serving as a standby", reason=reason)
        async with self._switch:
            await self._leave(drain=False)
        await self._become_client(wait=True)

    async def _release(self) -> None:
        """Closing as the owner: drain, stop, close the queue (checkpoint)."""
        async with self._switch:
            await self._leave(drain=True)

    # -------------------------------------------------------------- modes

    async def _become_client(self, *, wait: bool) -> None:
        """Serve as a client (a standby's mode too)."""
        if self._client is None:
            self._client = await self._open_client(wait=wait)
        await check_codec_record(self._client.kv.internal(), self._engine.codec, self._client.url)
        async with self._switch:
            if self._mode is None:
                await self._enter(ClientMode(self._client))

    async def _open_client(self, *, wait: bool) -> ClientQueue:
        objects = self._objects
        assert objects is not None
        delay, waited = 0.05, 0.0
        while True:
            try:
                return await ClientQueue.open(objects, self._engine.clock)
            except StoreNotInitialized:
                # A standby may see an owner that is still creating the store.
                if not wait or waited >= _INIT_WAIT:
                    raise
            await asyncio.sleep(delay)
            waited += delay
            delay = min(delay * 2, 1.0)

    async def wait_for_owner(self, owner: bool) -> None:
        """Wait until this engine owns its store (``owner``) or serves as a
        client or standby (not ``owner``)."""
        async with self._changed:
            await self._changed.wait_for(lambda: self._mode is not None and self.owner == owner)

    async def next_mode(self, after: Mode | None) -> bool:
        """Wait until the engine runs in a mode other than ``after`` (the
        store was handed over, taken over or lost under a caller that used
        ``after``); False once the session closed instead."""
        async with self._changed:
            await self._changed.wait_for(
                lambda: self._closed or (self._mode is not None and self._mode is not after)
            )
            return not self._closed

    async def _enter(self, mode: Mode) -> None:
        """Run ``mode``: its workflow runtimes, then the engine's services."""
        engine = self._engine
        self._mode = mode
        self._workflows = WorkflowQueues(engine, engine.workflow_limits(), mode)
        self._workflows.start()
        await engine.start_services()
        async with self._changed:
            self._changed.notify_all()
        if self.on_change is not None:
            self.on_change()

    async def _leave(self, *, drain: bool) -> None:
        """Stop the current mode: the applier, the workflows (drained, or
        aborted as a crash would), the services; close an owner's queue."""
        mode = self._mode
        if mode is None:
            return
        # The mode stays current while its deliveries drain (they use it).
        if self._applier is not None:
            applier, self._applier = self._applier, None
            await applier.stop()
        workflows, self._workflows = self._workflows, None
        errors: list[BaseException] = []
        if workflows is not None:
            try:
                await (workflows.shutdown() if drain else workflows.abort())
            except Exception as e:  # the services and the queue still close
                errors.append(e)
        errors += await self._engine.stop_services(abort=not drain)
        self._mode = None
        if self.on_change is not None:
            self.on_change()
        if isinstance(mode, OwnerMode):
            await mode.queue.close()
        self._engine.record_errors(errors)
