"""Durable signals (semantics 2.10) at the runtime's API.

The three delivery paths (a signal wakes a waiting run, the timeout fires,
a signal buffered before its waiter is consumed by it), each also across a
restart (the queue closed and opened again, a new runtime), with step-output
replay on; the rules (one buffered signal per key, one waiter per key,
clear_signal, bad input); redeliveries of a resumed step; a cancelled
waiter; and a signal racing a registration whose next payload is offloaded.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Iterable

import pytest
from engine_helpers import HOUR, QUEUE, Factory, Opener, finish

from durable.engine import (
    HEADER_SIGNAL_WAIT,
    Pending,
    RunSpec,
    RuntimeOptions,
    Step,
    StepError,
    StepErrorKind,
    StepOutcome,
    Succeed,
    TerminalStatus,
    WorkflowRuntime,
)
from durable.engine import keys as engine_keys
from durable.engine.signals import SignalOutcome
from durable.errors import InvalidArgument, StoreError
from durable.store.clock import MockClock
from durable.store.objects.base import ObjectStore
from durable.store.queue import JobRecord, JobStatus, OpenOptions, Queue, QueueConfig
from durable.testing import FaultyObjectStore, SimulatedCrash

KEY = "approval:invoice-7"
TIMEOUT = 60.0
DELIVERED = SignalOutcome.DELIVERED
BUFFERED = SignalOutcome.BUFFERED

#: Runs one step of a test inside `Waiter` (step 1, after recording the delivery).
Hook = Callable[[Step], Awaitable[None]]


class Waiter:
    """Step 0 waits for a signal on ``key``; step 1 records what it sees and
    succeeds with ``approved:<signal>`` (``timed out`` without one).

    ``then`` runs in step 1 after recording (it may raise to fail the attempt).
    """

    def __init__(self, key: str = KEY, payload: bytes = b"request", then: Hook | None = None):
        self.key = key
        self.payload = payload
        self.then = then
        #: (attempt, signal, delivered record at the time) per step-1 delivery.
        self.seen: list[tuple[int, bytes | None, bytes | None]] = []
        self.step0 = 0

    async def run_step(self, step: Step) -> StepOutcome:
        """The two steps."""
        if step.step_number == 0:
            self.step0 += 1
            return StepOutcome.continue_on_signal(self.payload, self.key, TIMEOUT)
        record = step.kv.get(engine_keys.signal_delivered_key(step.run_id, step.step_number))
        self.seen.append((step.attempts, step.signal, record))
        if self.then is not None:
            await self.then(step)
        return Succeed(b"approved:" + step.signal if step.signal is not None else b"timed out")


def signal_records(q: Queue) -> dict[bytes, bytes]:
    """Every signal record in the store (buffers, waiter index, delivered)."""
    return dict(q.kv.scan(b"workflow/signal-", limit=100).entries)


def buf(key: str = KEY) -> bytes:
    """The buffer key of ``key``."""
    return engine_keys.signal_buffer_key(key)


def idx(key: str = KEY) -> bytes:
    """The waiter index key of ``key``."""
    return engine_keys.signal_wait_key(key)


async def settle_step(q: Queue, job_id: str) -> None:
    """Wait until step job ``job_id`` has been settled."""
    await asyncio.wait_for(q.wait_for_completion(job_id, None), 30)


def waiting_job(rt: WorkflowRuntime, run_id: str) -> JobRecord:
    """The scheduled step job of a run waiting for a signal."""
    pointer = rt.view.pointer(run_id)
    assert pointer is not None
    job = rt.queue.job_record(pointer.job_id)
    assert job is not None
    return job


async def start_waiting(rt: WorkflowRuntime, run_id: str) -> JobRecord:
    """Submit ``run_id`` and run its step 0 to its wait; the waiting job."""
    sub = await rt.submit(RunSpec(b"in", run_id=run_id))
    worker = rt.spawn()
    try:
        await settle_step(rt.queue, sub.job_id)
    finally:
        await worker.shutdown()
    job = waiting_job(rt, run_id)
    assert job.status is JobStatus.SCHEDULED
    assert job.headers[HEADER_SIGNAL_WAIT] == KEY
    assert signal_records(rt.queue) == {idx(): job.id.encode()}
    return job


class Process:
    """The runtime of one "process": restarting closes the queue and opens it
    again with a new runtime (same runner and options)."""

    def __init__(self, open_queue: Opener, runner: Waiter, options: RuntimeOptions) -> None:
        self.open_queue = open_queue
        self.runner = runner
        self.options = options
        self.q: Queue
        self.rt: WorkflowRuntime

    async def start(self) -> Process:
        """Open the queue and build the runtime."""
        self.q = await self.open_queue()
        self.rt = WorkflowRuntime(self.q, self.runner, options=self.options)
        return self

    async def maybe_restart(self, restart: bool) -> None:
        """A restart, if ``restart``."""
        if restart:
            await self.q.close()
            await self.start()


PATHS = [
    pytest.param(False, False, id="live"),
    pytest.param(True, False, id="restart"),
    pytest.param(False, True, id="replay"),
]


# ------------------------------------------------------------ the three paths


@pytest.mark.parametrize(("restart", "replay"), PATHS)
async def test_a_signal_wakes_the_waiting_run_with_its_payload(
    open_queue: Opener, restart: bool, replay: bool
) -> None:
    """Delivered: the waiting step job is woken at once (no clock moves), the
    next step sees the payload, and the buffer and index are gone."""
    p = await Process(open_queue, Waiter(), RuntimeOptions(step_output_replay=replay)).start()
    await start_waiting(p.rt, "r")
    await p.maybe_restart(restart)
    assert await p.rt.signal(KEY, b"yes") is DELIVERED
    woken = waiting_job(p.rt, "r")
    assert (woken.status, woken.wake_payload) == (JobStatus.PENDING, b"yes")
    assert signal_records(p.q) == {}
    end = await finish(p.rt, "r")
    assert end.outcome.result == b"approved:yes"
    assert p.runner.seen == [(1, b"yes", None)]  # from the job record, not a delivered record
    assert p.runner.step0 == 1


@pytest.mark.parametrize(("restart", "replay"), PATHS)
async def test_without_a_signal_the_next_step_runs_at_the_timeout_with_none(
    open_queue: Opener, clock: MockClock, restart: bool, replay: bool
) -> None:
    """Timeout: the next step is due exactly at the timeout and sees None;
    the waiter index goes with its claim."""
    p = await Process(open_queue, Waiter(), RuntimeOptions(step_output_replay=replay)).start()
    job = await start_waiting(p.rt, "r")
    assert job.run_at == clock.now_ms() + round(TIMEOUT * 1000)
    await p.maybe_restart(restart)
    clock.advance(TIMEOUT - 1)
    assert p.q.promote_scheduled_now() == 0
    clock.advance(1)
    assert p.q.promote_scheduled_now() == 1
    end = await finish(p.rt, "r")
    assert end.outcome.result == b"timed out"
    assert p.runner.seen == [(1, None, None)]
    assert signal_records(p.q) == {}


@pytest.mark.parametrize(("restart", "replay"), PATHS)
async def test_a_signal_sent_before_its_waiter_is_buffered_and_consumed_by_it(
    open_queue: Opener, restart: bool, replay: bool
) -> None:
    """Buffered: the waiter registering later consumes it in its settlement;
    the next step runs at once, from the delivered record, which goes with
    that step's settlement."""
    p = await Process(open_queue, Waiter(), RuntimeOptions(step_output_replay=replay)).start()
    assert await p.rt.signal(KEY, b"early") is BUFFERED
    assert signal_records(p.q) == {buf(): b"early"}
    await p.maybe_restart(restart)
    await p.rt.submit(RunSpec(b"in", run_id="r"))
    end = await finish(p.rt, "r")  # no clock moves: the wait never starts
    assert end.outcome.result == b"approved:early"
    assert p.runner.seen == [(1, b"early", b"early")]
    assert signal_records(p.q) == {}


async def test_a_signal_sent_while_the_step_runs_is_consumed_by_its_registration(
    open_queue: Opener,
) -> None:
    """No gap between the registration's read and its commit: a signal sent
    from inside the step (before it returns continue_on_signal) is buffered
    and taken by the registration."""
    q = await open_queue()
    outcomes: list[SignalOutcome] = []

    async def body(step: Step) -> StepOutcome:
        if step.step_number == 0:
            outcomes.append(await rt.signal(KEY, b"meanwhile"))
            return StepOutcome.continue_on_signal(b"p", KEY, TIMEOUT)
        return Succeed(step.signal or b"none")

    class R:
        async def run_step(self, step: Step) -> StepOutcome:
            return await body(step)

    rt = WorkflowRuntime(q, R())
    await rt.submit(RunSpec(b"in", run_id="r"))
    end = await finish(rt, "r")
    assert outcomes == [BUFFERED]
    assert end.outcome.result == b"meanwhile"


async def test_the_delivered_record_goes_with_a_step_that_continues(open_queue: Opener) -> None:
    """A step that consumed a buffered signal and continues (rather than
    terminating) deletes its delivered record in that settlement."""
    q = await open_queue()
    seen: list[tuple[int, bytes | None]] = []

    class Three:
        async def run_step(self, step: Step) -> StepOutcome:
            seen.append((step.step_number, step.signal))
            if step.step_number == 0:
                return StepOutcome.continue_on_signal(b"p", KEY, TIMEOUT)
            if step.step_number == 1:
                return StepOutcome.continue_now(b"p")
            return Succeed(repr(signal_records(q)).encode())

    rt = WorkflowRuntime(q, Three())
    assert await rt.signal(KEY, b"go") is BUFFERED
    await rt.submit(RunSpec(b"in", run_id="r"))
    end = await finish(rt, "r")
    assert seen == [(0, None), (1, b"go"), (2, None)]
    assert end.outcome.result == b"{}"  # gone before step 2 ran


# ----------------------------------------------------------------- the rules


async def test_a_second_signal_replaces_the_buffered_one(open_queue: Opener) -> None:
    q = await open_queue()
    runner = Waiter()
    rt = WorkflowRuntime(q, runner)
    assert await rt.signal(KEY, b"first") is BUFFERED
    assert await rt.signal(KEY, b"second") is BUFFERED
    assert signal_records(q) == {buf(): b"second"}
    await rt.submit(RunSpec(b"in", run_id="r"))
    end = await finish(rt, "r")
    assert end.outcome.result == b"approved:second"
    assert signal_records(q) == {}


async def test_a_second_waiter_on_a_key_fails_its_run_and_the_first_keeps_waiting(
    open_queue: Opener,
) -> None:
    """One waiter per key: the second run terminates Failed at its current
    step with SignalWaiterExists's message, its step dead-lettered; the first
    is untouched and still takes the signal."""
    q = await open_queue()
    rt = WorkflowRuntime(q, Waiter())
    first = await start_waiting(rt, "first")
    await rt.submit(RunSpec(b"in", run_id="second"))
    end = await finish(rt, "second")
    t = end.termination
    assert (t.status, t.final_step, t.error_kind) == (
        TerminalStatus.FAILED,
        0,
        StepErrorKind.PERMANENT,
    )
    assert f"a waiter is already registered for correlation key {KEY!r}" in (t.error or "")
    assert "'second'" in (t.error or "")
    [dead] = q.dead_jobs(QUEUE)
    assert dead.headers["workflow.run_id"] == "second"
    assert (dead.last_error or "") == t.error
    status = rt.status("first")
    assert status is not None
    assert isinstance(status.state, Pending)
    assert signal_records(q) == {idx(): first.id.encode()}
    assert await rt.signal(KEY, b"ok") is DELIVERED
    assert (await finish(rt, "first")).outcome.result == b"approved:ok"


async def test_a_stale_waiter_index_does_not_block_a_new_waiter(
    open_queue: Opener, clock: MockClock
) -> None:
    """An index naming a job that no longer waits (its timeout fired) is
    overwritten by the next registration, and that job's claim leaves the
    new entry alone."""
    q = await open_queue()
    runner = Waiter()
    rt = WorkflowRuntime(q, runner)
    first = await start_waiting(rt, "first")
    clock.advance(TIMEOUT)
    assert q.promote_scheduled_now() == 1  # the index still names it
    held = await q.claim(QUEUE)  # keep it from the worker for now
    assert held is not None
    assert held.id == first.id
    sub = await rt.submit(RunSpec(b"in", run_id="second"))
    worker = rt.spawn()
    try:
        await settle_step(q, sub.job_id)
        second = waiting_job(rt, "second")
        assert signal_records(q) == {idx(): second.id.encode()}
        await q.nack(held, "put back")  # retried at once (no backoff in the tests)
        end = await asyncio.wait_for(rt.wait("first"), 30)
    finally:
        await worker.shutdown()
    assert end is not None
    assert end.outcome is not None
    assert end.outcome.result == b"timed out"
    assert signal_records(q) == {idx(): second.id.encode()}
    assert await rt.signal(KEY, b"for the second") is DELIVERED
    assert (await finish(rt, "second")).outcome.result == b"approved:for the second"


async def test_clear_signal_discards_the_buffered_signal(
    open_queue: Opener, clock: MockClock
) -> None:
    q = await open_queue()
    runner = Waiter()
    rt = WorkflowRuntime(q, runner)
    assert await rt.clear_signal(KEY) is False
    await rt.signal(KEY, b"unwanted")
    assert await rt.clear_signal(KEY) is True
    assert await rt.clear_signal(KEY) is False
    assert signal_records(q) == {}
    await start_waiting(rt, "r")  # nothing to consume: it waits
    clock.advance(TIMEOUT)
    q.promote_scheduled_now()
    assert (await finish(rt, "r")).outcome.result == b"timed out"


async def test_a_signal_for_a_key_nobody_waits_on_is_buffered(open_queue: Opener) -> None:
    q = await open_queue()
    rt = WorkflowRuntime(q, Waiter())
    assert await rt.signal("nobody-waits", b"x") is BUFFERED
    assert signal_records(q) == {buf("nobody-waits"): b"x"}


async def test_a_signal_with_a_stale_index_of_a_cancelled_run_cleans_it_and_buffers(
    open_queue: Opener,
) -> None:
    q = await open_queue()
    rt = WorkflowRuntime(q, Waiter())
    job = await start_waiting(rt, "r")
    assert await rt.cancel("r") is True
    end = await asyncio.wait_for(rt.wait("r"), 30)
    assert end is not None
    assert end.termination.status is TerminalStatus.CANCELLED
    assert signal_records(q) == {idx(): job.id.encode()}  # left stale by the cancel
    assert await rt.signal(KEY, b"late") is BUFFERED
    assert signal_records(q) == {buf(): b"late"}


@pytest.mark.parametrize(
    ("key", "payload", "named"),
    [
        pytest.param("", b"x", "''", id="empty-key"),
        pytest.param(7, b"x", "7", id="key-not-str"),
        pytest.param("k\ud800", b"x", "UTF-8", id="lone-surrogate"),
        pytest.param("order-9", "text", "'order-9'", id="payload-not-bytes"),
        pytest.param("order-9", None, "'order-9'", id="payload-none"),
        pytest.param("order-9", b"x" * (256 * 1024 + 1), "'order-9'", id="payload-too-large"),
    ],
)
async def test_bad_signal_input_is_a_typed_error_naming_the_key_and_writes_nothing(
    open_queue: Opener, key: object, payload: object, named: str
) -> None:
    q = await open_queue()
    rt = WorkflowRuntime(q, Waiter())
    with pytest.raises(InvalidArgument, match="correlation key") as err:
        await rt.signal(key, payload)  # type: ignore[arg-type]
    assert named in str(err.value)
    with pytest.raises(InvalidArgument):
        await rt.clear_signal("")
    assert signal_records(q) == {}


# --------------------------------------------------------------- redelivery


async def test_a_woken_step_retried_sees_the_same_signal(open_queue: Opener) -> None:
    """The payload rides the woken job's record: a retry sees it again, even
    though another signal was buffered for the key in between."""
    q = await open_queue(max_attempts=3)
    during: list[SignalOutcome] = []

    async def flaky(step: Step) -> None:
        if step.attempts == 1:
            during.append(await rt.signal(KEY, b"second"))
            raise StepError.transient("flaky approval service")

    runner = Waiter(then=flaky)
    rt = WorkflowRuntime(q, runner)
    await start_waiting(rt, "r")
    assert await rt.signal(KEY, b"first") is DELIVERED
    end = await finish(rt, "r")
    assert end.outcome.result == b"approved:first"
    assert [(a, s) for a, s, _ in runner.seen] == [(1, b"first"), (2, b"first")]
    assert during == [BUFFERED]  # the index went with the first claim
    assert signal_records(q) == {buf(): b"second"}


async def test_a_timed_out_step_that_consumed_a_late_signal_sees_it_on_retry(
    open_queue: Opener, clock: MockClock
) -> None:
    """At the timeout, a signal buffered after the waiter was promoted is
    moved into the delivered record at the claim; a retry sees that record,
    not a newer buffered signal; the record goes with the settlement."""
    q = await open_queue(max_attempts=3)

    async def flaky(step: Step) -> None:
        if step.attempts == 1:
            assert await rt.signal(KEY, b"newer") is BUFFERED
            raise StepError.transient("flaky")

    runner = Waiter(then=flaky)
    rt = WorkflowRuntime(q, runner)
    await start_waiting(rt, "r")
    clock.advance(TIMEOUT)
    assert q.promote_scheduled_now() == 1
    assert await rt.signal(KEY, b"late") is BUFFERED  # the stale index is cleaned
    assert signal_records(q) == {buf(): b"late"}
    end = await finish(rt, "r")
    assert end.outcome.result == b"approved:late"
    assert runner.seen == [(1, b"late", b"late"), (2, b"late", b"late")]
    assert signal_records(q) == {buf(): b"newer"}


async def test_a_woken_step_redelivered_after_a_crash_sees_the_same_signal(
    open_queue: Opener,
) -> None:
    """The worker dies while the woken step runs; after a restart the step is
    delivered again with the same signal."""
    hold = asyncio.Event()

    async def crash_once(step: Step) -> None:
        if step.attempts == 1:
            hold.set()
            await asyncio.Event().wait()  # dies here

    p = await Process(open_queue, Waiter(then=crash_once), RuntimeOptions()).start()
    await start_waiting(p.rt, "r")
    assert await p.rt.signal(KEY, b"approved-once") is DELIVERED
    worker = p.rt.spawn()
    await asyncio.wait_for(hold.wait(), 30)
    await worker.abort()
    await p.maybe_restart(True)
    end = await finish(p.rt, "r")
    assert end.outcome.result == b"approved:approved-once"
    assert [(a, s) for a, s, _ in p.runner.seen] == [
        (1, b"approved-once"),
        (2, b"approved-once"),
    ]


async def test_a_crash_right_after_a_wake_leaves_no_copy_of_the_signal_buffered(
    make_objects: Factory, clock: MockClock
) -> None:
    """The process dies right after the commit that wakes the waiter: the
    buffer and the waiter index went with that commit, so the next run that
    waits on the key does not get the same signal a second time."""
    faulty = FaultyObjectStore(make_objects())
    options = OpenOptions(
        clock=clock,
        reaper_interval=HOUR,
        scheduler_interval=HOUR,
        fence_check_interval=HOUR,
        queue_configs={QUEUE: QueueConfig(retry_backoff_base=0.0)},
    )
    q = await Queue.open(faulty, options)
    runner = Waiter()
    await start_waiting(WorkflowRuntime(q, runner), "r")
    await q.writer.flush()
    faulty.crash_after_writes(2)  # the buffer's commit and the wake's land, then it dies
    rt = WorkflowRuntime(q, runner)
    with contextlib.suppress(SimulatedCrash, StoreError):
        await rt.signal(KEY, b"once")
    assert faulty.crashed
    with contextlib.suppress(BaseException):
        await q.close()
    q2 = await Queue.open(make_objects(), options)  # the next process
    try:
        rt2 = WorkflowRuntime(q2, runner)
        assert (waiting_job(rt2, "r").status, waiting_job(rt2, "r").wake_payload) == (
            JobStatus.PENDING,
            b"once",
        )
        assert signal_records(q2) == {}
        end = await finish(rt2, "r")
        assert end.outcome.result == b"approved:once"
        await start_waiting(rt2, "r2")  # waits: nothing buffered under the key
    finally:
        await q2.close()


async def test_with_replay_a_redelivered_waiting_step_registers_its_replayed_outcome(
    open_queue: Opener, clock: MockClock
) -> None:
    """Step-output replay: step 0 loses its claim after the runner returned
    continue_on_signal; the redelivery replays that outcome without running
    the step and registers the wait from it."""
    q = await open_queue()
    release = asyncio.Event()
    entered = asyncio.Event()

    class Slow(Waiter):
        async def run_step(self, step: Step) -> StepOutcome:
            if step.step_number == 0:
                entered.set()
                await release.wait()
            return await super().run_step(step)

    runner = Slow()
    options = RuntimeOptions(step_output_replay=True, max_concurrent_steps=1)
    rt = WorkflowRuntime(q, runner, options=options)
    sub = await rt.submit(RunSpec(b"in", run_id="r"))
    worker = rt.spawn()
    try:
        await asyncio.wait_for(entered.wait(), 30)
        clock.advance(31)  # past the lease
        assert q.reap_now() == 1
        release.set()  # the ack fails (claim lost); the redelivery replays
        await settle_step(q, sub.job_id)
        job = waiting_job(rt, "r")
        assert job.headers[HEADER_SIGNAL_WAIT] == KEY
        assert await rt.signal(KEY, b"yes") is DELIVERED
        end = await asyncio.wait_for(rt.wait("r"), 30)
    finally:
        await worker.shutdown()
    assert runner.step0 == 1
    assert end is not None
    assert end.outcome is not None
    assert end.outcome.result == b"approved:yes"


async def test_a_run_waits_on_the_same_key_again_in_a_later_step(open_queue: Opener) -> None:
    """The index goes with each resolution, so the run registers again."""
    q = await open_queue()
    seen: list[bytes | None] = []

    class Twice:
        async def run_step(self, step: Step) -> StepOutcome:
            if step.step_number > 0:
                seen.append(step.signal)
            if step.step_number < 2:
                return StepOutcome.continue_on_signal(b"p", KEY, TIMEOUT)
            return Succeed(b"done")

    rt = WorkflowRuntime(q, Twice())
    sub = await rt.submit(RunSpec(b"in", run_id="r"))
    worker = rt.spawn()
    try:
        await settle_step(q, sub.job_id)
        step1 = waiting_job(rt, "r")
        assert await rt.signal(KEY, b"one") is DELIVERED
        await settle_step(q, step1.id)
        assert await rt.signal(KEY, b"two") is DELIVERED
        await asyncio.wait_for(rt.wait("r"), 30)
    finally:
        await worker.shutdown()
    assert seen == [b"one", b"two"]


# ------------------------------------------------- offloaded next payloads


class GatedBlobs(ObjectStore):
    """An object store that holds payload-object writes while ``gate`` is shut
    (the store is the outside dependency; everything above it is real)."""

    def __init__(self, inner: ObjectStore) -> None:
        self.inner = inner
        self.guarantees = inner.guarantees
        self.gate = asyncio.Event()
        self.gate.set()
        self.held = asyncio.Event()

    @property
    def url(self) -> str:
        """The inner store's."""
        return self.inner.url

    async def _hold(self, name: str) -> None:
        if name.startswith("blobs/") and not self.gate.is_set():
            self.held.set()
            await self.gate.wait()

    async def get(self, name: str) -> bytes:
        """Delegated."""
        return await self.inner.get(name)

    async def put(self, name: str, data: bytes) -> None:
        """Delegated, after the gate for payload objects."""
        await self._hold(name)
        await self.inner.put(name, data)

    async def create(self, name: str, data: bytes) -> None:
        """Delegated, after the gate for payload objects."""
        await self._hold(name)
        await self.inner.create(name, data)

    async def list(self, prefix: str) -> list[str]:
        """Delegated."""
        return await self.inner.list(prefix)

    async def delete(self, names: Iterable[str]) -> None:
        """Delegated."""
        await self.inner.delete(names)


@pytest.mark.parametrize("early", [False, True], ids=["during", "before"])
async def test_a_registration_with_an_offloaded_payload_gets_a_racing_signal_at_once(
    make_objects: Factory, clock: MockClock, early: bool
) -> None:
    """The next payload's object is written between the registration's read
    and its commit; a signal sent then (or before) is handed to the waiter
    once the commit is durable, with no clock moving toward the timeout."""
    store = GatedBlobs(make_objects())
    q = await Queue.open(
        store,
        OpenOptions(
            clock=clock,
            reaper_interval=HOUR,
            scheduler_interval=HOUR,
            payload_offload_threshold=64,
            queue_configs={QUEUE: QueueConfig(retry_backoff_base=0.0)},
        ),
    )
    try:
        runner = Waiter(payload=b"x" * 200)
        rt = WorkflowRuntime(q, runner)
        if early:
            assert await rt.signal(KEY, b"raced") is BUFFERED
        store.gate.clear()
        await rt.submit(RunSpec(b"in", run_id="r"))
        worker = rt.spawn()
        try:
            await asyncio.wait_for(store.held.wait(), 30)
            if not early:
                assert await rt.signal(KEY, b"raced") is BUFFERED  # no index yet
            store.gate.set()
            end = await asyncio.wait_for(rt.wait("r"), 30)
        finally:
            await worker.shutdown()
        assert end is not None
        assert end.outcome is not None
        assert end.outcome.result == b"approved:raced"
        assert runner.seen == [(1, b"raced", None)]  # woken, not consumed
        assert signal_records(q) == {}
    finally:
        await q.close()
