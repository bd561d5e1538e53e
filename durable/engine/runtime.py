"""`WorkflowRuntime`: submit runs, drive their steps, cancel, observe.

A run is a chain of queue jobs (its steps) on one queue of a `Queue`.
`submit` enqueues step 0 with the run's records in one transaction; a worker
(`spawn`) claims steps, runs the `StepRunner` and settles each outcome in one
transaction with the next step or the run's termination. Everything is in
the store, so a restarted process carries on where the store says the run
was, and `status` works from any process (`WorkflowView`).
"""

from __future__ import annotations

import asyncio
import contextlib
import weakref
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field

from durable import events
from durable._logging import get_logger
from durable.engine import keys
from durable.engine.access import RunQueue
from durable.engine.delivery import StepRunner
from durable.engine.exclusive import EXCLUSIVE_PREFIX, ExclusiveLocks, check_exclusive
from durable.engine.groups import GroupRetention, RunGroup
from durable.engine.hooks import NoopTerminalHook, TerminalHook
from durable.engine.memo import MemoStore
from durable.engine.records import (
    GroupMembership,
    RunRecord,
    decode_run_record,
    decode_terminal_record,
    encode_run_record,
    input_digest,
)
from durable.engine.replay import ReplayStore
from durable.engine.runs import (
    DEFAULT_QUEUE_NAME,
    HEADER_RUN_ID,
    HEADER_TERMINAL,
    RESERVED_HEADER_PREFIX,
    RESERVED_KV_PREFIX,
    RunEnd,
    RunOutcome,
    RunSpec,
    RunStatus,
    RunTermination,
    SubmitOutcome,
    TerminalStatus,
    Terminated,
    default_memo_prefix,
    validate_run_id,
)
from durable.engine.signals import SignalOutcome, Signals
from durable.engine.transitions import first_step, internal_effects, terminate
from durable.engine.view import WorkflowView
from durable.engine.worker import StepWorker
from durable.errors import (
    CorruptEngineRecord,
    InputMismatch,
    InvalidArgument,
    ReservedHeader,
    ReservedKey,
)
from durable.store.clock import Clock
from durable.store.expiry import Delete, DeleteIf, ExpiryEntry, ExpiryIndex
from durable.store.kv import KvEffects
from durable.store.queue import (
    CancelOutcome,
    JobRecord,
    SettlementEffects,
    run_worker_concurrent,
)
from durable.store.queue.wakeups import wait_or_sleep
from durable.store.queue.worker import Slots

__all__ = ["RuntimeOptions", "WorkerHandle", "WorkflowRuntime"]

log = get_logger("durable.engine")


#: What `submit_member` holds for a run with no exclusive key (most runs).
_NO_KEYS = contextlib.nullcontext()


@dataclass(frozen=True, slots=True)
class RuntimeOptions:
    """How a `WorkflowRuntime` runs (semantics 2.3)."""

    #: The queue of the runtime's steps and notifications.
    queue_name: str = DEFAULT_QUEUE_NAME
    #: Where memo objects go; None: ``"{queue_name}-memo"``.
    memo_prefix: str | None = None
    #: Steps run at once by `WorkflowRuntime.spawn`.
    max_concurrent_steps: int = 8
    #: How long an idle worker waits before polling again (seconds).
    poll_interval: float = 0.25
    #: Remove a terminated run's memo entries and terminal record this many
    #: seconds after it terminated; None keeps them.
    memo_retention: float | None = None
    #: Record every runner outcome before settling it, and replay it on a
    #: redelivery instead of running the step again (one object read per
    #: delivery and one write per outcome).
    step_output_replay: bool = False
    #: The clock; None: the queue's.
    clock: Clock | None = field(default=None)
    #: Forget a run group this many seconds after a `RunGroup.results`
    #: consumer saw its last member terminate; None keeps groups until
    #: `RunGroup.forget`.
    group_retention: float | None = None
    #: A limit shared with the workers of other runtimes of this process (the
    #: same queue in every partition of a partitioned store); None: none.
    slots: Slots | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        if not isinstance(self.max_concurrent_steps, int) or self.max_concurrent_steps < 1:
            raise InvalidArgument(
                f"max_concurrent_steps must be an int >= 1, got {self.max_concurrent_steps!r}"
            )
        if not isinstance(self.poll_interval, int | float) or self.poll_interval <= 0:
            raise InvalidArgument(f"poll_interval must be > 0 seconds, got {self.poll_interval!r}")
        if self.memo_retention is not None and (
            not isinstance(self.memo_retention, int | float) or self.memo_retention < 0.001
        ):
            raise InvalidArgument(
                f"memo_retention must be None or at least 0.001 seconds, "
                f"got {self.memo_retention!r}"
            )
        if self.group_retention is not None and (
            not isinstance(self.group_retention, int | float) or self.group_retention < 0.001
        ):
            raise InvalidArgument(
                f"group_retention must be None or at least 0.001 seconds, "
                f"got {self.group_retention!r}"
            )


class WorkerHandle:
    """A running worker; `shutdown` stops claiming and drains running steps."""

    def __init__(
        self, task: asyncio.Task[None], stop: asyncio.Event, sweeper: asyncio.Task[None]
    ) -> None:
        self._task = task
        self._stop = stop
        self._sweeper = sweeper

    async def shutdown(self) -> None:
        """Stop claiming, wait for the steps in flight to settle."""
        self._stop.set()
        self._sweeper.cancel()
        await asyncio.gather(self._sweeper, return_exceptions=True)
        await self._task

    async def abort(self) -> None:
        """Stop at once, as a crash would: steps in flight keep their claims
        (they are redelivered when their leases expire, or at the next open)."""
        self._sweeper.cancel()
        self._task.cancel()
        await asyncio.gather(self._sweeper, self._task, return_exceptions=True)

    @property
    def running(self) -> bool:
        """True until the worker has stopped."""
        return not self._task.done()


def _recheck(spec: RunSpec) -> None:
    """Check again what `RunSpec` checked when it was built but the caller
    can still change in place: the effects' KV keys and the headers."""
    if spec.effects is not None:
        spec.effects.validate()
        for key in [*spec.effects.kv_puts, *spec.effects.kv_deletes]:
            if bytes(key).startswith(RESERVED_KV_PREFIX):
                raise ReservedKey(bytes(key), RESERVED_KV_PREFIX)
    for name in spec.options.headers:
        if name.startswith(RESERVED_HEADER_PREFIX):
            raise ReservedHeader(name, RESERVED_HEADER_PREFIX)


class WorkflowRuntime:
    """The runtime of multi-step runs over one `Queue`; see the module docstring."""

    def __init__(
        self,
        queue: RunQueue,
        runner: StepRunner,
        hook: TerminalHook | None = None,
        options: RuntimeOptions | None = None,
    ) -> None:
        self.queue = queue
        self.runner = runner
        self.hook: TerminalHook = hook if hook is not None else NoopTerminalHook()
        self.options = options or RuntimeOptions()
        self.clock: Clock = self.options.clock or queue.clock
        prefix = self.options.memo_prefix or default_memo_prefix(self.options.queue_name)
        self.memos = MemoStore(queue.writer.objects, prefix)
        self.view = WorkflowView(queue.view, self.memos)
        # The markers of this runtime's runs (its queue's), and those a store
        # written before markers were kept per queue may still hold.
        self._terminals = ExpiryIndex(queue.kv, keys.terminals_prefix(self.options.queue_name))
        self._legacy_terminals = ExpiryIndex(queue.kv, keys.TERMINALS_PREFIX)
        #: The group markers of group retention, and their sweep.
        self.group_markers = GroupRetention(self)
        self.replays = ReplayStore(self.memos)
        #: The durable signal records (`signal`, `clear_signal`).
        self.signals = Signals(queue, self.options.queue_name)
        #: The KV keys a layer built on the runtime keeps for a run (reserved
        #: keys, e.g. the decorators' journal): read when the run's memo
        #: retention passes and deleted with its terminal record. None: none.
        self.run_keys: Callable[[str], Iterable[bytes]] | None = None
        #: Deletes a terminated run and everything it stored, committing the
        #: given KV puts (an inbox request's done record) with the deletes;
        #: False for an unknown run (the forget request of a client, applied
        #: by the owner's inbox). Set by the layer that knows what a run
        #: stores (``engine.forget``). None: forget is not supported.
        self.forget_run: Callable[[str, Mapping[bytes, bytes]], Awaitable[bool]] | None = None
        #: Runs this process asked a store's owner to start (through the
        #: inbox) that this runtime does not show yet: run id -> input
        #: (`pending_input`). A client's; kept by an owner that took over.
        self.pending_starts: dict[str, bytes] = {}
        self._dead_seen = -1
        self._locks: weakref.WeakValueDictionary[str, asyncio.Lock] = weakref.WeakValueDictionary()
        self._exclusive = ExclusiveLocks()

    # ---------------------------------------------------------------- submit

    async def submit(
        self,
        spec: RunSpec,
        *,
        internal: Mapping[bytes, bytes | None] | None = None,
        once: bool = False,
    ) -> SubmitOutcome:
        """Start a run; idempotent on ``(run_id, input)``.

        A re-submission of an active run with the same input returns
        ``newly_submitted=False``; a different input raises `InputMismatch`
        (nothing written). A terminated run's id may be submitted again,
        unless ``once``: then the id names one run for good, and while its
        terminal record is kept the same input returns ``newly_submitted=False``
        (nothing starts) and another raises `InputMismatch` (the decorators
        submit so: a run id is one run).

        ``internal``: KV writes (None: a delete) under the reserved
        ``workflow/`` prefix that commit with the run's first step, for layers
        built on the runtime (the decorators record a run's invocation so). Unlike
        ``spec.effects`` they are not checked: never pass user keys. A write
        under ``workflow/exclusive/`` asks for an exclusive key: the run starts
        only while no other active run holds it, else `DuplicateStart`
        (`durable.engine.exclusive`).
        """
        return await self.submit_member(spec, None, internal=internal, once=once)

    async def submit_member(
        self,
        spec: RunSpec,
        member: GroupMembership | None,
        *,
        internal: Mapping[bytes, bytes | None] | None = None,
        once: bool = False,
    ) -> SubmitOutcome:
        """`submit` of a run group's member (how `RunGroup` submits): the run
        record names ``member``, a pending member record commits with step 0,
        and the terminating settlement rewrites it."""
        if not isinstance(spec, RunSpec):
            raise InvalidArgument(f"submit takes a RunSpec, got {spec!r}")
        _recheck(spec)
        run_id = spec.run_id or self.queue.next_job_id()
        lock = self._locks.get(run_id)
        if lock is None:
            lock = self._locks[run_id] = asyncio.Lock()
        exclusive = sorted(k for k in internal or () if k.startswith(EXCLUSIVE_PREFIX))
        held = self._exclusive.holding(exclusive) if exclusive else _NO_KEYS
        async with held, lock:
            existing = self.view.run_record(run_id)
            if existing is not None:
                return self._duplicate(existing, spec.input)
            ended = self.view.terminal_record(run_id) if once else None
            if ended is not None:
                digest = ended.input_sha256
                if digest is not None and digest != input_digest(spec.input):
                    raise InputMismatch(run_id)
                return SubmitOutcome(run_id, "", False)
            # Exclusive keys (`durable.engine.exclusive`): free, or `DuplicateStart`;
            # their locks are held until the commit below has applied.
            check_exclusive(
                internal, self.queue.kv.get, lambda held: self.view.run_record(held) is not None
            )
            record = RunRecord.for_input(
                run_id, spec.input, self.clock.now_ms(), spec.options.headers, member
            )
            job_id = self.queue.next_job_id()
            options, fx = first_step(
                self.options.queue_name,
                record,
                spec.input,
                job_id,
                priority=spec.options.priority,
                max_attempts=spec.options.max_attempts_per_step,
                run_at_ms=spec.options.run_at_ms(),
                effects=spec.effects,
            )
            internal_effects(internal, fx)
            result = await self.queue.enqueue_with_effects(
                self.options.queue_name, spec.input, options, fx
            )
            if not result.is_new:  # a step 0 of this id is still queued
                existing = self.view.run_record(run_id)
                if existing is not None:
                    return self._duplicate(existing, spec.input)
                return SubmitOutcome(run_id, result.id, False)
            return SubmitOutcome(run_id, job_id, True)

    def _duplicate(self, existing: RunRecord, input: bytes) -> SubmitOutcome:
        if not existing.matches_input(input):
            raise InputMismatch(existing.run_id)
        pointer = self.view.pointer(existing.run_id)
        job_id = pointer.job_id if pointer is not None else ""
        return SubmitOutcome(existing.run_id, job_id, False)

    # ----------------------------------------------------------- observing

    def status(self, run_id: str) -> RunStatus | None:
        """Where run ``run_id`` is (None: unknown)."""
        return self.view.status(run_id)

    def pending_input(self, run_id: str) -> bytes | None:
        """The input of run ``run_id`` if this process asked the store's owner
        to start it (`pending_starts`: a client's submission goes through the
        inbox) and this runtime does not show it yet; else None."""
        if not self.pending_starts:
            return None
        if self.view.status(run_id) is not None:
            self.pending_starts.pop(run_id, None)  # visible: no longer pending
            return None
        return self.pending_starts.get(run_id)

    async def catch_up(self, run_id: str) -> None:
        """Make sure that `status` not showing run ``run_id`` means the store
        does not hold it: nothing to do here (an owner's memory is the
        store); a client's view reads the log once more
        (`durable.cluster.client.ClientRuntime`)."""

    async def until_visible(self, run_id: str, timeout: float | None) -> None:  # noqa: ASYNC109
        """Return once `status` shows run ``run_id`` if this process submitted
        it (`pending_input`; `TimeoutError` after ``timeout`` seconds of the
        runtime's clock), or once `catch_up` made sure it is unknown."""
        if self.pending_input(run_id) is None:
            if self.view.status(run_id) is None:
                await self.catch_up(run_id)
            return
        deadline = None if timeout is None else self.clock.now_ms() + round(timeout * 1000)
        key = keys.pointer_key(run_id)
        while self.view.status(run_id) is None:
            await self._next_write(
                key, deadline, f"run {run_id!r} did not start within {timeout} s"
            )

    async def _next_write(self, key: bytes, deadline: int | None, late: str) -> None:
        """Wait for the next commit that writes KV ``key``; `TimeoutError`
        saying ``late`` at ``deadline`` (ms of the runtime's clock; None: no
        limit). The watch is set before the first await: call it right after
        the read it follows, and no write slips between."""
        kv, clock = self.queue.kv, self.clock
        fut = kv.watch(key)
        try:
            left = None if deadline is None else (deadline - clock.now_ms()) / 1000
            if not await wait_or_sleep(clock, fut, left):
                raise TimeoutError(late)
            fut.result()
        finally:
            kv.unwatch(key, fut)

    async def outcome(self, run_id: str) -> RunOutcome | None:
        """The committed outcome of a terminated run (None while active)."""
        return await self.view.outcome(run_id)

    async def wait(self, run_id: str) -> RunEnd | None:
        """Wait until run ``run_id`` terminates; None if it is unknown."""
        return await self.wait_timeout(run_id, None)

    async def wait_timeout(self, run_id: str, timeout: float | None) -> RunEnd | None:  # noqa: ASYNC109
        """`wait` for at most ``timeout`` seconds of the runtime's clock;
        `TimeoutError` after that.

        Costs nothing per step: the wait sleeps until the commit that writes
        the run's terminal record is durable.
        """
        validate_run_id(run_id)
        clock = self.clock
        deadline = None if timeout is None else clock.now_ms() + round(timeout * 1000)
        await self.until_visible(run_id, timeout)
        key = keys.outcome_key(run_id)
        while True:
            status = self.view.status(run_id)
            if status is None:
                return None
            if isinstance(status.state, Terminated):
                await self.queue.writer.flush()  # memory may be ahead of the store
                return RunEnd(status.state.termination, await self.view.outcome(run_id))
            late = f"run {run_id!r} did not terminate within {timeout} s"
            await self._next_write(key, deadline, late)  # no await since the read

    # --------------------------------------------------------------- cancel

    async def cancel(self, run_id: str, *, internal: Mapping[bytes, bytes] | None = None) -> bool:
        """Cancel an active run; False if it is unknown or already terminal.

        The request is recorded on the run record (it survives restarts);
        a queued step is removed and the run terminated before this returns;
        a running step is told through its cancellation token, and the
        worker terminates the run when it returns.

        ``internal``: KV writes under the reserved ``workflow/`` prefix for
        layers built on the runtime (the cluster's inbox records a request
        so), committed exactly once: with the write that records the request
        on the run record, or, when there is nothing to record (the run is
        unknown or terminated, or a cancellation was already requested), in
        a commit of their own made only while the run record is still the
        one read. Not checked: never pass user keys.
        """
        validate_run_id(run_id)
        key = keys.run_key(run_id)
        while True:
            raw = self.queue.kv.get(key)
            fx = internal_effects(internal)
            if raw is None:
                if fx.is_empty() or await self.queue.kv_compare_commit(key, None, fx) is not None:
                    return False
                continue  # submitted in between: look again
            record = decode_run_record(raw, f"run record of {run_id!r}")
            if not record.cancel_requested:
                fx.kv_put(key, encode_run_record(record.with_cancel_requested()))
            if fx.is_empty() or await self.queue.kv_compare_commit(key, raw, fx) is not None:
                break
            # changed under us: look again
        pointer = self.view.pointer(run_id)
        if pointer is None:
            return True  # terminated in between; the flag went with the record
        job = self.queue.job_record(pointer.job_id)
        termination = RunTermination(
            TerminalStatus.CANCELLED, pointer.step_number, self.clock.now_ms()
        )
        outcome = RunOutcome(
            run_id, TerminalStatus.CANCELLED, pointer.step_number, headers=record.headers
        )
        fx = self.termination_effects(
            record,
            termination,
            outcome,
            step_job_id=pointer.job_id,
            priority=job.priority if job is not None else None,
            max_attempts=job.max_attempts if job is not None else None,
        )
        fx = self.signals.cancel_effects(job, fx)  # a wait across partitions is withdrawn
        # Pending or scheduled: removed, and the run terminated with it.
        # Claimed: the token fired; the worker settles the run as cancelled.
        # Not found: the step moved on; its successor's claim sees the flag.
        done, _ = await self.queue.cancel_with(pointer.job_id, fx)
        if done is CancelOutcome.REMOVED:
            events.emit(
                "terminate",
                run_id=run_id,
                queue=self.options.queue_name,
                delivery=pointer.step_number,
                status="cancelled",
                error=None,
            )
        return True

    # -------------------------------------------------------------- signals

    async def signal(
        self,
        correlation_key: str,
        payload: bytes,
        *,
        internal: Mapping[bytes, bytes] | None = None,
    ) -> SignalOutcome:
        """Wake the run waiting on ``correlation_key`` with ``payload``, or buffer it.

        `SignalOutcome.DELIVERED`: a waiting run was woken; its next step
        sees ``payload`` as ``Step.signal`` (on every redelivery too).
        `SignalOutcome.BUFFERED`: no run waits; the signal is kept durably
        (replacing one buffered before) for the next run that waits on the
        key. Durable when this returns. Bad input raises `InvalidArgument`
        (nothing written).

        ``internal``: KV writes under the reserved ``workflow/`` prefix for
        layers built on the runtime, committed with the signal's buffer
        write (the commit that makes the signal durable). Not checked:
        never pass user keys.
        """
        return await self.signals.signal_with(correlation_key, payload, internal_effects(internal))

    async def clear_signal(
        self, correlation_key: str, *, internal: Mapping[bytes, bytes] | None = None
    ) -> bool:
        """Discard the signal buffered under ``correlation_key``; False if none was.

        ``internal``: KV writes under the reserved ``workflow/`` prefix,
        committed with the buffer's delete, or in a commit of their own
        (while nothing is buffered) when there is nothing to discard.
        """
        return await self.signals.clear(correlation_key, internal=internal)

    # ------------------------------------------------------- memo retention

    def termination_effects(
        self,
        record: RunRecord,
        termination: RunTermination,
        outcome: RunOutcome,
        *,
        step_job_id: str,
        priority: int | None,
        max_attempts: int | None,
        effects: SettlementEffects | None = None,
        record_outcome: bool = False,
    ) -> SettlementEffects:
        """``effects`` (new if None) plus the termination of ``record``'s run
        at step job ``step_job_id``: the records out, the terminal record and
        marker in, the group member record rewritten, the notification job if
        the hook observes it (deduplicated per termination: see
        `keys.notification_dedup`)."""
        return terminate(
            effects if effects is not None else SettlementEffects(),
            queue=self.options.queue_name,
            termination=termination,
            outcome=outcome,
            step_job_id=step_job_id,
            input_sha256=record.input_sha256,
            notify=self.hook.observes(outcome),
            priority=priority,
            max_attempts=max_attempts,
            marker_key=self.marker_key(record.run_id, termination.terminated_at_ms),
            record_outcome=record_outcome,
            member=record.member,
        )

    def marker_key(self, run_id: str, terminated_at_ms: int) -> bytes | None:
        """The terminal-marker key of a termination (None without memo retention)."""
        if self.options.memo_retention is None:
            return None
        return self._terminals.entry_key(terminated_at_ms, run_id.encode())

    async def sweep_memos(self) -> int:
        """Remove the memo entries and terminal records of runs whose retention
        has passed; how many runs. A no-op without memo retention.

        Only this runtime's runs: the markers are kept per queue, so runtimes
        on other queues of the store (a `JobRunner`, another runtime with
        another retention or memo prefix) keep theirs for their own window.
        Markers a store written before that still holds name no queue; they
        are swept as that version did (by any runtime, with its retention).
        """
        retention = self.options.memo_retention
        if retention is None:
            return 0

        async def expire(entry: ExpiryEntry) -> Delete | DeleteIf:
            run_id = entry.suffix.decode()
            await self.memos.clear_run(run_id)
            # Read after the last await: nothing commits before the sweep applies
            # this answer. A run submitted again under this id that terminated
            # since owns the terminal record now; its own marker removes it.
            key = keys.outcome_key(run_id)
            raw = self.queue.kv.get(key)
            if raw is None:
                return Delete()
            try:
                at_ms = decode_terminal_record(raw).termination.terminated_at_ms
            except CorruptEngineRecord:
                at_ms = entry.at_ms  # unreadable: it goes with the marker
            if at_ms != entry.at_ms:
                return Delete()
            effects = KvEffects().delete(key)
            for owned in self.run_keys(run_id) if self.run_keys is not None else ():
                effects.delete(owned)
            return DeleteIf(key, raw, effects)

        now = self.clock.now_ms()
        removed = await self._terminals.sweep(now, retention, expire)
        return removed + await self._legacy_terminals.sweep(now, retention, expire)

    # ----------------------------------------------------------- run groups

    def group(self, group_id: str) -> RunGroup:
        """The run group ``group_id`` of this runtime (nothing is read or written
        until a method of the group is called)."""
        return RunGroup(self, group_id)

    async def sweep_groups(self) -> int:
        """Forget the run groups whose group retention has passed; how many
        group markers went. A no-op without group retention."""
        return await self.group_markers.sweep()

    # --------------------------------------------------------- reconciliation

    async def reconcile_dead(self) -> int:
        """Terminate runs whose current step was dead-lettered outside the
        runtime (by the reaper at the attempt limit, or by crash recovery at
        open): Failed with the job's last error, notification included.
        Returns how many runs it terminated.

        The first call reads every dead job of the queue; later calls read
        them again only when a job entered Dead since the last complete pass
        (`Queue.dead_letter_events`, which retention sweeps do not lower:
        a dead-letter and a dead-retention sweep in one reaper tick leave the
        dead count unchanged, not this one), so a pass costs nothing when no
        job died."""
        name = self.options.queue_name
        dead = self.queue.dead_letter_events(name)
        if dead == self._dead_seen:
            return 0
        ended = 0
        after: str | None = None
        while page := self.queue.dead_jobs(name, after_id=after, limit=100):
            after = page[-1].id
            for job in page:
                run_id = job.headers.get(HEADER_RUN_ID)
                if run_id is None or job.headers.get(HEADER_TERMINAL) == "1":
                    continue
                ended += await self._fail_dead_step(run_id, job)
        self._dead_seen = dead
        return ended

    async def _fail_dead_step(self, run_id: str, job: JobRecord) -> int:
        key = keys.run_key(run_id)
        while True:
            raw = self.queue.kv.get(key)
            pointer = self.view.pointer(run_id)
            if raw is None or pointer is None or pointer.job_id != job.id:
                return 0  # terminated already, or the run moved on
            record = decode_run_record(raw, f"run record of {run_id!r}")
            step = pointer.step_number
            error = job.last_error
            termination = RunTermination(
                TerminalStatus.FAILED, step, self.clock.now_ms(), error=error
            )
            outcome = RunOutcome(
                run_id, TerminalStatus.FAILED, step, error=error, headers=record.headers
            )
            fx = self.termination_effects(
                record,
                termination,
                outcome,
                step_job_id=job.id,
                priority=job.priority,
                max_attempts=job.max_attempts,
            )
            # Only if the run record is still the one read; if a cancellation
            # request changed it meanwhile, look again (no new dead letter
            # would bring this run back).
            if await self.queue.kv_compare_commit(key, raw, fx) is not None:
                return 1

    async def _maintenance_loop(self) -> None:
        while True:
            for task in (self.reconcile_dead, self.sweep_memos, self.sweep_groups):
                try:
                    if count := await task():
                        events.emit(
                            "sweep", queue=self.options.queue_name, kind=task.__name__, count=count
                        )
                except Exception as e:  # logged; the next pass retries
                    log.error("runtime maintenance failed", task=task.__name__, error=str(e))
            await self.clock.sleep(self.options.poll_interval)

    # --------------------------------------------------------------- worker

    def spawn(self) -> WorkerHandle:
        """Start a worker task on this event loop; `WorkerHandle.shutdown` stops it."""
        stop = asyncio.Event()
        task = asyncio.create_task(
            run_worker_concurrent(
                self.queue,
                StepWorker(self),
                name=self.options.queue_name,
                concurrency=self.options.max_concurrent_steps,
                poll_interval=self.options.poll_interval,
                shutdown=stop,
                slots=self.options.slots,
            ),
            name=f"durable-runtime {self.options.queue_name}",
        )
        sweeper = asyncio.create_task(self._maintenance_loop(), name="durable-maintenance")
        return WorkerHandle(task, stop, sweeper)
