"""The runtime against the seed, path by path, at the public API (`durable.engine`).

Each test names the behaviour it proves: outcomes and errors, what a step
sees, the runtime's options, submission, status, cancellation on every
path, KV effects, memos, step-output replay, the terminal hook on every
terminating path, memo retention and time. Time is a `MockClock`; restarts
close (or abandon) the queue and open the same store again.
"""

from __future__ import annotations

import asyncio
import datetime as dt
from collections.abc import Callable
from typing import Any

import pytest
from engine_helpers import (
    BG,
    HOUR,
    QUEUE,
    Factory,
    Opener,
    RecordingHook,
    Runner,
    chain,
    finish,
)

from durable.engine import (
    HEADER_RUN_ID,
    HEADER_SIGNAL_WAIT,
    HEADER_TERMINAL,
    MAX_RUN_ID_LEN,
    After,
    Cancel,
    Cancelling,
    Continue,
    Delivery,
    EffectsHandle,
    Fail,
    KvReadHandle,
    MemoStore,
    NoopTerminalHook,
    Pending,
    RunEnd,
    Running,
    RunOptions,
    RunOutcome,
    RunSpec,
    RunTermination,
    RuntimeOptions,
    Step,
    StepError,
    StepErrorKind,
    StepOutcome,
    Succeed,
    TerminalEffects,
    TerminalStatus,
    Terminated,
    WorkflowRuntime,
    WorkflowView,
)
from durable.engine import keys as engine_keys
from durable.engine.replay import ReplayRecord
from durable.errors import (
    ConflictingKvEffect,
    EffectsSealed,
    InputMismatch,
    InvalidArgument,
    InvalidId,
    KvValueTooLarge,
    ReservedHeader,
    ReservedKey,
    ReservedMemoKey,
)
from durable.store.clock import MockClock
from durable.store.keyspace import MAX_KV_VALUE_SIZE
from durable.store.objects import MemoryObjectStore
from durable.store.queue import (
    CancelToken,
    Dead,
    JobRecord,
    JobStatus,
    LeaseHandle,
    OpenOptions,
    Queue,
    QueueConfig,
    QueueReader,
    SettlementEffects,
)

SUCCEEDED = TerminalStatus.SUCCEEDED
FAILED = TerminalStatus.FAILED
CANCELLED = TerminalStatus.CANCELLED
TRANSIENT = StepErrorKind.TRANSIENT
PERMANENT = StepErrorKind.PERMANENT
LIVE = (JobStatus.PENDING, JobStatus.SCHEDULED, JobStatus.CLAIMED)


# ------------------------------------------------------------------ helpers


class GateHook(RecordingHook):
    """A `RecordingHook` that holds each notification until ``gate`` is set,
    so the notification job stays claimed for inspection."""

    def __init__(self) -> None:
        super().__init__()
        self.entered = asyncio.Event()
        self.gate = asyncio.Event()

    async def on_termination(self, outcome: RunOutcome, effects: TerminalEffects) -> None:
        """Signal ``entered``, wait for ``gate``, then record."""
        self.entered.set()
        await self.gate.wait()
        await super().on_termination(outcome, effects)


class Gate:
    """A runner body that blocks every delivery until released."""

    def __init__(self, then: Callable[[Step], StepOutcome]) -> None:
        self.then = then
        self.started = asyncio.Event()
        self.release = asyncio.Event()
        self.steps: list[Step] = []

    async def __call__(self, step: Step) -> StepOutcome:
        self.steps.append(step)
        step.effects.put(b"app/staged", b"by the gated step")
        self.started.set()
        await self.release.wait()  # ignores the cancellation token
        return self.then(step)


def raiser(error: Exception) -> Callable[[Step], StepOutcome]:
    """A step result that raises ``error``."""

    def act(step: Step) -> StepOutcome:
        raise error

    return act


def termination(rt: WorkflowRuntime, run_id: str) -> RunTermination:
    """The termination of a run that must have terminated."""
    status = rt.status(run_id)
    assert status is not None, run_id
    assert isinstance(status.state, Terminated), status
    assert status.current_step == status.state.termination.final_step
    return status.state.termination


def notifications(q: Any, run_id: str, statuses: tuple[JobStatus, ...] = LIVE) -> list[JobRecord]:
    """The terminal-notification jobs of ``run_id`` in ``statuses``."""
    return [
        job
        for status in statuses
        for job in q.iter_jobs(QUEUE, status)
        if job.headers.get(HEADER_TERMINAL) == "1" and job.headers.get(HEADER_RUN_ID) == run_id
    ]


def step_jobs(q: Any, statuses: tuple[JobStatus, ...] = LIVE) -> list[JobRecord]:
    """The step jobs (not notifications) of the runtime's queue in ``statuses``."""
    return [
        job
        for status in statuses
        for job in q.iter_jobs(QUEUE, status)
        if job.headers.get(HEADER_TERMINAL) != "1"
    ]


async def yield_to_the_loop(times: int = 20) -> None:
    """Let every ready task run (for checking that something did NOT happen)."""
    for _ in range(times):
        await asyncio.sleep(0)


async def settle_step(q: Any, job_id: str) -> None:
    """Wait until step job ``job_id`` has been settled."""
    await asyncio.wait_for(q.wait_for_completion(job_id, None), 30)


# ------------------------------------------ 1. outcomes, triggers, step errors


@pytest.mark.parametrize(
    ("act", "status", "error", "kind", "dead", "deliveries"),
    [
        pytest.param(lambda s: Succeed(b"ok"), SUCCEEDED, None, None, 0, 1, id="succeed"),
        pytest.param(lambda s: Fail("declined"), FAILED, "declined", None, 0, 1, id="fail"),
        pytest.param(
            lambda s: Cancel("withdrawn"), CANCELLED, "withdrawn", None, 0, 1, id="cancel"
        ),
        pytest.param(
            raiser(StepError.permanent("bad schema")), FAILED, "bad schema", PERMANENT, 1, 1,
            id="permanent",
        ),
        pytest.param(
            raiser(StepError.transient("down")), FAILED, "down", TRANSIENT, 1, 2, id="exhausted"
        ),
        pytest.param(
            raiser(RuntimeError("boom")), FAILED, "RuntimeError: boom", TRANSIENT, 1, 2,
            id="exception-is-transient",
        ),
    ],
)  # fmt: skip
async def test_every_outcome_settles_and_notifies_once_in_its_own_settlement(
    open_queue: Opener,
    act: Callable[[Step], StepOutcome],
    status: TerminalStatus,
    error: str | None,
    kind: StepErrorKind | None,
    dead: int,
    deliveries: int,
) -> None:
    """Succeed/Fail/Cancel ack (effects kept); a permanent error dead-letters at
    once and exhausted transient errors dead-letter after max attempts (effects
    dropped). Every path enqueues exactly one notification with the settlement."""
    q = await open_queue(max_attempts=2)
    hook = GateHook()

    async def body(step: Step) -> StepOutcome:
        step.effects.put(b"app/fx", b"staged")
        return act(step)

    runner = Runner(body)
    rt = WorkflowRuntime(q, runner, hook)
    spec = RunSpec(b"in", run_id="path", options=RunOptions(headers={"tenant": "t1"}))
    await rt.submit(spec)
    worker = rt.spawn()
    try:
        end = await asyncio.wait_for(rt.wait("path"), 30)
        # The notification committed with the terminal record: it is there now,
        # and only one (a non-exhausting nack must not have enqueued one).
        assert len(notifications(q, "path")) == 1
        await hook.entered.wait()
        hook.gate.set()
        await hook.called.wait()
    finally:
        hook.gate.set()  # a failed assertion must not hold the shutdown
        await worker.shutdown()

    t = end.termination
    assert (t.status, t.error, t.error_kind, t.final_step) == (status, error, kind, 0)
    assert termination(rt, "path") == t
    assert end.outcome == RunOutcome(
        "path",
        status,
        0,
        result=b"ok" if status is SUCCEEDED else None,
        error=error,
        headers={"tenant": "t1"},
    )
    assert hook.seen == [end.outcome]
    assert q.kv.get(b"hooked/path") == status.as_str().encode()
    assert notifications(q, "path") == []
    assert len(runner.ran) == deliveries
    assert q.stats(QUEUE).dead == dead
    if dead:
        [job] = q.dead_jobs(QUEUE)
        assert job.last_error == error
    assert q.kv.get(b"app/fx") == (None if dead else b"staged")
    assert rt.view.run_record("path") is None
    assert rt.view.pointer("path") is None


async def test_a_retried_step_notifies_only_its_final_outcome(open_queue: Opener) -> None:
    """A transient error with attempts left nacks without terminating: no
    notification, no effects; the retry's outcome is the only one observed."""
    q = await open_queue(max_attempts=3)
    hook = RecordingHook()

    async def body(step: Step) -> StepOutcome:
        step.effects.put(b"app/attempt", b"%d" % step.attempts)
        if step.attempts == 1:
            raise StepError.transient("flaky")
        return Succeed(b"second time")

    rt = WorkflowRuntime(q, Runner(body), hook)
    await rt.submit(RunSpec(b"x", run_id="retried"))
    worker = rt.spawn()
    try:
        end = await asyncio.wait_for(rt.wait("retried"), 30)
        await hook.called.wait()
    finally:
        await worker.shutdown()
    assert end.termination.status is SUCCEEDED
    assert [o.status for o in hook.seen] == [SUCCEEDED]
    assert q.kv.get(b"app/attempt") == b"2"
    assert q.stats(QUEUE).dead == 0


async def test_transient_retries_follow_the_queues_backoff(
    open_queue: Opener, clock: MockClock
) -> None:
    """A transient error reschedules the step after the queue's backoff."""
    q = await open_queue(max_attempts=3, retry_backoff_base=10.0)
    failed = asyncio.Event()

    async def body(step: Step) -> StepOutcome:
        if step.attempts == 1:
            failed.set()
            raise StepError.transient("rate limited")
        return Succeed(b"later")

    runner = Runner(body)
    rt = WorkflowRuntime(q, runner)
    sub = await rt.submit(RunSpec(b"x", run_id="backoff"))
    worker = rt.spawn()
    await failed.wait()
    await worker.shutdown()  # graceful: the nack is settled
    job = q.job_record(sub.job_id)
    assert job is not None
    assert job.status is JobStatus.SCHEDULED
    assert job.run_at == clock.now_ms() + 10_000
    assert job.last_error == "rate limited"
    assert q.promote_scheduled_now() == 0
    clock.advance(10)
    assert q.promote_scheduled_now() == 1
    end = await finish(rt, "backoff")
    assert end.outcome.result == b"later"
    assert [a for _, _, a in runner.ran] == [1, 2]


async def test_a_transient_error_may_say_when_to_retry(
    open_queue: Opener, clock: MockClock
) -> None:
    """``StepError.transient(..., retry_after=s)`` reschedules the step ``s``
    seconds later instead of after the queue's backoff."""
    q = await open_queue(max_attempts=3, retry_backoff_base=10.0)
    failed = asyncio.Event()

    async def body(step: Step) -> StepOutcome:
        if step.attempts == 1:
            failed.set()
            raise StepError.transient("busy", retry_after=0.5)
        return Succeed(b"soon")

    rt = WorkflowRuntime(q, Runner(body))
    sub = await rt.submit(RunSpec(b"x", run_id="soon"))
    worker = rt.spawn()
    await failed.wait()
    await worker.shutdown()
    job = q.job_record(sub.job_id)
    assert job is not None
    assert (job.status, job.run_at) == (JobStatus.SCHEDULED, clock.now_ms() + 500)
    clock.advance(0.5)
    assert q.promote_scheduled_now() == 1
    assert (await finish(rt, "soon")).outcome.result == b"soon"
    for bad in (-1, float("nan"), "1"):
        with pytest.raises(InvalidArgument, match="retry_after"):
            StepError.transient("x", retry_after=bad)  # type: ignore[arg-type]


async def test_an_engine_error_from_a_runner_keeps_its_permanence(open_queue: Opener) -> None:
    """A non-transient durable error (here staging a reserved key) dead-letters
    at once, attempts left or not."""
    q = await open_queue(max_attempts=5)

    async def body(step: Step) -> StepOutcome:
        step.effects.put(b"workflow/runs/other", b"tamper")  # ReservedKey, not caught
        return Succeed(b"unreachable")

    runner = Runner(body)
    rt = WorkflowRuntime(q, runner)
    await rt.submit(RunSpec(b"x", run_id="reserved"))
    end = await finish(rt, "reserved")
    assert end.termination.status is FAILED
    assert end.termination.error_kind is PERMANENT
    assert "reserved prefix" in (end.termination.error or "")
    assert len(runner.ran) == 1
    assert q.stats(QUEUE).dead == 1


async def test_a_runner_returning_no_outcome_fails_its_run_with_the_dead_letter(
    open_queue: Opener,
) -> None:
    """A runner bug (returning something that is not a StepOutcome) dead-letters
    the step and terminates the run in that settlement, notification included."""
    q = await open_queue(max_attempts=3)
    hook = RecordingHook()

    async def body(step: Step) -> Any:
        return "done"  # not a StepOutcome

    runner = Runner(body)
    rt = WorkflowRuntime(q, runner, hook)
    await rt.submit(RunSpec(b"x", run_id="no-outcome"))
    worker = rt.spawn()
    try:
        end = await asyncio.wait_for(rt.wait("no-outcome"), 30)
        await hook.called.wait()
    finally:
        await worker.shutdown()
    assert end.termination.status is FAILED
    assert end.termination.error_kind is PERMANENT
    assert "not a StepOutcome" in (end.termination.error or "")
    assert len(runner.ran) == 1
    [job] = q.dead_jobs(QUEUE)
    assert "not a StepOutcome" in (job.last_error or "")
    assert [o.status for o in hook.seen] == [FAILED]


async def test_a_signal_wait_without_a_signal_resumes_at_its_timeout(
    open_queue: Opener, clock: MockClock
) -> None:
    """continue_on_signal schedules the next step at now + timeout with the
    wait header; when no signal comes it runs then, with ``signal`` None."""
    q = await open_queue()
    seen: list[tuple[bytes, bytes | None, dict[str, str]]] = []

    async def body(step: Step) -> StepOutcome:
        if step.step_number == 0:
            return StepOutcome.continue_on_signal(b"waiting", "order-7", 30.0)
        seen.append((step.payload, step.signal, dict(step.headers)))
        return Succeed(b"timed out")

    rt = WorkflowRuntime(q, Runner(body))
    sub = await rt.submit(RunSpec(b"x", run_id="waits", options=RunOptions(headers={"a": "b"})))
    worker = rt.spawn()
    try:
        await settle_step(q, sub.job_id)
        pointer = rt.view.pointer("waits")
        assert pointer is not None
        assert pointer.step_number == 1
        job = q.job_record(pointer.job_id)
        assert job is not None
        assert job.status is JobStatus.SCHEDULED
        assert job.run_at == clock.now_ms() + 30_000
        assert job.headers[HEADER_SIGNAL_WAIT] == "order-7"
        clock.advance(29)
        assert q.promote_scheduled_now() == 0
        clock.advance(1)
        assert q.promote_scheduled_now() == 1
        end = await asyncio.wait_for(rt.wait("waits"), 30)
    finally:
        await worker.shutdown()
    assert end.outcome.result == b"timed out"
    assert seen == [(b"waiting", None, {"a": "b"})]  # reserved headers stripped


# --------------------------------------------------------------- 2. delivery


async def test_the_delivery_carries_the_run_the_step_and_its_handles(
    open_queue: Opener,
) -> None:
    """Every field of the delivery, on a first attempt, a retry and a later step."""
    q = await open_queue(max_attempts=5)
    seen: list[dict[str, Any]] = []

    async def body(step: Step) -> StepOutcome:
        seen.append(
            {
                "run_id": step.run_id,
                "step": step.step_number,
                "payload": step.payload,
                "headers": dict(step.headers),
                "job_id": step.job_id,
                "pointer": rt.view.pointer(step.run_id),
                "attempts": step.attempts,
                "max_attempts": step.max_attempts,
                "last": step.is_last_attempt(),
                "token": step.cancel_token,
                "lease": step.lease.expiry(),
                "claim_lease": q.lease_expiry(QUEUE, step.job_id),
                "memo": (step.memo.run_id, step.memo.step_number),
                "run_memo": (step.run_memo.run_id, step.run_memo.step_number),
                "effects": (type(step.effects), len(step.effects)),
                "kv": (type(step.kv), step.kv.get(b"app/seed"), step.kv.get("app/seed")),
                "signal": step.signal,
            }
        )
        if step.step_number == 0 and step.attempts == 1:
            raise StepError.transient("once")
        if step.step_number == 0:
            return StepOutcome.continue_now(b"next")
        return Succeed(b"done")

    rt = WorkflowRuntime(q, Runner(body))
    sub = await rt.submit(
        RunSpec(
            b"first",
            run_id="fields",
            options=RunOptions(headers={"tenant": "acme"}, max_attempts_per_step=2),
            effects=SettlementEffects().kv_put(b"app/seed", b"committed"),
        )
    )
    await finish(rt, "fields")
    first, retry, later = seen
    for s in seen:
        assert s["run_id"] == "fields"
        assert s["headers"] == {"tenant": "acme"}
        assert s["max_attempts"] == 2
        assert isinstance(s["token"], CancelToken)
        assert not s["token"].is_cancelled()
        assert s["lease"] is not None
        assert s["lease"] == s["claim_lease"]  # the handle is the claim's lease
        assert s["run_memo"] == ("fields", None)
        assert s["effects"] == (EffectsHandle, 0)
        assert s["kv"] == (KvReadHandle, b"committed", b"committed")
        assert s["signal"] is None
        assert s["job_id"] == s["pointer"].job_id
        assert s["step"] == s["pointer"].step_number
    assert (first["step"], first["payload"], first["attempts"], first["last"]) == (
        0,
        b"first",
        1,
        False,
    )
    assert first["job_id"] == sub.job_id
    assert first["memo"] == ("fields", 0)
    assert (retry["step"], retry["attempts"], retry["last"]) == (0, 2, True)
    assert retry["job_id"] == sub.job_id
    assert (later["step"], later["payload"], later["attempts"], later["last"]) == (
        1,
        b"next",
        1,
        False,
    )
    assert later["job_id"] != sub.job_id
    assert later["memo"] == ("fields", 1)


async def test_a_detached_delivery_is_bound_to_nothing() -> None:
    """Delivery.detached / Step.detached: every field set, handles inert."""
    assert Delivery is Step
    memos = MemoStore(MemoryObjectStore(), "m")
    step = Delivery.detached(
        b"p",
        run_id="unit",
        step_number=4,
        headers={"h": "v"},
        attempts=2,
        max_attempts=2,
        signal=b"sig",
        memos=memos,
    )
    assert (step.run_id, step.step_number, step.payload, dict(step.headers)) == (
        "unit",
        4,
        b"p",
        {"h": "v"},
    )
    assert (step.attempts, step.max_attempts, step.is_last_attempt()) == (2, 2, True)
    assert step.signal == b"sig"
    assert isinstance(step.lease, LeaseHandle)
    assert step.lease.expiry() is None
    assert step.kv.get(b"anything") is None
    await step.memo.put("k", 1)
    assert await memos.step_memo("unit", 4).get("k") == 1
    assert step.run_memo.step_number is None
    plain = Step.detached()
    assert (plain.attempts, plain.max_attempts, plain.is_last_attempt()) == (1, 3, False)


# ---------------------------------------------------------------- 3. options


async def test_runtime_options_defaults_and_checks(open_queue: Opener) -> None:
    """The seed's defaults; the memo prefix follows the queue name; the clock is
    the queue's unless given."""
    options = RuntimeOptions()
    assert options.queue_name == "workflow-steps"
    assert options.memo_prefix is None
    assert options.max_concurrent_steps == 8
    assert options.poll_interval == 0.25
    assert options.memo_retention is None
    assert options.step_output_replay is False
    assert options.clock is None
    q = await open_queue()
    rt = WorkflowRuntime(q, Runner(chain(0)))
    assert rt.memos.prefix == "workflow-steps-memo"
    assert rt.clock is q.clock
    assert isinstance(rt.hook, NoopTerminalHook)
    named = WorkflowRuntime(q, Runner(chain(0)), options=RuntimeOptions(queue_name="orders"))
    assert named.memos.prefix == "orders-memo"
    custom = RuntimeOptions(queue_name="orders", memo_prefix="elsewhere")
    assert WorkflowRuntime(q, Runner(chain(0)), options=custom).memos.prefix == "elsewhere"
    for bad in (
        {"max_concurrent_steps": 0},
        {"poll_interval": 0},
        {"memo_retention": 0.0005},
        {"memo_retention": -1},
    ):
        with pytest.raises(InvalidArgument):
            RuntimeOptions(**bad)


async def test_a_runtime_on_its_own_queue_keeps_its_jobs_and_memos_there(
    open_queue: Opener,
) -> None:
    """queue_name routes steps and notifications; memos go under "{queue}-memo"."""
    q = await open_queue()

    async def body(step: Step) -> StepOutcome:
        await step.memo.put("k", step.step_number)
        return await chain(1)(step)

    hook = RecordingHook()
    rt = WorkflowRuntime(q, Runner(body), hook, RuntimeOptions(queue_name="orders"))
    await rt.submit(RunSpec(b"x", run_id="own-queue"))
    worker = rt.spawn()
    try:
        end = await asyncio.wait_for(rt.wait("own-queue"), 30)
        await hook.called.wait()
    finally:
        await worker.shutdown()
    assert end.outcome.result == b"x>0!"
    assert q.stats("orders").done == 3  # two steps and the notification
    assert QUEUE not in q.list_queues()
    objects = rt.memos.objects
    assert len(await objects.list("orders-memo/")) == 2
    assert await objects.list("workflow-steps-memo/") == []


async def test_max_concurrent_steps_bounds_the_steps_in_flight(open_queue: Opener) -> None:
    """At most max_concurrent_steps steps run at once; the rest wait their turn."""
    q = await open_queue()
    running = 0
    peak = 0
    two_in = asyncio.Event()
    release = asyncio.Event()

    async def body(step: Step) -> StepOutcome:
        nonlocal running, peak
        running += 1
        peak = max(peak, running)
        if running == 2:
            two_in.set()
        await release.wait()
        running -= 1
        return Succeed(step.run_id.encode())

    runner = Runner(body)
    rt = WorkflowRuntime(q, runner, options=RuntimeOptions(max_concurrent_steps=2))
    for n in range(3):
        await rt.submit(RunSpec(b"x", run_id=f"c{n}"))
    worker = rt.spawn()
    try:
        await two_in.wait()
        await yield_to_the_loop()
        assert (q.stats(QUEUE).claimed, q.stats(QUEUE).pending) == (2, 1)
        assert len(runner.ran) == 2
        release.set()
        for n in range(3):
            await asyncio.wait_for(rt.wait(f"c{n}"), 30)
    finally:
        await worker.shutdown()
    assert peak == 2
    assert len(runner.ran) == 3


async def test_shutdown_drains_running_steps_and_claims_no_more(open_queue: Opener) -> None:
    """WorkerHandle.shutdown waits for the steps in flight to settle and stops
    claiming; a run still queued stays pending for the next worker."""
    q = await open_queue()
    gate = Gate(lambda s: Succeed(b"drained"))
    runner = Runner(gate)
    rt = WorkflowRuntime(q, runner, options=RuntimeOptions(max_concurrent_steps=1))
    await rt.submit(RunSpec(b"x", run_id="in-flight"))
    await rt.submit(RunSpec(b"x", run_id="queued"))
    worker = rt.spawn()
    await gate.started.wait()
    stopping = asyncio.create_task(worker.shutdown())
    await yield_to_the_loop()
    assert not stopping.done()  # waits for the running step
    assert worker.running
    gate.release.set()
    await asyncio.wait_for(stopping, 30)
    assert not worker.running
    assert termination(rt, "in-flight").status is SUCCEEDED
    status = rt.status("queued")
    assert status is not None
    assert isinstance(status.state, Pending)
    assert [r for r, _, _ in runner.ran] == ["in-flight"]


async def test_the_worker_reconciles_reaped_steps_at_its_poll_interval(
    open_queue: Opener, clock: MockClock
) -> None:
    """Maintenance runs every poll interval: a step the reaper dead-letters is
    terminated by the running worker without anyone calling reconcile_dead."""
    q = await open_queue(max_attempts=1, lease_duration=30.0)
    gate = Gate(lambda s: Succeed(b"too late"))
    hook = RecordingHook()
    rt = WorkflowRuntime(q, Runner(gate), hook, RuntimeOptions(poll_interval=60.0))
    await rt.submit(RunSpec(b"x", run_id="reaped"))
    worker = rt.spawn()
    try:
        await gate.started.wait()
        await clock.wait_for_sleepers(BG + 2)  # the idle worker and maintenance
        clock.advance(31)  # past the lease, before the next maintenance pass
        assert q.reap_now() == 1
        await yield_to_the_loop()
        status = rt.status("reaped")
        assert status is not None
        assert not isinstance(status.state, Terminated)
        clock.advance(29)  # the poll interval is up
        end = await asyncio.wait_for(rt.wait("reaped"), 30)
        await hook.called.wait()
        gate.release.set()
    finally:
        gate.release.set()  # a failed assertion must not hold the shutdown
        await worker.shutdown()
    assert end.termination.status is FAILED
    assert end.termination.error == "lease expired"
    assert end.outcome is None
    assert [o.status for o in hook.seen] == [FAILED]


# ---------------------------------------------------------------- 4. submit


async def test_a_duplicate_submission_reports_the_runs_current_step(
    open_queue: Opener,
) -> None:
    """Once the run moved on, a duplicate answers with the current step's job;
    a different input is an InputMismatch that writes nothing, its effects
    included."""
    q = await open_queue()

    async def body(step: Step) -> StepOutcome:
        return StepOutcome.continue_after(b"next", 60)

    rt = WorkflowRuntime(q, Runner(body))
    sub = await rt.submit(RunSpec(b"same", run_id="moved"))
    worker = rt.spawn()
    await settle_step(q, sub.job_id)
    await worker.shutdown()
    pointer = rt.view.pointer("moved")
    assert pointer is not None
    assert pointer.step_number == 1
    dup = await rt.submit(
        RunSpec(b"same", run_id="moved", effects=SettlementEffects().kv_put(b"app/k", b"v"))
    )
    assert dup.run_id == "moved"
    assert dup.job_id == pointer.job_id != sub.job_id
    assert not dup.newly_submitted
    before = dict(q.writer.state.scan())
    with pytest.raises(InputMismatch):
        await rt.submit(
            RunSpec(b"other", run_id="moved", effects=SettlementEffects().kv_put(b"app/k", b"v"))
        )
    assert dict(q.writer.state.scan()) == before
    assert q.kv.get(b"app/k") is None


async def test_submit_effects_commit_with_step_zero_and_survive_a_restart(
    open_queue: Opener,
) -> None:
    """Puts, deletes and follow-up enqueues of RunSpec.effects commit with the
    first enqueue; a duplicate's effects are dropped; all of it is durable."""
    q = await open_queue()
    await q.commit_effects(SettlementEffects().kv_put(b"app/old", b"stale"))
    rt = WorkflowRuntime(q, Runner(chain(0)))
    fx = (
        SettlementEffects()
        .kv_put(b"app/order", b"submitted")
        .kv_delete(b"app/old")
        .enqueue("audit", b"order submitted")
    )
    await rt.submit(RunSpec(b"x", run_id="fx-all", effects=fx))
    assert q.kv.get(b"app/order") == b"submitted"
    assert q.kv.get(b"app/old") is None
    assert q.stats("audit").pending == 1
    again = SettlementEffects().kv_put(b"app/order", b"again").enqueue("audit", b"twice")
    assert not (await rt.submit(RunSpec(b"x", run_id="fx-all", effects=again))).newly_submitted
    assert q.kv.get(b"app/order") == b"submitted"
    assert q.stats("audit").pending == 1
    await q.close()
    q2 = await open_queue()
    assert q2.kv.get(b"app/order") == b"submitted"
    assert q2.kv.get(b"app/old") is None
    assert q2.stats("audit").pending == 1
    status = WorkflowRuntime(q2, Runner(chain(0))).status("fx-all")
    assert status is not None
    assert isinstance(status.state, Pending)


async def test_submit_checks_effects_and_headers_changed_after_the_spec_was_built(
    open_queue: Opener,
) -> None:
    """The reserved KV prefix and header prefix are enforced at submit too."""
    q = await open_queue()
    rt = WorkflowRuntime(q, Runner(chain(0)))
    fx = SettlementEffects()
    spec = RunSpec(b"x", run_id="sneaky", effects=fx)
    fx.kv_put(b"workflow/runs/victim", b"forged")
    with pytest.raises(ReservedKey):
        await rt.submit(spec)
    options = RunOptions()
    headers = options.headers
    assert isinstance(headers, dict)
    headers["workflow.step"] = "9"
    with pytest.raises(ReservedHeader):
        await rt.submit(RunSpec(b"x", run_id="sneaky", options=options))
    with pytest.raises(ReservedHeader):
        RunOptions(headers={"workflow.run_id": "x"})
    assert rt.status("sneaky") is None
    assert q.kv.get(b"workflow/runs/victim") is None


async def test_run_options_reach_every_step_and_the_notification(open_queue: Opener) -> None:
    """priority and max_attempts_per_step override the queue's defaults on every
    step, and the notification of the terminal step copies them."""
    q = await open_queue(max_attempts=5)
    hook = GateHook()
    seen: list[tuple[int, int, int]] = []

    async def body(step: Step) -> StepOutcome:
        job = q.job_record(step.job_id)
        assert job is not None
        seen.append((step.step_number, step.max_attempts, job.priority))
        if step.step_number == 0:
            return StepOutcome.continue_now(b"next")
        raise StepError.transient("always")

    runner = Runner(body)
    rt = WorkflowRuntime(q, runner, hook)
    options = RunOptions(priority=7, max_attempts_per_step=2, headers={"k": "v"})
    await rt.submit(RunSpec(b"x", run_id="opts", options=options))
    worker = rt.spawn()
    try:
        end = await asyncio.wait_for(rt.wait("opts"), 30)
        await hook.entered.wait()
        [note] = notifications(q, "opts")
        hook.gate.set()
        await hook.called.wait()
    finally:
        hook.gate.set()  # a failed assertion must not hold the shutdown
        await worker.shutdown()
    assert seen == [(0, 2, 7), (1, 2, 7), (1, 2, 7)]  # step 1 exhausted after 2, not 5
    assert end.termination.final_step == 1
    assert (note.priority, note.max_attempts) == (7, 2)
    assert hook.seen[0].headers == {"k": "v"}


@pytest.mark.parametrize("as_datetime", [False, True])
async def test_run_at_holds_the_first_step_until_due(
    open_queue: Opener, clock: MockClock, as_datetime: bool
) -> None:
    """RunOptions.run_at (epoch ms or an aware datetime) schedules step 0."""
    q = await open_queue()
    runner = Runner(chain(0))
    rt = WorkflowRuntime(q, runner)
    due = clock.now_ms() + 60_000
    run_at: int | dt.datetime = (
        dt.datetime.fromtimestamp(due / 1000, tz=dt.UTC) if as_datetime else due
    )
    sub = await rt.submit(RunSpec(b"x", run_id="later", options=RunOptions(run_at=run_at)))
    job = q.job_record(sub.job_id)
    assert job is not None
    assert (job.status, job.run_at) == (JobStatus.SCHEDULED, due)
    status = rt.status("later")
    assert status is not None
    assert isinstance(status.state, Pending)
    worker = rt.spawn()
    try:
        await yield_to_the_loop()
        assert runner.ran == []
        clock.advance(59.999)
        assert q.promote_scheduled_now() == 0
        clock.advance(0.001)
        assert q.promote_scheduled_now() == 1
        end = await asyncio.wait_for(rt.wait("later"), 30)
    finally:
        await worker.shutdown()
    assert end.outcome.result == b"x!"


async def test_concurrent_submissions_of_one_run_id(open_queue: Opener) -> None:
    """Concurrent duplicates: one new run, one duplicate naming the same job;
    concurrent different inputs: one run, one InputMismatch."""
    q = await open_queue()
    rt = WorkflowRuntime(q, Runner(chain(0)))
    a, b = await asyncio.gather(
        rt.submit(RunSpec(b"same", run_id="twin")), rt.submit(RunSpec(b"same", run_id="twin"))
    )
    assert sorted([a.newly_submitted, b.newly_submitted]) == [False, True]
    assert a.job_id == b.job_id
    results = await asyncio.gather(
        rt.submit(RunSpec(b"one", run_id="rival")),
        rt.submit(RunSpec(b"two", run_id="rival")),
        return_exceptions=True,
    )
    assert sum(isinstance(r, InputMismatch) for r in results) == 1
    assert sum(getattr(r, "newly_submitted", False) for r in results) == 1
    assert q.stats(QUEUE).pending == 2


async def test_run_ids_are_checked_at_every_entry_point(open_queue: Opener) -> None:
    """1 to 128 bytes of [A-Za-z0-9_-]; anything else is InvalidId."""
    q = await open_queue()
    rt = WorkflowRuntime(q, Runner(chain(0)))
    longest = "a-Z_9" * 25 + "xyz"
    assert len(longest) == MAX_RUN_ID_LEN
    await rt.submit(RunSpec(b"x", run_id=longest))
    end = await finish(rt, longest)
    assert end.termination.status is SUCCEEDED
    for bad in ("", "a" * (MAX_RUN_ID_LEN + 1), "has space", "slash/y", "é"):
        with pytest.raises(InvalidId):
            RunSpec(b"x", run_id=bad)
    with pytest.raises(InvalidId):
        rt.status("bad id")
    with pytest.raises(InvalidId):
        await rt.cancel("bad id")
    with pytest.raises(InvalidId):
        await rt.wait("bad id")
    with pytest.raises(InvalidId):
        await rt.outcome("bad id")


# ----------------------------------------------------- 5. status and waiting


async def test_status_walks_pending_running_and_the_termination(
    open_queue: Opener, clock: MockClock
) -> None:
    """Pending, then Running with the current step, then Terminated with the
    status, error, error kind, final step and the time of termination; the
    outcome exists only once terminated."""
    q = await open_queue()
    gate = Gate(lambda s: Fail("nope"))

    async def body(step: Step) -> StepOutcome:
        if step.step_number == 0:
            return StepOutcome.continue_now(b"next")
        return await gate(step)

    rt = WorkflowRuntime(q, Runner(body))
    await rt.submit(RunSpec(b"x", run_id="walk", options=RunOptions(headers={"h": "1"})))
    assert rt.status("walk") == rt.view.status("walk")
    status = rt.status("walk")
    assert status is not None
    assert (status.state, status.current_step) == (Pending(), 0)
    worker = rt.spawn()
    try:
        await gate.started.wait()
        status = rt.status("walk")
        assert status is not None
        assert (status.state, status.current_step) == (Running(), 1)
        assert await rt.outcome("walk") is None  # active
        with pytest.raises(TimeoutError):
            await rt.wait_timeout("walk", 0.0)
        clock.advance(5)
        ended_at = clock.now_ms()
        gate.release.set()
        end = await asyncio.wait_for(rt.wait("walk"), 30)
    finally:
        gate.release.set()  # a failed assertion must not hold the shutdown
        await worker.shutdown()
    expected = RunTermination(FAILED, 1, ended_at, error="nope")
    assert end == RunEnd(expected, RunOutcome("walk", FAILED, 1, error="nope", headers={"h": "1"}))
    assert termination(rt, "walk") == expected
    assert await rt.outcome("walk") == end.outcome


async def test_a_resubmitted_run_id_does_not_report_the_earlier_runs_outcome(
    open_queue: Opener,
) -> None:
    """The run result record of an earlier run under the same id (here a large
    one, in the run memo) is not the outcome of the later run."""
    q = await open_queue()

    async def body(step: Step) -> StepOutcome:
        return Succeed(b"L" * 10_000)

    rt = WorkflowRuntime(q, Runner(body))
    await rt.submit(RunSpec(b"first", run_id="reuse"))
    first = await finish(rt, "reuse")
    assert first.outcome.result == b"L" * 10_000
    assert (await rt.submit(RunSpec(b"second", run_id="reuse"))).newly_submitted
    assert await rt.outcome("reuse") is None  # active again
    assert await rt.cancel("reuse") is True
    assert termination(rt, "reuse").status is CANCELLED
    assert await rt.memos.get_outcome("reuse") is not None  # the first run's record
    assert await rt.outcome("reuse") is None
    end = await rt.wait("reuse")
    assert end is not None
    assert end.outcome is None


async def test_status_and_outcomes_survive_a_restart(open_queue: Opener) -> None:
    """Terminated runs (small and large outcomes) and an active run read the
    same from a new process; wait on a terminated run returns at once."""
    q = await open_queue()

    async def body(step: Step) -> StepOutcome:
        if step.payload == b"wait":
            return StepOutcome.continue_after(b"later", 3600)
        return Succeed(step.payload * (5000 if step.payload == b"big" else 1))

    rt = WorkflowRuntime(q, Runner(body))
    subs = {r: await rt.submit(RunSpec(r.encode(), run_id=r)) for r in ("small", "big", "wait")}
    worker = rt.spawn()
    try:
        ends = {r: await asyncio.wait_for(rt.wait(r), 30) for r in ("small", "big")}
        await settle_step(q, subs["wait"].job_id)
    finally:
        await worker.shutdown()
    await q.close()
    q2 = await open_queue()
    rt2 = WorkflowRuntime(q2, Runner(body))
    for run_id, end in ends.items():
        assert termination(rt2, run_id) == end.termination
        assert await rt2.outcome(run_id) == end.outcome
        assert await rt2.wait(run_id) == end
    assert (await rt2.outcome("big")).result == b"big" * 5000  # type: ignore[union-attr]
    status = rt2.status("wait")
    assert status is not None
    assert (status.state, status.current_step) == (Pending(), 1)


async def test_a_reader_process_sees_running_and_cancelling(
    open_queue: Opener, make_objects: Factory
) -> None:
    """WorkflowView over a QueueReader follows the run through Running and
    Cancelling to Terminated."""
    q = await open_queue()
    gate = Gate(lambda s: Succeed(b"ignored"))
    rt = WorkflowRuntime(q, Runner(gate))
    await rt.submit(RunSpec(b"x", run_id="watched"))
    reader = await QueueReader.open(make_objects())
    view = WorkflowView(reader, MemoStore(make_objects(), rt.memos.prefix))
    worker = rt.spawn()
    try:
        await gate.started.wait()
        await q.writer.flush()
        await reader.refresh()
        status = view.status("watched")
        assert status is not None
        assert isinstance(status.state, Running)
        assert await rt.cancel("watched")
        await reader.refresh()
        status = view.status("watched")
        assert status is not None
        assert isinstance(status.state, Cancelling)
        gate.release.set()
        await asyncio.wait_for(rt.wait("watched"), 30)
    finally:
        gate.release.set()  # a failed assertion must not hold the shutdown
        await worker.shutdown()
        await q.writer.flush()
    await reader.refresh()
    status = view.status("watched")
    assert status is not None
    assert isinstance(status.state, Terminated)
    assert status.state.termination.status is CANCELLED
    assert await view.outcome("watched") == await rt.outcome("watched")
    await reader.close()


# ----------------------------------------------------------- 6. cancellation


async def test_cancel_of_a_scheduled_step_removes_it_and_notifies_before_returning(
    open_queue: Opener,
) -> None:
    """A step waiting on a delay is removed; the run is terminated and its
    notification enqueued by the time cancel returns."""
    q = await open_queue()

    async def body(step: Step) -> StepOutcome:
        return StepOutcome.continue_after(b"next", 600)

    hook = RecordingHook()
    rt = WorkflowRuntime(q, Runner(body), hook)
    sub = await rt.submit(
        RunSpec(b"x", run_id="sched", options=RunOptions(priority=3, headers={"u": "1"}))
    )
    worker = rt.spawn()
    await settle_step(q, sub.job_id)
    await worker.shutdown()
    assert q.stats(QUEUE).scheduled == 1
    pointer = rt.view.pointer("sched")
    assert pointer is not None
    assert await rt.cancel("sched") is True
    assert q.stats(QUEUE).scheduled == 0
    t = termination(rt, "sched")
    assert (t.status, t.error, t.error_kind, t.final_step) == (CANCELLED, None, None, 1)
    [note] = notifications(q, "sched")
    assert note.status is JobStatus.PENDING
    assert note.dedup_key == f"run:sched:terminal:{pointer.job_id}"  # the removed step's
    assert note.priority == 3
    assert await rt.outcome("sched") is None  # no worker recorded one
    worker = rt.spawn()
    try:
        await hook.called.wait()
    finally:
        await worker.shutdown()
    assert hook.seen == [RunOutcome("sched", CANCELLED, 1, headers={"u": "1"})]


async def test_each_incarnation_of_a_reused_run_id_is_notified(open_queue: Opener) -> None:
    """Submit x, cancel it, submit x again, cancel it again, with no worker
    running: both notifications wait in the queue, and the hook sees two
    outcomes."""
    q = await open_queue()
    hook = RecordingHook()
    rt = WorkflowRuntime(q, Runner(chain(0)), hook)
    for input in (b"first", b"second"):
        sub = await rt.submit(RunSpec(input, run_id="x"))
        assert sub.newly_submitted
        assert await rt.cancel("x") is True
    assert len(notifications(q, "x")) == 2
    worker = rt.spawn()
    try:
        while len(hook.seen) < 2:
            await asyncio.wait_for(hook.called.wait(), 30)
            hook.called.clear()
    finally:
        await worker.shutdown()
    assert hook.seen == [RunOutcome("x", CANCELLED, 0)] * 2


async def test_a_termination_committed_twice_is_notified_once(open_queue: Opener) -> None:
    """The notification is deduplicated per termination: the effects of one
    incarnation's termination committed a second time enqueue nothing more;
    another termination of the run id (another step job) does."""
    q = await open_queue()
    rt = WorkflowRuntime(q, Runner(chain(0)), RecordingHook())
    sub = await rt.submit(RunSpec(b"x", run_id="twice"))
    record = rt.view.run_record("twice")
    assert record is not None
    termination = RunTermination(CANCELLED, 0, 1)
    outcome = RunOutcome("twice", CANCELLED, 0)

    def effects(step_job_id: str) -> SettlementEffects:
        return rt.termination_effects(
            record,
            termination,
            outcome,
            step_job_id=step_job_id,
            priority=None,
            max_attempts=None,
        )

    await q.commit_effects(effects(sub.job_id))
    await q.commit_effects(effects(sub.job_id))  # redelivered
    assert len(notifications(q, "twice")) == 1
    await q.commit_effects(effects(q.next_job_id()))  # another incarnation's
    assert len(notifications(q, "twice")) == 2


@pytest.mark.parametrize(
    "then",
    [
        pytest.param(lambda s: Succeed(b"done anyway"), id="succeed"),
        pytest.param(lambda s: StepOutcome.continue_now(b"more"), id="continue"),
        pytest.param(lambda s: Fail("failed anyway"), id="fail"),
        pytest.param(raiser(StepError.transient("would retry")), id="transient"),
        pytest.param(raiser(StepError.permanent("would dead-letter")), id="permanent"),
    ],
)
async def test_a_running_step_that_ignores_the_token_is_cancelled_whatever_it_returns(
    open_queue: Opener, then: Callable[[Step], StepOutcome]
) -> None:
    """The outcome is discarded with its effects, no retry and no dead-letter:
    the run is settled Cancelled (error None) once the step returns."""
    q = await open_queue(max_attempts=3)
    gate = Gate(then)
    runner = Runner(gate)
    hook = RecordingHook()
    rt = WorkflowRuntime(q, runner, hook)
    await rt.submit(RunSpec(b"x", run_id="ignores"))
    worker = rt.spawn()
    try:
        await gate.started.wait()
        assert await rt.cancel("ignores") is True
        assert gate.steps[0].cancel_token.is_cancelled()
        status = rt.status("ignores")
        assert status is not None
        assert isinstance(status.state, Cancelling)
        assert await rt.cancel("ignores") is True  # still active: accepted again
        gate.release.set()
        end = await asyncio.wait_for(rt.wait("ignores"), 30)
        await hook.called.wait()
    finally:
        gate.release.set()  # a failed assertion must not hold the shutdown
        await worker.shutdown()
    t = end.termination
    assert (t.status, t.error, t.error_kind, t.final_step) == (CANCELLED, None, None, 0)
    assert end.outcome == RunOutcome("ignores", CANCELLED, 0)
    assert len(runner.ran) == 1
    assert q.stats(QUEUE).dead == 0
    assert step_jobs(q, (*LIVE, JobStatus.DEAD)) == []  # no next step, no retry
    assert q.kv.get(b"app/staged") is None
    assert [o.status for o in hook.seen] == [CANCELLED]


async def test_a_runner_that_watches_the_token_cancels_with_its_reason_and_effects(
    open_queue: Opener,
) -> None:
    """A runner-issued Cancel wins over the external request: its reason and
    its effects are kept."""
    q = await open_queue()
    started = asyncio.Event()

    async def body(step: Step) -> StepOutcome:
        started.set()
        await step.cancel_token.wait()
        step.effects.put(b"app/why", b"cooperative")
        return Cancel("cooperative")

    rt = WorkflowRuntime(q, Runner(body))
    await rt.submit(RunSpec(b"x", run_id="coop"))
    worker = rt.spawn()
    try:
        await started.wait()
        assert await rt.cancel("coop")
        end = await asyncio.wait_for(rt.wait("coop"), 30)
    finally:
        await worker.shutdown()
    assert (end.termination.status, end.termination.error) == (CANCELLED, "cooperative")
    assert q.kv.get(b"app/why") == b"cooperative"


async def test_a_runner_firing_its_own_token_cancels_only_its_own_work(
    open_queue: Opener, clock: MockClock
) -> None:
    """The step's token is its own: firing it and returning Succeed succeeds
    the run with the step's effects, and the lease still renews."""
    q = await open_queue(lease_duration=30.0)
    renewed: list[int] = []

    async def body(step: Step) -> StepOutcome:
        work = asyncio.ensure_future(step.cancel_token.wait())  # the step's own work
        step.cancel_token.fire()
        await work
        renewed.append(step.lease.ensure_at_least(60))
        step.effects.put(b"app/done", b"yes")
        return Succeed(b"fine")

    rt = WorkflowRuntime(q, Runner(body), RecordingHook())
    await rt.submit(RunSpec(b"x", run_id="self-cancel"))
    end = await finish(rt, "self-cancel")
    assert (end.termination.status, end.outcome.result) == (SUCCEEDED, b"fine")
    assert renewed == [clock.now_ms() + 65_000]
    assert q.kv.get(b"app/done") == b"yes"


async def test_a_runner_cancel_verdict_never_shows_cancelling(open_queue: Opener) -> None:
    """Cancelling is the state of an external request only."""
    q = await open_queue()
    gate = Gate(lambda s: Cancel("mine"))
    rt = WorkflowRuntime(q, Runner(gate))
    await rt.submit(RunSpec(b"x", run_id="own-cancel"))
    worker = rt.spawn()
    try:
        await gate.started.wait()
        status = rt.status("own-cancel")
        assert status is not None
        assert isinstance(status.state, Running)
        gate.release.set()
        end = await asyncio.wait_for(rt.wait("own-cancel"), 30)
    finally:
        gate.release.set()  # a failed assertion must not hold the shutdown
        await worker.shutdown()
    assert (end.termination.status, end.termination.error) == (CANCELLED, "mine")
    assert q.kv.get(b"app/staged") == b"by the gated step"


async def test_a_cancel_request_survives_a_crash_of_the_running_step(
    open_queue: Opener,
) -> None:
    """The request is on the run record: after a crash the redelivered step is
    settled Cancelled without running; status says Cancelling in between."""
    q = await open_queue(max_attempts=3)
    gate = Gate(lambda s: Succeed(b"never"))
    rt = WorkflowRuntime(q, Runner(gate))
    await rt.submit(RunSpec(b"x", run_id="crash-cancel"))
    worker = rt.spawn()
    await gate.started.wait()
    assert await rt.cancel("crash-cancel")
    await q.writer.flush()
    await worker.abort()  # the process dies with the step running
    q2 = await open_queue(max_attempts=3)  # recovery requeues the step (attempts left)
    hook = RecordingHook()
    runner2 = Runner(chain(0))
    rt2 = WorkflowRuntime(q2, runner2, hook)
    status = rt2.status("crash-cancel")
    assert status is not None
    assert isinstance(status.state, Cancelling)
    worker2 = rt2.spawn()
    try:
        end = await asyncio.wait_for(rt2.wait("crash-cancel"), 30)
        await hook.called.wait()
    finally:
        await worker2.shutdown()
    assert end.termination.status is CANCELLED
    assert runner2.ran == []
    assert q2.kv.get(b"app/staged") is None
    assert [o.status for o in hook.seen] == [CANCELLED]


async def test_a_cancelled_run_and_its_notification_survive_a_restart(
    open_queue: Opener,
) -> None:
    """Cancel of a pending step commits the termination and the notification
    durably: a new process reports it and its hook receives it."""
    q = await open_queue()
    rt = WorkflowRuntime(q, Runner(chain(0)), RecordingHook())
    await rt.submit(RunSpec(b"x", run_id="gone", options=RunOptions(headers={"t": "1"})))
    assert await rt.cancel("gone")
    await q.close()
    q2 = await open_queue()
    hook = RecordingHook()
    runner = Runner(chain(0))
    rt2 = WorkflowRuntime(q2, runner, hook)
    assert termination(rt2, "gone").status is CANCELLED
    assert await rt2.cancel("gone") is False
    worker = rt2.spawn()
    try:
        await hook.called.wait()
    finally:
        await worker.shutdown()
    assert hook.seen == [RunOutcome("gone", CANCELLED, 0, headers={"t": "1"})]
    assert runner.ran == []


async def test_cancel_reaches_a_running_step_from_another_runtime(open_queue: Opener) -> None:
    """A runtime with no worker cancels a step another runtime over the same
    queue is running."""
    q = await open_queue()
    started = asyncio.Event()

    async def body(step: Step) -> StepOutcome:
        started.set()
        await step.cancel_token.wait()
        return StepOutcome.continue_now(b"discarded")

    working = WorkflowRuntime(q, Runner(body))
    other = WorkflowRuntime(q, Runner(chain(0)))
    await other.submit(RunSpec(b"x", run_id="remote"))
    worker = working.spawn()
    try:
        await started.wait()
        assert await other.cancel("remote") is True
        end = await asyncio.wait_for(working.wait("remote"), 30)
    finally:
        await worker.shutdown()
    assert end.termination.status is CANCELLED
    assert termination(other, "remote").status is CANCELLED


async def test_cancel_is_false_for_unknown_and_terminal_runs(open_queue: Opener) -> None:
    """Unknown, succeeded, failed and cancelled runs: False, and no notification."""
    q = await open_queue()
    hook = RecordingHook()

    async def body(step: Step) -> StepOutcome:
        return Fail("no") if step.payload == b"fail" else Succeed(b"ok")

    rt = WorkflowRuntime(q, Runner(body), hook)
    await rt.submit(RunSpec(b"ok", run_id="ok"))
    await rt.submit(RunSpec(b"fail", run_id="failed"))
    worker = rt.spawn()
    try:
        await asyncio.wait_for(rt.wait("ok"), 30)
        await asyncio.wait_for(rt.wait("failed"), 30)
    finally:
        await worker.shutdown()
    for run_id in ("ok", "failed", "never-submitted"):
        assert await rt.cancel(run_id) is False
    assert termination(rt, "ok").status is SUCCEEDED
    assert termination(rt, "failed").status is FAILED
    worker = rt.spawn()  # deliver the notifications there are
    try:
        while len(hook.seen) < 2:
            hook.called.clear()
            await hook.called.wait()
    finally:
        await worker.shutdown()
    assert sorted(o.run_id for o in hook.seen) == ["failed", "ok"]
    assert notifications(q, "ok") == notifications(q, "failed") == []


async def test_a_cancel_racing_the_reconciliation_cannot_strand_the_run(
    make_objects: Factory, clock: MockClock
) -> None:
    """A cancellation request that changes the run record while a reaped step
    is being reconciled does not leave the run active with a dead step."""
    # Offloading the notification's payload makes the reconciliation await
    # between its read of the run record and its commit.
    options = OpenOptions(
        clock=clock,
        reaper_interval=HOUR,
        scheduler_interval=HOUR,
        payload_offload_threshold=16,
        queue_configs={QUEUE: QueueConfig(max_attempts=1, lease_duration=30.0)},
    )
    q = await Queue.open(make_objects(), options)
    try:
        rt = WorkflowRuntime(q, Runner(chain(0)), RecordingHook())
        await rt.submit(RunSpec(b"x", run_id="raced"))
        assert await q.claim(QUEUE) is not None  # its worker dies with it
        clock.advance(31)
        assert q.reap_now() == 1
        reconciled, cancelled = await asyncio.gather(rt.reconcile_dead(), rt.cancel("raced"))
        assert cancelled is True
        assert reconciled == 1
        t = termination(rt, "raced")
        assert (t.status, t.error) == (FAILED, "lease expired")
        assert len(notifications(q, "raced")) == 1
    finally:
        await q.close()


async def test_a_dead_letter_and_a_dead_sweep_in_one_reaper_tick_still_end_the_run(
    open_queue: Opener, clock: MockClock
) -> None:
    """An old dead step was reconciled; a step hangs; in one reaper tick the
    reaper dead-letters it and the dead-retention sweep removes the old one.
    The dead count is unchanged, yet the run fails with the reaper's error
    and the hook is told."""
    q = await open_queue(max_attempts=1, lease_duration=30.0, dead_retention=60.0)
    gate = Gate(lambda s: Succeed(b"too late"))

    async def body(step: Step) -> StepOutcome:
        if step.run_id == "old":
            raise StepError.permanent("the old failure")
        return await gate(step)

    hook = RecordingHook()
    # Maintenance runs once when the worker starts, then not within the test.
    rt = WorkflowRuntime(q, Runner(body), hook, RuntimeOptions(poll_interval=HOUR))
    await rt.submit(RunSpec(b"x", run_id="old"))
    assert (await finish(rt, "old")).termination.status is FAILED
    await hook.called.wait()
    hook.called.clear()
    assert q.stats(QUEUE).dead == 1
    assert await rt.reconcile_dead() == 0  # the old dead step ended its run already
    clock.advance(40)
    await rt.submit(RunSpec(b"x", run_id="hung"))
    worker = rt.spawn()
    try:
        await gate.started.wait()
        clock.advance(31)  # the lease ran out, and the old dead job's retention
        assert q.reap_now() == 1  # one reaper tick: the reaper, then the sweeps
        assert q.sweep_now().dead == 1
        assert q.stats(QUEUE).dead == 1  # as at the last reconciliation
        assert await rt.reconcile_dead() == 1
        end = await asyncio.wait_for(rt.wait("hung"), 30)
        await asyncio.wait_for(hook.called.wait(), 30)
    finally:
        gate.release.set()
        await worker.shutdown()
    t = end.termination
    assert (t.status, t.error, t.final_step) == (FAILED, "lease expired", 0)
    assert [(o.run_id, o.status, o.error) for o in hook.seen] == [
        ("old", FAILED, "the old failure"),
        ("hung", FAILED, "lease expired"),
    ]
    assert await rt.reconcile_dead() == 0  # nothing new: no scan


# ----------------------------------------------------------------- 8. KV


async def test_effects_are_validated_as_they_are_staged(open_queue: Opener) -> None:
    """Reserved prefix, value size and put/delete conflicts fail at staging;
    staging after the step returned fails with EffectsSealed."""
    q = await open_queue()
    kept: list[EffectsHandle] = []

    async def body(step: Step) -> StepOutcome:
        fx = step.effects
        with pytest.raises(ReservedKey):
            fx.put(b"workflow/outcomes/x", b"no")
        with pytest.raises(ReservedKey):
            fx.delete("workflow/runs/x")
        with pytest.raises(KvValueTooLarge):
            fx.put(b"app/huge", b"x" * (MAX_KV_VALUE_SIZE + 1))
        fx.put(b"app/max", b"x" * MAX_KV_VALUE_SIZE)
        fx.put(b"app/written", b"1")
        with pytest.raises(ConflictingKvEffect):
            fx.delete(b"app/written")
        fx.delete(b"app/removed")
        with pytest.raises(ConflictingKvEffect):
            fx.put(b"app/removed", b"back")
        kept.append(fx)
        return Succeed(b"ok")

    await q.commit_effects(SettlementEffects().kv_put(b"app/removed", b"old"))
    rt = WorkflowRuntime(q, Runner(body))
    await rt.submit(RunSpec(b"x", run_id="checked"))
    await finish(rt, "checked")
    assert q.kv.get(b"app/written") == b"1"
    assert q.kv.get(b"app/max") == b"x" * MAX_KV_VALUE_SIZE
    assert q.kv.get(b"app/removed") is None
    assert q.kv.get(b"app/huge") is None
    with pytest.raises(EffectsSealed):
        kept[0].put(b"app/late", b"lost")
    with pytest.raises(EffectsSealed):
        kept[0].delete(b"app/written")


async def test_kv_reads_committed_state_only(open_queue: Opener, make_objects: Factory) -> None:
    """Delivery.kv excludes the step's own staged writes; the next step, the
    queue's view and a reader process see them once committed."""
    q = await open_queue()
    reads: list[tuple[int, bytes | None, bytes | None]] = []

    async def body(step: Step) -> StepOutcome:
        before = step.kv.get(b"app/status")
        step.effects.put(b"app/status", b"step %d done" % step.step_number)
        reads.append((step.step_number, before, step.kv.get(b"app/status")))
        return await chain(1)(step)

    rt = WorkflowRuntime(q, Runner(body))
    await rt.submit(
        RunSpec(
            b"x", run_id="reads", effects=SettlementEffects().kv_put(b"app/status", b"submitted")
        )
    )
    await finish(rt, "reads")
    assert reads == [
        (0, b"submitted", b"submitted"),
        (1, b"step 0 done", b"step 0 done"),
    ]
    assert q.view.kv_get(b"app/status") == b"step 1 done"
    await q.writer.flush()
    reader = await QueueReader.open(make_objects())
    try:
        assert reader.kv_get(b"app/status") == b"step 1 done"
    finally:
        await reader.close()


# --------------------------------------------------------------- 9. memos


async def test_memos_are_scoped_to_the_step_and_to_the_run(open_queue: Opener) -> None:
    """A retry reads what the earlier attempt memoized; the next step has its
    own memo; the run memo is shared and its outcome key is reserved."""
    q = await open_queue(max_attempts=3)
    computed: list[int] = []
    later: list[Any] = []

    async def body(step: Step) -> StepOutcome:
        if step.step_number == 0:
            value = await step.memo.memoized("call", lambda: computed.append(1) or "paid result")
            if step.attempts == 1:
                raise StepError.transient("crashed after the paid call")
            await step.run_memo.put("journal", [value])
            return StepOutcome.continue_now(b"next")
        later.append(await step.memo.get("call"))
        later.append(await step.run_memo.get("journal"))
        with pytest.raises(ReservedMemoKey):
            await step.run_memo.put("workflow.outcome", "forged")
        return Succeed(b"done")

    rt = WorkflowRuntime(q, Runner(body))
    await rt.submit(RunSpec(b"x", run_id="memos"))
    end = await finish(rt, "memos")
    assert end.outcome.result == b"done"
    assert computed == [1]  # the retry did not pay again
    assert later == [None, ["paid result"]]
    assert await rt.memos.step_memo("memos", 0).get("call") == "paid result"
    assert await rt.memos.objects.list("workflow-steps-memo/")


# -------------------------------------------------------------- 10. replay

REPLAY = RuntimeOptions(step_output_replay=True)


async def test_a_recorded_delayed_continue_replays_on_its_original_schedule(
    open_queue: Opener, clock: MockClock
) -> None:
    """A delivery that finds its step's record (left by a delivery that died
    before its ack) settles it without the runner, with its staged effects,
    and shortens After by the time since it was stored."""
    q = await open_queue()
    runner = Runner(chain(1))
    rt = WorkflowRuntime(q, runner, options=REPLAY)
    recorded = ReplayRecord(
        clock.now_ms(),
        Continue(b"from the record", After(60.0)),
        {b"app/replayed": b"yes"},
        frozenset({b"app/gone"}),
    )
    await rt.replays.put("replay", 0, b"in", recorded)
    await q.commit_effects(SettlementEffects().kv_put(b"app/gone", b"present"))
    clock.advance(45)
    sub = await rt.submit(RunSpec(b"in", run_id="replay"))
    worker = rt.spawn()
    try:
        await settle_step(q, sub.job_id)
        assert runner.ran == []  # step 0 was replayed, not run
        assert q.kv.get(b"app/replayed") == b"yes"
        assert q.kv.get(b"app/gone") is None
        pointer = rt.view.pointer("replay")
        assert pointer is not None
        job = q.job_record(pointer.job_id)
        assert job is not None
        assert job.run_at == clock.now_ms() + 15_000  # 60 s after it was stored
        clock.advance(14.999)
        assert q.promote_scheduled_now() == 0
        clock.advance(0.001)
        assert q.promote_scheduled_now() == 1
        end = await asyncio.wait_for(rt.wait("replay"), 30)
    finally:
        await worker.shutdown()
    assert end.outcome.result == b"from the record!"
    assert runner.ran == [("replay", 1, 1)]


async def test_replay_records_every_verdict_but_no_external_cancel(open_queue: Opener) -> None:
    """Fail and Cancel are recorded with their effects; an outcome discarded by
    an external cancel is not; with replay off nothing is recorded."""
    q = await open_queue()

    async def body(step: Step) -> StepOutcome:
        step.effects.put(b"app/" + step.run_id.encode(), b"1")
        if step.run_id == "fails":
            return Fail("no")
        return Cancel("stop")

    rt = WorkflowRuntime(q, Runner(body), options=REPLAY)
    for run_id in ("fails", "cancels"):
        await rt.submit(RunSpec(b"x", run_id=run_id))
        await finish(rt, run_id)
    fails = await rt.replays.get("fails", 0, b"x")
    assert fails is not None
    assert (fails.outcome, fails.puts) == (Fail("no"), {b"app/fails": b"1"})
    cancels = await rt.replays.get("cancels", 0, b"x")
    assert cancels is not None
    assert cancels.outcome == Cancel("stop")

    gate = Gate(lambda s: Succeed(b"discarded"))
    rt = WorkflowRuntime(q, Runner(gate), options=REPLAY)
    await rt.submit(RunSpec(b"x", run_id="external"))
    worker = rt.spawn()
    try:
        await gate.started.wait()
        assert await rt.cancel("external")
        gate.release.set()
        await asyncio.wait_for(rt.wait("external"), 30)
    finally:
        gate.release.set()  # a failed assertion must not hold the shutdown
        await worker.shutdown()
    assert await rt.replays.get("external", 0, b"x") is None

    off = WorkflowRuntime(q, Runner(chain(0)))
    await off.submit(RunSpec(b"x", run_id="off"))
    await finish(off, "off")
    assert await off.replays.get("off", 0, b"x") is None


# ------------------------------------------------------------ 11. the hook


async def test_terminal_effects_commit_with_the_notifications_ack(open_queue: Opener) -> None:
    """The hook's KV writes, deletes and follow-up jobs commit with its ack;
    its staging is checked like a step's."""
    q = await open_queue()
    await q.commit_effects(SettlementEffects().kv_put(b"app/pending/n1", b"1"))
    done = asyncio.Event()
    problems: list[type[Exception]] = []

    class Hook:
        def observes(self, outcome: RunOutcome) -> bool:
            return True

        async def on_termination(self, outcome: RunOutcome, effects: TerminalEffects) -> None:
            effects.put(b"app/result/" + outcome.run_id.encode(), outcome.result or b"")
            effects.delete(b"app/pending/" + outcome.run_id.encode())
            effects.enqueue("emails", b"run " + outcome.run_id.encode() + b" done")
            try:
                effects.put(b"workflow/runs/" + outcome.run_id.encode(), b"")
            except ReservedKey as e:
                problems.append(type(e))
            done.set()

    rt = WorkflowRuntime(q, Runner(chain(0)), Hook())
    await rt.submit(RunSpec(b"x", run_id="n1"))
    worker = rt.spawn()
    try:
        await done.wait()
    finally:
        await worker.shutdown()  # the notification's ack settles
    assert q.kv.get(b"app/result/n1") == b"x!"
    assert q.kv.get(b"app/pending/n1") is None
    [email] = list(q.iter_jobs("emails", JobStatus.PENDING))
    assert email.payload == b"run n1 done"
    assert problems == [ReservedKey]


async def test_transient_hook_errors_retry_up_to_the_terminal_steps_attempts(
    open_queue: Opener,
) -> None:
    """A hook failing transiently is retried up to the terminal step's
    max_attempts (not the queue's), then its notification is dead-lettered."""
    q = await open_queue(max_attempts=5)
    hook = RecordingHook(fail_first=100)
    rt = WorkflowRuntime(q, Runner(chain(0)), hook)
    options = RunOptions(max_attempts_per_step=2)
    await rt.submit(RunSpec(b"x", run_id="retry-hook", options=options))
    worker = rt.spawn()
    try:
        await asyncio.wait_for(rt.wait("retry-hook"), 30)
        [note] = notifications(q, "retry-hook", (*LIVE, JobStatus.DEAD))
        completion = await asyncio.wait_for(q.wait_for_completion(note.id, None), 30)
    finally:
        await worker.shutdown()
    assert isinstance(completion, Dead)
    assert completion.record.last_error == "hook endpoint down"
    assert hook.calls == 2
    assert hook.seen == []
    assert q.kv.get(b"hooked/retry-hook") is None
    assert termination(rt, "retry-hook").status is SUCCEEDED  # the run is unaffected
    assert await rt.reconcile_dead() == 0  # a dead notification ends no run


async def test_a_permanent_hook_error_dead_letters_the_notification(open_queue: Opener) -> None:
    """A permanent error: one call, the notification dead, its effects dropped."""
    q = await open_queue(max_attempts=5)
    calls: list[str] = []

    class Hook:
        def observes(self, outcome: RunOutcome) -> bool:
            return True

        async def on_termination(self, outcome: RunOutcome, effects: TerminalEffects) -> None:
            calls.append(outcome.run_id)
            effects.put(b"app/hooked", b"1")
            raise StepError.permanent("no such endpoint")

    rt = WorkflowRuntime(q, Runner(chain(0)), Hook())
    await rt.submit(RunSpec(b"x", run_id="perm-hook"))
    worker = rt.spawn()
    try:
        await asyncio.wait_for(rt.wait("perm-hook"), 30)
        [note] = notifications(q, "perm-hook", (*LIVE, JobStatus.DEAD))
        completion = await asyncio.wait_for(q.wait_for_completion(note.id, None), 30)
    finally:
        await worker.shutdown()
    assert isinstance(completion, Dead)
    assert completion.record.last_error == "no such endpoint"
    assert calls == ["perm-hook"]
    assert q.kv.get(b"app/hooked") is None
    assert termination(rt, "perm-hook").status is SUCCEEDED


async def test_observes_decides_which_runs_get_a_notification(open_queue: Opener) -> None:
    """observes() is asked at termination; False enqueues nothing, on the
    worker's path and on a cancellation's."""
    q = await open_queue()

    class FailuresOnly(RecordingHook):
        def observes(self, outcome: RunOutcome) -> bool:
            return outcome.status is FAILED

    async def body(step: Step) -> StepOutcome:
        return Fail("bad") if step.payload == b"bad" else Succeed(b"ok")

    hook = FailuresOnly()
    rt = WorkflowRuntime(q, Runner(body), hook)
    await rt.submit(RunSpec(b"cancel-me", run_id="cancelled"))
    assert await rt.cancel("cancelled")
    assert notifications(q, "cancelled") == []
    await rt.submit(RunSpec(b"ok", run_id="good"))
    await rt.submit(RunSpec(b"bad", run_id="bad"))
    worker = rt.spawn()
    try:
        await asyncio.wait_for(rt.wait("good"), 30)
        await asyncio.wait_for(rt.wait("bad"), 30)
        await hook.called.wait()
    finally:
        await worker.shutdown()
    assert [o.run_id for o in hook.seen] == ["bad"]
    assert q.stats(QUEUE).done == 3  # two steps and one notification


async def test_the_noop_hook_costs_no_notification(open_queue: Opener) -> None:
    """NoopTerminalHook (the default) observes nothing: no notification job on
    any path."""
    q = await open_queue(max_attempts=1)

    async def body(step: Step) -> StepOutcome:
        if step.payload == b"boom":
            raise StepError.transient("boom")
        return await chain(1)(step)

    rt = WorkflowRuntime(q, Runner(body))
    await rt.submit(RunSpec(b"x", run_id="cancelled"))
    assert await rt.cancel("cancelled")
    await rt.submit(RunSpec(b"x", run_id="fine"))
    await rt.submit(RunSpec(b"boom", run_id="exhausted"))
    worker = rt.spawn()
    try:
        for run_id in ("fine", "exhausted"):
            await asyncio.wait_for(rt.wait(run_id), 30)
    finally:
        await worker.shutdown()
    stats = q.stats(QUEUE)
    assert (stats.pending, stats.claimed, stats.scheduled) == (0, 0, 0)
    assert stats.done == 2  # the two steps of "fine", nothing else
    assert stats.dead == 1


async def test_a_run_dead_lettered_at_open_is_notified_and_retained_like_others(
    open_queue: Opener, clock: MockClock
) -> None:
    """Reconciliation at open: Failed with the recovery's error, the
    notification (priority and attempts of the dead step) in the same
    transaction, no run result, a terminal marker."""
    q = await open_queue(max_attempts=3)
    gate = Gate(lambda s: Succeed(b"never"))
    rt = WorkflowRuntime(q, Runner(gate))
    run_options = RunOptions(headers={"t": "1"}, priority=5, max_attempts_per_step=1)
    await rt.submit(RunSpec(b"x", run_id="lost", options=run_options))
    worker = rt.spawn()
    await gate.started.wait()
    await q.writer.flush()
    await worker.abort()
    q2 = await open_queue(max_attempts=3)  # the step's own limit (1) is spent
    hook = RecordingHook()
    options = RuntimeOptions(memo_retention=60.0)
    rt2 = WorkflowRuntime(q2, Runner(chain(0)), hook, options)
    assert await rt2.reconcile_dead() == 1
    t = termination(rt2, "lost")
    assert (t.status, t.error, t.error_kind) == (FAILED, "claim interrupted by process exit", None)
    [note] = notifications(q2, "lost")
    assert (note.priority, note.max_attempts) == (5, 1)  # as the dead step's
    assert await rt2.outcome("lost") is None
    worker2 = rt2.spawn()
    try:
        await hook.called.wait()
    finally:
        await worker2.shutdown()
    assert hook.seen == [
        RunOutcome("lost", FAILED, 0, error="claim interrupted by process exit", headers={"t": "1"})
    ]
    clock.advance(60)
    assert await rt2.sweep_memos() == 1
    assert rt2.status("lost") is None


# -------------------------------------------------------- 12. memo retention


async def test_terminal_markers_exist_exactly_with_memo_retention(
    open_queue: Opener, clock: MockClock
) -> None:
    """With retention, every termination writes one marker at its time;
    without, none."""
    q = await open_queue()
    plain = WorkflowRuntime(q, Runner(chain(0)))
    await plain.submit(RunSpec(b"x", run_id="unmarked"))
    await finish(plain, "unmarked")
    prefix = engine_keys.terminals_prefix(QUEUE)
    assert q.kv.scan(prefix, limit=10).entries == []
    kept = WorkflowRuntime(q, Runner(chain(0)), options=RuntimeOptions(memo_retention=60.0))
    await kept.submit(RunSpec(b"x", run_id="marked"))
    await finish(kept, "marked")
    await kept.submit(RunSpec(b"x", run_id="cancelled"))
    assert await kept.cancel("cancelled")
    markers = q.kv.scan(prefix, limit=10).entries
    expected = {
        kept._terminals.entry_key(termination(kept, r).terminated_at_ms, r.encode())
        for r in ("marked", "cancelled")
    }
    assert {k for k, _ in markers} == expected
    assert all(v == b"" for _, v in markers)


async def test_the_sweep_runs_at_every_poll_interval_and_takes_replay_records(
    open_queue: Opener, clock: MockClock
) -> None:
    """A running worker sweeps each poll interval: memo entries, replay
    records, the terminal record and the marker go once the window passed."""
    q = await open_queue()

    async def body(step: Step) -> StepOutcome:
        await step.memo.put("k", 1)
        await step.run_memo.put("j", 2)
        return Succeed(b"done")

    options = RuntimeOptions(memo_retention=60.0, poll_interval=5.0, step_output_replay=True)
    rt = WorkflowRuntime(q, Runner(body), options=options)
    await rt.submit(RunSpec(b"x", run_id="swept"))
    worker = rt.spawn()
    try:
        await asyncio.wait_for(rt.wait("swept"), 30)
        assert await rt.replays.get("swept", 0, b"x") is not None
        assert len(await rt.memos.objects.list(rt.memos.prefix + "/")) == 3
        await clock.wait_for_sleepers(BG + 2)  # the idle worker and maintenance
        clock.advance(55)
        await yield_to_the_loop()
        await clock.wait_for_sleepers(BG + 2)  # that pass is over
        assert rt.status("swept") is not None  # 55 s: not due
        key = engine_keys.outcome_key("swept")
        assert q.kv.get(key) is not None
        gone = q.kv.watch(key)  # no await since the read
        clock.advance(5)  # the next pass is due and so is the run
        await asyncio.wait_for(gone, 30)
    finally:
        await worker.shutdown()
    assert rt.status("swept") is None
    assert await rt.replays.get("swept", 0, b"x") is None
    assert await rt.memos.objects.list(rt.memos.prefix + "/") == []
    assert q.kv.scan(engine_keys.terminals_prefix(QUEUE), limit=10).entries == []


async def test_a_reused_run_id_shares_memos_until_the_earlier_marker_expires(
    open_queue: Opener, clock: MockClock
) -> None:
    """A second run under a terminated run's id reads the first run's entries;
    the first run's marker expires against them while the second run is active
    (which then re-executes from absence) and leaves the active run alone."""
    q = await open_queue()
    journal: list[Any] = []

    async def body(step: Step) -> StepOutcome:
        if step.payload == b"first":
            await step.run_memo.put("journal", "written by the first run")
            return Succeed(b"1")
        journal.append(await step.run_memo.get("journal"))
        if step.step_number == 0:
            return StepOutcome.continue_after(b"second", 60)
        return Succeed(b"2")

    rt = WorkflowRuntime(q, Runner(body), options=RuntimeOptions(memo_retention=60.0))
    await rt.submit(RunSpec(b"first", run_id="reused"))
    await finish(rt, "reused")
    second = await rt.submit(RunSpec(b"second-input", run_id="reused"))
    assert second.newly_submitted
    worker = rt.spawn()
    await settle_step(q, second.job_id)
    await worker.shutdown()
    assert journal == ["written by the first run"]  # shared entries
    clock.advance(60)  # the first run's marker is due; the second run is active
    assert await rt.sweep_memos() == 1
    assert await rt.memos.run_memo("reused").get("journal") is None
    status = rt.status("reused")
    assert status is not None
    assert (status.state, status.current_step) == (Pending(), 1)
    assert q.promote_scheduled_now() == 1
    end = await finish(rt, "reused")
    assert journal == ["written by the first run", None]  # absent: re-executes
    assert end.outcome.result == b"2"


async def test_an_earlier_runs_marker_spares_a_later_runs_terminal_record(
    open_queue: Opener, clock: MockClock
) -> None:
    """When the earlier run's marker expires after the run id was reused and
    terminated again, the later termination keeps its record for its own
    window."""
    q = await open_queue()
    rt = WorkflowRuntime(q, Runner(chain(0)), options=RuntimeOptions(memo_retention=60.0))
    await rt.submit(RunSpec(b"one", run_id="twice"))
    await finish(rt, "twice")
    clock.advance(10)
    await rt.submit(RunSpec(b"two", run_id="twice"))
    second = await finish(rt, "twice")
    clock.advance(50)  # the first marker is due, the second is not
    assert await rt.sweep_memos() == 1
    assert termination(rt, "twice") == second.termination
    assert await rt.outcome("twice") == second.outcome
    clock.advance(10)
    assert await rt.sweep_memos() == 1
    assert rt.status("twice") is None


async def _memo_then_succeed(step: Step) -> StepOutcome:
    await step.run_memo.put("k", step.run_id)
    return Succeed(b"done")


async def test_a_runtime_sweeps_only_its_own_runs_with_its_own_retention(
    open_queue: Opener, clock: MockClock
) -> None:
    """Runtimes on queues "long" (retention 1 h) and "short" (10 s) share a
    store: 11 s after both ended a run, the short runtime sweeps its own run
    and leaves the long one (status and memo objects); the long runtime
    removes that one after its hour."""
    q = await open_queue()
    runner = Runner(_memo_then_succeed)
    long = WorkflowRuntime(q, runner, options=RuntimeOptions("long", memo_retention=3600.0))
    short = WorkflowRuntime(q, runner, options=RuntimeOptions("short", memo_retention=10.0))
    for rt, run_id in ((long, "long-run"), (short, "short-run")):
        await rt.submit(RunSpec(b"x", run_id=run_id))
        await finish(rt, run_id)
    clock.advance(11)
    assert await short.sweep_memos() == 1
    assert short.status("short-run") is None
    assert await long.sweep_memos() == 0
    termination(long, "long-run")  # still there
    assert await long.memos.run_memo("long-run").get("k") == "long-run"
    clock.advance(3600)
    assert await short.sweep_memos() == 0
    assert await long.sweep_memos() == 1
    assert long.status("long-run") is None
    for rt in (long, short):
        assert await rt.memos.objects.list(rt.memos.prefix + "/") == []


async def test_runtimes_sharing_a_memo_prefix_each_sweep_their_own_queue(
    open_queue: Opener, clock: MockClock
) -> None:
    """As the decorators run them: one runtime per queue, one memo prefix,
    one retention. Each sweeps the runs its queue ended."""
    q = await open_queue()
    runner = Runner(_memo_then_succeed)
    runtimes = [
        WorkflowRuntime(
            q, runner, options=RuntimeOptions(name, memo_prefix="shared", memo_retention=60.0)
        )
        for name in ("a", "b")
    ]
    for rt in runtimes:
        await rt.submit(RunSpec(b"x", run_id=f"on-{rt.options.queue_name}"))
        await finish(rt, f"on-{rt.options.queue_name}")
    clock.advance(60)
    assert [await rt.sweep_memos() for rt in runtimes] == [1, 1]
    assert [rt.status(f"on-{rt.options.queue_name}") for rt in runtimes] == [None, None]
    assert await q.writer.objects.list("shared/") == []


async def test_markers_a_store_wrote_before_markers_were_per_queue_are_still_swept(
    open_queue: Opener, clock: MockClock
) -> None:
    """A marker under the old key (no queue in it) is read by the next
    process and swept at its retention with the run's memo objects."""
    q = await open_queue()
    options = RuntimeOptions(memo_retention=60.0)
    rt = WorkflowRuntime(q, Runner(_memo_then_succeed), options=options)
    await rt.submit(RunSpec(b"x", run_id="old"))
    await finish(rt, "old")
    [(marker, _)] = q.kv.scan(engine_keys.terminals_prefix(QUEUE), limit=10).entries
    at_ms = termination(rt, "old").terminated_at_ms
    legacy = engine_keys.TERMINALS_PREFIX + at_ms.to_bytes(8, "big") + b"old"
    await q.commit_effects(SettlementEffects().kv_delete(marker).kv_put(legacy, b""))
    await q.close()
    q2 = await open_queue()
    rt2 = WorkflowRuntime(q2, Runner(_memo_then_succeed), options=options)
    clock.advance(59)
    assert await rt2.sweep_memos() == 0
    clock.advance(1)
    assert await rt2.sweep_memos() == 1
    assert rt2.status("old") is None
    assert await rt2.memos.objects.list(rt2.memos.prefix + "/") == []
    assert q2.kv.scan(engine_keys.TERMINALS_PREFIX, limit=10).entries == []


# ------------------------------------------------------------------ 13. time


async def _check_timestamps(q: Any, rt: WorkflowRuntime, rt_clock: MockClock) -> None:
    async def body(step: Step) -> StepOutcome:
        if step.payload == b"delay":
            return StepOutcome.continue_after(b"x", 10)
        return Succeed(b"ok")

    rt.runner = Runner(body)
    await rt.submit(RunSpec(b"ok", run_id="ok"))
    record = rt.view.run_record("ok")
    assert record is not None
    assert record.submitted_at_ms == rt_clock.now_ms()
    rt_clock.advance(1)
    end = await finish(rt, "ok")
    assert end.termination.terminated_at_ms == rt_clock.now_ms()
    [(marker, _)] = q.kv.scan(engine_keys.terminals_prefix(QUEUE), limit=10).entries
    assert marker == rt._terminals.entry_key(rt_clock.now_ms(), b"ok")
    sub = await rt.submit(RunSpec(b"delay", run_id="delay"))
    worker = rt.spawn()
    await settle_step(q, sub.job_id)
    await worker.shutdown()
    pointer = rt.view.pointer("delay")
    assert pointer is not None
    job = q.job_record(pointer.job_id)
    assert job is not None
    assert job.run_at == rt_clock.now_ms() + 10_000
    rt_clock.advance(59.999)
    assert await rt.sweep_memos() == 0
    rt_clock.advance(0.001)
    assert await rt.sweep_memos() == 1
    assert rt.status("ok") is None


async def test_the_runtime_reads_time_from_the_queues_clock(
    open_queue: Opener, clock: MockClock
) -> None:
    """By default the submission time, After's run_at, termination times,
    markers and sweep eligibility all follow the queue's clock."""
    q = await open_queue()
    rt = WorkflowRuntime(q, Runner(chain(0)), options=RuntimeOptions(memo_retention=60.0))
    assert rt.clock is q.clock is clock
    await _check_timestamps(q, rt, clock)


async def test_a_runtime_clock_overrides_the_queues(open_queue: Opener, clock: MockClock) -> None:
    """RuntimeOptions.clock moves every runtime timestamp to that clock; the
    queue's clock moving changes none of the runtime's decisions."""
    q = await open_queue()
    own = MockClock(2_000_000_000_000)
    options = RuntimeOptions(memo_retention=60.0, clock=own)
    rt = WorkflowRuntime(q, Runner(chain(0)), options=options)
    assert rt.clock is own
    clock.advance(3600)  # sweeps below are not due on the runtime's clock
    await _check_timestamps(q, rt, own)
