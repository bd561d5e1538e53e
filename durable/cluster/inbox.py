"""`InboxWriter`: how a process that does not own a store sends it requests.

Each call writes one request object (`durable.cluster.requests`) into the
store's inbox and returns once the object is durable on the store: from then
on the request is the owner's to apply (`durable.cluster.applier`), whatever
happens to this process. Nothing here reads the store's log or needs its
writer, so a writer fences nobody.

- `InboxWriter.submit` creates ``inbox/submit/<run_id>`` if absent. When
  another request for the run id is already there, its input decides: the
  same input is the same run (False), another input raises `InputMismatch`
  at once. If that other request is applied and deleted in between, this
  one is written after it, as a later submission of the run id.
- The other calls create ``inbox/req/<ulid>`` with a fresh ULID from this
  writer's monotonic generator, so the owner applies one writer's requests
  in the order it made them (a call made after another returned).

Transient store errors are retried for ``retry_seconds``, as the log retries
its writes (`durable.store.log.retry`); a create whose first attempt landed
unseen (a timeout) finds its own bytes and succeeds, and should the owner
have applied and deleted it already, the owner's done record makes the
second copy a no-op.
"""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import Mapping
from dataclasses import dataclass

from durable.cluster.applier import InboxApplier, InboxPacing
from durable.cluster.done import done_key
from durable.cluster.requests import (
    NONCE_SIZE,
    REQ_PREFIX,
    CancelRequest,
    ClearSignalRequest,
    ForgetRequest,
    GroupMarkRequest,
    Request,
    RequeueRequest,
    ScheduleRequest,
    SignalRequest,
    SubmitRequest,
    decode_request,
    encode_request,
    submit_name,
)
from durable.engine.records import GroupMembership
from durable.engine.runs import RunSpec
from durable.errors import CorruptRequest, InputMismatch, InvalidArgument, ObjectNotFound
from durable.store.clock import Clock
from durable.store.ids import IdGenerator
from durable.store.log.retry import DEFAULT_RETRY_SECONDS, create_retrying
from durable.store.objects.base import ObjectStore

__all__ = ["InboxApplier", "InboxPacing", "InboxWriter", "Posted"]

#: How long `InboxWriter.submit` waits between looks at a corrupt object
#: holding its name (the owner moves it aside), doubling up to 1 s.
_FIRST_DELAY = 0.005
_MAX_DELAY = 1.0


@dataclass(frozen=True, slots=True)
class Posted:
    """A request on the store: its object ``name`` and ``nonce``."""

    name: str
    nonce: bytes

    @property
    def done_key(self) -> bytes:
        """The KV key of the done record the owner writes once it applied
        the request (`durable.cluster.done`)."""
        return done_key(self.name, self.nonce)


def _nonce() -> bytes:
    return secrets.token_bytes(NONCE_SIZE)


class InboxWriter:
    """Writes requests into the inbox of the store ``objects``; see the
    module docstring. ``clock`` stamps the requests' ULIDs."""

    __slots__ = ("_ids", "_objects", "_retry")

    def __init__(
        self,
        objects: ObjectStore,
        clock: Clock,
        *,
        retry_seconds: float = DEFAULT_RETRY_SECONDS,
    ) -> None:
        if not isinstance(objects, ObjectStore):
            raise InvalidArgument(f"an InboxWriter needs an ObjectStore, got {objects!r}")
        self._objects = objects
        self._ids = IdGenerator(clock)
        self._retry = retry_seconds

    @property
    def objects(self) -> ObjectStore:
        """The store the requests go to."""
        return self._objects

    async def submit(
        self,
        queue: str,
        spec: RunSpec,
        member: GroupMembership | None = None,
        internal: Mapping[bytes, bytes | None] | None = None,
        *,
        once: bool = False,
    ) -> bool:
        """Ask the owner to start run ``spec.run_id`` on ``queue``
        (`WorkflowRuntime.submit_member` with ``member`` and ``internal``).

        True: a new request is on the store. False: a request for the same
        run id with the same input is already in the inbox (the same run).
        `InputMismatch`: the inbox holds the run id with another input
        (nothing written). ``spec`` needs a run id and no effects
        (`InvalidArgument`).
        """
        return await self.post_submit(queue, spec, member, internal, once=once) is not None

    async def post_submit(
        self,
        queue: str,
        spec: RunSpec,
        member: GroupMembership | None = None,
        internal: Mapping[bytes, bytes | None] | None = None,
        *,
        once: bool = False,
    ) -> Posted | None:
        """As `submit`: the request written (for its done record), or None
        when one for the same run id and input was in the inbox already."""
        request = SubmitRequest(queue, _nonce(), spec, member, dict(internal or {}), once)
        name = submit_name(str(spec.run_id))
        data = encode_request(request)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._retry
        delay = _FIRST_DELAY
        while True:
            try:
                existing = await create_retrying(self._objects, name, data, self._retry)
            except ObjectNotFound:
                continue  # taken, then applied and deleted before we read it: write ours
            if existing is None:
                return Posted(name, request.nonce)
            try:
                other = decode_request(name, existing)
            except CorruptRequest:
                # The owner moves it aside; a clash is decided once it is gone.
                if loop.time() + delay > deadline:
                    raise
                await asyncio.sleep(delay)
                delay = min(delay * 2, _MAX_DELAY)
                continue
            if isinstance(other, SubmitRequest) and other.spec.input == spec.input:
                return None
            raise InputMismatch(str(spec.run_id))

    async def signal(self, queue: str, key: str, payload: bytes) -> Posted:
        """Ask the owner to signal ``key`` with ``payload`` (`WorkflowRuntime.signal`)."""
        return await self._post(SignalRequest(queue, _nonce(), key, payload))

    async def cancel(self, queue: str, run_id: str) -> Posted:
        """Ask the owner to cancel run ``run_id`` (`WorkflowRuntime.cancel`)."""
        return await self._post(CancelRequest(queue, _nonce(), run_id))

    async def clear_signal(self, queue: str, key: str) -> Posted:
        """Ask the owner to discard the signal buffered under ``key``
        (`WorkflowRuntime.clear_signal`)."""
        return await self._post(ClearSignalRequest(queue, _nonce(), key))

    async def group_mark(self, queue: str, group_id: str) -> Posted:
        """Ask the owner to write the group marker of ``group_id``
        (`GroupRetention.mark`)."""
        return await self._post(GroupMarkRequest(queue, _nonce(), group_id))

    async def requeue(self, queue: str, job_id: str) -> Posted:
        """Ask the owner to requeue dead job ``job_id`` (`Queue.requeue_dead_job`),
        through the runtime of ``queue``."""
        return await self._post(RequeueRequest(queue, _nonce(), job_id))

    async def forget(self, queue: str, run_id: str) -> Posted:
        """Ask the owner to forget terminated run ``run_id`` (``engine.forget``)."""
        return await self._post(ForgetRequest(queue, _nonce(), run_id))

    async def schedule(
        self, queue: str, schedule_id: str, op: str, at_ms: int, record: bytes | None
    ) -> Posted:
        """Ask the owner to change schedule ``schedule_id`` (`ScheduleRequest`)."""
        return await self._post(ScheduleRequest(queue, _nonce(), schedule_id, op, at_ms, record))

    async def _post(self, request: Request) -> Posted:
        data = encode_request(request)
        while True:
            name = REQ_PREFIX + self._ids.next()
            try:
                if await create_retrying(self._objects, name, data, self._retry) is None:
                    return Posted(name, request.nonce)
            except ObjectNotFound:
                pass
            # The ULID was another writer's (80 random bits: never in practice): the next.
