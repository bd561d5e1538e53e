"""The store as a process that does not own it reaches it: `ClientQueue`, `ClientRuntime`.

A *client* (a web server, a script, a standby worker) reads the store
through a read-only view that a `Follower` keeps caught up with the log
(`durable.store.log.follow`), and writes nothing itself: every operation
that would write becomes a request in the store's inbox
(`durable.cluster.inbox.InboxWriter`), which the owner applies. So a client
never fences the owner, and anything the owner commits reaches the client's
view within the follower's pace.

`ClientQueue` gives the workflow runtime the store interface it runs on
(`durable.engine.access.RunQueue`): its reads serve from the view, its
writes raise `ReadOnlyStore`. `ClientRuntime` is the runtime over it: every
read of `WorkflowRuntime` (status, outcome, wait, groups' and jobs' reads)
works unchanged, and the operations that write go to the inbox:

- `submit` / `submit_member`: a run the view shows active is answered as
  the owner would (the same input: not new; another: `InputMismatch`);
  else a submit request (`InputMismatch` at once if the inbox holds the run
  id with another input).
- `signal`: a signal request; `SignalOutcome.SENT`.
- `cancel`: False for a run the view shows terminated, or does not know and
  this client did not start; else a cancel request, True.
- `clear_signal`: a clear request; True if the view shows a buffered signal.
- a group's marker: a group-mark request. `spawn`: `ReadOnlyStore` (a client
  runs nothing).

- `post_cancel`, `post_signal`, `requeue_dead`, `post_forget`,
  `post_schedule`: the same
  requests, returning the `Posted` request; `wait_done` then awaits the
  owner's done record of it (applied, or the error it failed with), for a
  caller that must report the outcome (the CLI).

A request is durable in the inbox when the call returns. Waits sleep on
the view's key watches; a watch wakes the follower, which polls at its busy
pace until the log goes quiet (a local directory: every 2 ms, backing off
to 50 ms; object stores: 0.2 s to 5 s).
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, NoReturn

from durable.cluster.done import DoneRecord, decode_done
from durable.cluster.inbox import InboxWriter, Posted
from durable.engine import keys
from durable.engine.delivery import StepRunner
from durable.engine.exclusive import EXCLUSIVE_PREFIX
from durable.engine.groups import GroupRetention
from durable.engine.hooks import TerminalHook
from durable.engine.records import GroupMembership, input_digest
from durable.engine.runs import RunSpec, SubmitOutcome, Terminated
from durable.engine.runtime import RuntimeOptions, WorkerHandle, WorkflowRuntime
from durable.engine.signals import SignalOutcome
from durable.errors import InputMismatch, InvalidArgument, ReadOnlyStore
from durable.store.clock import Clock
from durable.store.ids import IdGenerator
from durable.store.kv import KvNamespace
from durable.store.log import Follower, LogReader
from durable.store.log.retry import DEFAULT_RETRY_SECONDS
from durable.store.objects.base import ObjectStore
from durable.store.queue import (
    CancelOutcome,
    EnqueueOptions,
    EnqueueResult,
    JobRecord,
    OpenOptions,
    QueueReader,
    SettlementEffects,
    WakeOutcome,
)
from durable.store.queue.leases import Claim
from durable.store.queue.view import QueueView
from durable.store.queue.wakeups import wait_or_sleep

if TYPE_CHECKING:
    from durable.engine.access import RunWriter

__all__ = ["ClientQueue", "ClientRuntime"]


#: `ClientQueue.started` is pruned of visible runs once it holds this many.
_PRUNE_FLOOR = 1024


class _ClientWriter:
    """The `RunWriter` of a client: its objects; nothing of its own to flush."""

    def __init__(self, objects: ObjectStore) -> None:
        self._objects = objects

    @property
    def objects(self) -> ObjectStore:
        return self._objects

    async def flush(self) -> None:
        """A client commits nothing: what it reads is durable already."""

    def flush_within(self, seconds: float) -> None:
        """A client commits nothing: nothing to flush."""


class ClientQueue:
    """A store's `durable.engine.access.RunQueue` for a process that does not
    own it; see the module docstring. Open with `ClientQueue.open`, close
    with `ClientQueue.close`."""

    def __init__(
        self,
        reader: QueueReader,
        clock: Clock,
        *,
        follower: Follower | None = None,
        retry_seconds: float = DEFAULT_RETRY_SECONDS,
    ) -> None:
        self._reader = reader
        self._clock = clock
        self._objects = reader.reader.objects
        self._writer = _ClientWriter(self._objects)
        self._ids = IdGenerator(clock)
        #: The runs this client submitted that its view did not show yet when
        #: last asked: run id -> input (`ClientRuntime.pending_input`).
        self.started: dict[str, bytes] = {}
        self._prune_at = _PRUNE_FLOOR
        #: The submit requests asking for an exclusive key whose decision
        #: the submitter has not taken yet (`posted_submit`).
        self.submits: dict[str, Posted] = {}
        #: Keeps the view caught up with the log (started by `open`).
        self.follower = follower if follower is not None else Follower(reader.reader)
        #: Where this client's requests go.
        self.inbox = InboxWriter(self._objects, clock, retry_seconds=retry_seconds)

    def posted_submit(self, run_id: str) -> Posted | None:
        """The submit request of run ``run_id`` that asked for an exclusive
        key (`durable.engine.exclusive`), once: the owner's done record of it
        says whether it started (None: none was written)."""
        return self.submits.pop(run_id, None)

    def remember_start(self, run_id: str, input: bytes, visible: Callable[[str], bool]) -> None:
        """Note that this client asked for run ``run_id`` (`started`). The
        runs the view shows (``visible``) are dropped each time the map has
        doubled (amortised O(1)), so a process that starts runs and never
        looks at them holds only those the owner has not applied yet."""
        started = self.started
        started[run_id] = input
        if len(started) >= self._prune_at:
            for known in [r for r in started if visible(r)]:
                del started[known]
            self._prune_at = max(_PRUNE_FLOOR, 2 * len(started))

    @classmethod
    async def open(
        cls,
        objects: ObjectStore,
        clock: Clock,
        *,
        busy: float | None = None,
        idle: float | None = None,
        retry_seconds: float = DEFAULT_RETRY_SECONDS,
    ) -> ClientQueue:
        """Load the store's view and start following it. `StoreNotInitialized`
        when no owner ever opened the store (start a worker first)."""
        reader = QueueReader(await LogReader.open(objects, retry_seconds))
        follower = Follower(reader.reader, busy=busy, idle=idle)
        client = cls(reader, clock, follower=follower, retry_seconds=retry_seconds)
        follower.start()
        return client

    async def close(self) -> None:
        """Stop following the store; its pending watches fail with `StoreClosed`."""
        await self.follower.stop()
        await self._reader.close()

    # ------------------------------------------------------------- reads

    @property
    def url(self) -> str:
        """The store's location."""
        return self._objects.url

    @property
    def reader(self) -> QueueReader:
        """The read-only view this client reads."""
        return self._reader

    @property
    def clock(self) -> Clock:
        """The clock of this process's timestamps and timers."""
        return self._clock

    @property
    def options(self) -> OpenOptions:
        """The defaults (a client opens no queue of its own)."""
        return OpenOptions(clock=self._clock)

    @property
    def writer(self) -> RunWriter:
        """Objects, and a flush that has nothing to do."""
        return self._writer

    @property
    def kv(self) -> KvNamespace:
        """The KV namespace as the view has it (read-only; watches work)."""
        return self._reader.kv

    @property
    def view(self) -> QueueView:
        """The queue reads over the view."""
        return self._reader

    def next_job_id(self) -> str:
        """A new id (a ULID from this process's generator)."""
        return self._ids.next()

    def job_record(self, id: str) -> JobRecord | None:
        """Job ``id``'s record as the view has it."""
        return self._reader.job_record(id)

    def dead_jobs(
        self, queue: str, after_id: str | None = None, limit: int = 100
    ) -> list[JobRecord]:
        """``queue``'s dead jobs as the view has them."""
        return self._reader.dead_jobs(queue, after_id, limit)

    def dead_letter_events(self, queue: str) -> int:
        """0: dead letters are the owner's to reconcile."""
        return 0

    # ------------------------------------------------------------ writes

    def _refuse(self, operation: str) -> NoReturn:
        raise ReadOnlyStore(
            self.url, f"{operation} (this process does not own the store: it writes requests)"
        )

    async def enqueue_with(
        self, queue: str, payload: bytes, options: EnqueueOptions | None = None
    ) -> EnqueueResult:
        """Refused: `ReadOnlyStore`."""
        self._refuse("enqueue")

    async def enqueue_with_effects(
        self,
        queue: str,
        payload: bytes,
        options: EnqueueOptions | None = None,
        effects: SettlementEffects | None = None,
    ) -> EnqueueResult:
        """Refused: `ReadOnlyStore`."""
        self._refuse("enqueue")

    async def cancel_with(
        self, id: str, effects: SettlementEffects
    ) -> tuple[CancelOutcome, list[EnqueueResult]]:
        """Refused: `ReadOnlyStore`."""
        self._refuse("cancel a job")

    async def wake_scheduled(
        self,
        id: str,
        wake_payload: bytes | None = None,
        *,
        kv_compare_deletes: Mapping[bytes, bytes] | None = None,
        kv_puts: Mapping[bytes, bytes] | None = None,
    ) -> WakeOutcome:
        """Refused: `ReadOnlyStore`."""
        self._refuse("wake a job")

    async def commit_effects(self, effects: SettlementEffects) -> list[EnqueueResult]:
        """Refused: `ReadOnlyStore`."""
        self._refuse("commit")

    async def kv_compare_commit(
        self, key: bytes, expected: bytes | None, effects: SettlementEffects
    ) -> list[EnqueueResult] | None:
        """Refused: `ReadOnlyStore`."""
        self._refuse("commit")

    async def claim(self, queue: str, /) -> Claim | None:
        """Refused: `ReadOnlyStore`."""
        self._refuse("claim")

    async def claim_batch(
        self, queue: str, n: int, /, *, claimed: Callable[[int], None] | None = None
    ) -> list[Claim]:
        """Refused: `ReadOnlyStore`."""
        self._refuse("claim")

    async def wait_for_jobs_on(
        self, queue: str, max_wait_seconds: float, /, *, until: asyncio.Future[Any] | None = None
    ) -> bool:
        """Refused: `ReadOnlyStore`."""
        self._refuse("wait for jobs")

    async def ack_with(self, claim: Claim, effects: SettlementEffects, /) -> object:
        """Refused: `ReadOnlyStore`."""
        self._refuse("settle")

    async def nack_with(
        self,
        claim: Claim,
        error: str,
        effects: SettlementEffects,
        /,
        *,
        retry_after: float | None = None,
    ) -> object:
        """Refused: `ReadOnlyStore`."""
        self._refuse("settle")

    async def dead_letter_with(
        self, claim: Claim, reason: str, effects: SettlementEffects, /
    ) -> object:
        """Refused: `ReadOnlyStore`."""
        self._refuse("settle")


class _ClientGroupMarks(GroupRetention):
    """Group markers of a client: a request to the owner; no sweep."""

    __slots__ = ("_client",)

    def __init__(self, runtime: ClientRuntime) -> None:
        super().__init__(runtime)
        self._client = runtime

    async def mark(self, group_id: str, *, internal: Mapping[bytes, bytes] | None = None) -> bool:
        if self._client.options.group_retention is None:
            return False
        await self._client.client.inbox.group_mark(self._client.options.queue_name, group_id)
        return True

    async def sweep(self) -> int:
        return 0


class ClientRuntime(WorkflowRuntime):
    """A `WorkflowRuntime` over a `ClientQueue`; see the module docstring."""

    def __init__(
        self,
        queue: ClientQueue,
        runner: StepRunner,
        hook: TerminalHook | None = None,
        options: RuntimeOptions | None = None,
    ) -> None:
        super().__init__(queue, runner, hook, options)
        #: The client store this runtime reads and sends requests through.
        self.client = queue
        self.group_markers = _ClientGroupMarks(self)
        self.pending_starts = queue.started  # kept by an owner that takes over

    async def submit_member(
        self,
        spec: RunSpec,
        member: GroupMembership | None,
        *,
        internal: Mapping[bytes, bytes | None] | None = None,
        once: bool = False,
    ) -> SubmitOutcome:
        """As `WorkflowRuntime.submit_member`, through the inbox; see the module
        docstring. ``newly_submitted`` is True when this client wrote the
        request; the job id is not known to a client (empty)."""
        if not isinstance(spec, RunSpec):
            raise InvalidArgument(f"submit takes a RunSpec, got {spec!r}")
        if spec.effects is not None:
            raise InvalidArgument(
                "a run's KV effects are committed with its first step by the store's owner: "
                "submit runs with effects from the process that owns the store"
            )
        run_id = spec.run_id or self.queue.next_job_id()
        if spec.run_id is None:
            spec = dataclasses.replace(spec, run_id=run_id)
        existing = self.view.run_record(run_id)
        if existing is not None:
            return self._duplicate(existing, spec.input)
        if once and (ended := self.view.terminal_record(run_id)) is not None:
            digest = ended.input_sha256
            if digest is not None and digest != input_digest(spec.input):
                raise InputMismatch(run_id)
            return SubmitOutcome(run_id, "", False)
        posted = await self.client.inbox.post_submit(
            self.options.queue_name, spec, member, internal, once=once
        )
        new = posted is not None
        if posted is not None and any(k.startswith(EXCLUSIVE_PREFIX) for k in internal or ()):
            self.client.submits[run_id] = posted  # the owner decides: `posted_submit`
        self.client.remember_start(run_id, spec.input, lambda r: self.view.status(r) is not None)
        self.client.follower.wake()
        return SubmitOutcome(run_id, "", new)

    async def signal(
        self,
        correlation_key: str,
        payload: bytes,
        *,
        internal: Mapping[bytes, bytes] | None = None,
    ) -> SignalOutcome:
        """A signal request: `SignalOutcome.SENT` once it is in the inbox."""
        if internal:
            raise InvalidArgument("internal KV writes ride the owner's own operations")
        await self.post_signal(correlation_key, payload)
        return SignalOutcome.SENT

    async def post_signal(self, correlation_key: str, payload: bytes) -> Posted:
        """A signal request (as `signal`); the request, for `wait_done`."""
        posted = await self.client.inbox.signal(self.options.queue_name, correlation_key, payload)
        self.client.follower.wake()
        return posted

    async def clear_signal(
        self, correlation_key: str, *, internal: Mapping[bytes, bytes] | None = None
    ) -> bool:
        """A clear request; True if the view shows a signal buffered under the key."""
        if internal:
            raise InvalidArgument("internal KV writes ride the owner's own operations")
        buffered = self.queue.kv.get(keys.signal_buffer_key(correlation_key)) is not None
        await self.client.inbox.clear_signal(self.options.queue_name, correlation_key)
        return buffered

    async def cancel(self, run_id: str, *, internal: Mapping[bytes, bytes] | None = None) -> bool:
        """A cancel request; False (nothing sent) for a run the view shows
        terminated, or does not know and this client did not start."""
        if internal:
            raise InvalidArgument("internal KV writes ride the owner's own operations")
        return await self.post_cancel(run_id) is not None

    async def post_cancel(self, run_id: str) -> Posted | None:
        """As `cancel`: the request (for `wait_done`), or None when nothing
        was sent (a run the view shows terminated, or does not know and this
        client did not start)."""
        status = self.status(run_id)
        if status is None and run_id not in self.client.started:
            await self.catch_up(run_id)
            status = self.status(run_id)
            if status is None:
                return None
        if status is not None and isinstance(status.state, Terminated):
            return None
        posted = await self.client.inbox.cancel(self.options.queue_name, run_id)
        self.client.follower.wake()
        return posted

    async def requeue_dead(self, job_id: str) -> Posted:
        """A requeue request for dead job ``job_id`` (`Queue.requeue_dead_job`
        in the owner; a job that is not dead by then is left as it is, its
        done record says `InvalidState`); the request, for `wait_done`."""
        posted = await self.client.inbox.requeue(self.options.queue_name, job_id)
        self.client.follower.wake()
        return posted

    async def post_forget(self, run_id: str) -> Posted:
        """A forget request for run ``run_id`` (``engine.forget`` in the
        owner: its done record says `WrongRunState` for an active run,
        `RunNotFound` for an unknown one); the request, for `wait_done`."""
        posted = await self.client.inbox.forget(self.options.queue_name, run_id)
        self.client.follower.wake()
        return posted

    async def post_schedule(
        self, schedule_id: str, op: str, at_ms: int, record: bytes | None
    ) -> Posted:
        """A schedule change request (`durable.cluster.requests.ScheduleRequest`:
        its done record says `ScheduleNotFound` for a pause or resume of an
        absent schedule); the request, for `wait_done`."""
        posted = await self.client.inbox.schedule(
            self.options.queue_name, schedule_id, op, at_ms, record
        )
        self.client.follower.wake()
        return posted

    async def wait_done(self, posted: Posted, timeout: float | None) -> DoneRecord | None:  # noqa: ASYNC109
        """The owner's done record of request ``posted`` once the view shows
        it (its ``error`` and ``error_type`` say why the request failed;
        None: it took effect), or None when ``timeout`` seconds (of the
        runtime's clock; None: no limit) pass first: no owner applied it
        yet, and it stays in the inbox for the next one. Done records are
        kept for an hour (`durable.cluster.done.DONE_RETENTION`): wait for
        a request well within that."""
        kv = self.queue.kv.internal()
        key = posted.done_key
        clock = self.clock
        deadline = None if timeout is None else clock.now_ms() + round(timeout * 1000)
        self.client.follower.wake()
        while (raw := kv.get(key)) is None:
            fut = kv.watch(key)
            try:
                left = None if deadline is None else (deadline - clock.now_ms()) / 1000
                if left is not None and left <= 0:
                    return None
                if not await wait_or_sleep(clock, fut, left):
                    return None
                fut.result()
            finally:
                kv.unwatch(key, fut)
        return decode_done(raw, f"done record of inbox request {posted.name!r}")

    async def catch_up(self, run_id: str) -> None:
        """The view reads the log once more (a poll that begins now), so a
        run another process started, or this one started as the owner
        before it lost the store, is not reported unknown because the view
        had not seen it yet."""
        follower = self.client.follower
        follower.wake()
        await follower.refreshed()

    def spawn(self) -> WorkerHandle:
        """Refused: a client runs nothing (`ReadOnlyStore`)."""
        self.client._refuse("run a worker")
