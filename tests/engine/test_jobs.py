"""Typed jobs at their public API: definition and encoding, the runner and its
shared state, errors and their classification, idempotent submission (before
and after completion, across a restart), handles, fan-out from a running
job, and job groups. Time is a `MockClock`; restarts close the queue and
open the same store again."""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar

import msgpack
import pytest
from engine_helpers import BG, QUEUE, Opener, Runner

from durable.engine import (
    RunSpec,
    RuntimeOptions,
    Step,
    StepError,
    StepErrorKind,
    StepOutcome,
    Succeed,
    Terminated,
    WorkflowRuntime,
)
from durable.engine.groups import GroupStatus, member_run_id
from durable.engine.jobs import (
    DEFAULT_JOBS_QUEUE,
    Job,
    JobContext,
    JobGroup,
    JobHandle,
    JobMemberResult,
    JobRunner,
    JobRunnerOptions,
    job_id_for_key,
)
from durable.engine.jobs.codec import decode_job, decode_output, encode_job, encode_output
from durable.errors import (
    DuplicateMemberKey,
    GroupNotFound,
    InputMismatch,
    InvalidArgument,
    JobFailed,
    JobNotFound,
    JobTypeError,
)
from durable.store.clock import MockClock
from durable.store.queue import Queue

# ---------------------------------------------------------------- job types


@dataclass
class Receipt:
    order: str
    cents: int


@dataclass
class Charge(Job[Receipt]):
    """Output declared by the type argument: a dataclass, rebuilt."""

    NAME: ClassVar[str] = "test.charge"
    order: str
    amount: int

    async def run(self, ctx: JobContext) -> Receipt:
        return Receipt(self.order, self.amount * 100)

    def idempotency_key(self) -> str | None:
        return f"charge:{self.order}"


@dataclass
class Lookup(Job[Any]):
    """Output declared by ``Output``."""

    NAME: ClassVar[str] = "test.lookup"
    Output: ClassVar[type[Any] | None] = Receipt
    order: str

    async def run(self, ctx: JobContext) -> Receipt:
        return Receipt(self.order, 1)


class Plan:
    """What `Task` does in one test (shared state): ``act`` and the runs seen."""

    def __init__(self, act: Callable[[Task, JobContext], Awaitable[Any]] | None = None) -> None:
        self.act = act
        self.ran: list[tuple[str, int]] = []

    async def run(self, task: Task, ctx: JobContext) -> Any:
        self.ran.append((task.label, ctx.attempt))
        if self.act is None:
            return {"label": task.label, "tags": task.tags, "pair": (1, 2)}
        return await self.act(task, ctx)


@dataclass
class Task(Job[Any]):
    """Does what the test's `Plan` says."""

    NAME: ClassVar[str] = "test.task"
    label: str
    tags: dict[str, int] = field(default_factory=dict)

    async def run(self, ctx: JobContext) -> Any:
        return await ctx.state(Plan).run(self, ctx)


@dataclass
class Picky(Task):
    """A `ValueError` is permanent for this type; everything else as usual."""

    NAME: ClassVar[str] = "test.picky"

    @classmethod
    def classify(cls, error: Exception) -> StepErrorKind:
        if isinstance(error, ValueError):
            return StepErrorKind.PERMANENT
        return super().classify(error)


class NotTransient(Exception):
    transient = False


def make_runner(q: Queue, *types: type[Job[Any]], **options: Any) -> JobRunner:
    """A runner on the fixture's configured queue, with ``types`` registered."""
    options.setdefault("queue_name", QUEUE)
    runner = JobRunner(q, JobRunnerOptions(**options))
    for job_type in types:
        runner.register(job_type)
    return runner


async def running(runner: JobRunner, until: Callable[[], Awaitable[Any]]) -> Any:
    """Run a worker of ``runner`` until ``until`` returns."""
    worker = runner.spawn()
    try:
        return await asyncio.wait_for(until(), 30)
    finally:
        await worker.shutdown()


# ------------------------------------------------------- definition, encoding


async def test_a_job_runs_as_a_single_step_run_and_returns_its_typed_output(
    open_queue: Opener,
) -> None:
    q = await open_queue()
    runner = make_runner(q, Charge, Lookup)
    handle = await runner.submit(Charge("o-1", 3), idempotency_key=None)
    assert handle.newly_submitted
    assert handle.id == job_id_for_key("charge:o-1")  # the job's own key
    receipt = await running(runner, lambda: handle)
    assert receipt == Receipt("o-1", 300)
    status = handle.status()
    assert status is not None
    assert isinstance(status.state, Terminated)
    assert status.current_step == 0  # a single-step run
    assert await runner.runtime.outcome(handle.id) is not None
    lookup = await runner.submit(Lookup("o-2"))
    assert len(lookup.id) == 26  # no idempotency key: a ULID
    assert await running(runner, lambda: lookup) == Receipt("o-2", 1)


def test_a_job_is_stored_as_its_name_and_named_fields() -> None:
    stored = msgpack.unpackb(encode_job(Task("x", {"b": 2, "a": 1})), raw=False)
    assert stored == {"job": "test.task", "input": {"label": "x", "tags": {"a": 1, "b": 2}}}
    # Map keys are sorted: equal inputs are equal bytes whatever their order.
    assert encode_job(Task("x", {"b": 2, "a": 1})) == encode_job(Task("x", {"a": 1, "b": 2}))
    assert decode_job(encode_job(Task("x", {"a": 1})), {"test.task": Task}) == Task("x", {"a": 1})
    with pytest.raises(JobTypeError, match=r"'test\.task'.*register"):
        decode_job(encode_job(Task("x")), {})
    with pytest.raises(JobTypeError, match="not MessagePack"):
        decode_job(b"\xc1", {"test.task": Task})
    with pytest.raises(JobTypeError, match="not a job"):
        decode_job(msgpack.packb([1, 2]), {"test.task": Task})
    with pytest.raises(JobTypeError, match="does not fit"):
        decode_job(msgpack.packb({"job": "test.task", "input": {"nope": 1}}), {"test.task": Task})
    with pytest.raises(JobTypeError, match="cannot be stored"):
        encode_job(Task("x", {"a": object()}))  # type: ignore[dict-item]


def test_outputs_are_plain_data_and_declared_dataclasses_are_rebuilt() -> None:
    data = encode_output("t", Receipt("o", 5))
    assert msgpack.unpackb(data) == {"order": "o", "cents": 5}
    assert decode_output(data, Charge) == Receipt("o", 5)  # Job[Receipt]
    assert decode_output(data, Lookup) == Receipt("o", 5)  # Output = Receipt
    assert decode_output(data, Task) == {"order": "o", "cents": 5}  # Job[Any]: plain
    assert decode_output(data, None) == {"order": "o", "cents": 5}
    assert decode_output(encode_output("t", (1, b"x", None)), Task) == [1, b"x", None]
    with pytest.raises(JobTypeError, match="'t': its output cannot be stored"):
        encode_output("t", {1, 2})
    with pytest.raises(JobTypeError, match="does not fit Receipt"):
        decode_output(encode_output("t", {"other": 1}), Charge)


async def test_registration_rules(open_queue: Opener) -> None:
    q = await open_queue()
    runner = make_runner(q, Task)
    assert runner.job_type("test.task") is Task
    assert runner.job_type("nope") is None

    @dataclass
    class Clash(Task):
        NAME: ClassVar[str] = "test.task"

    class NotADataclass(Job[None]):
        NAME: ClassVar[str] = "test.plain"

        async def run(self, ctx: JobContext) -> None:
            return None

    @dataclass
    class Nameless(Task):
        NAME: ClassVar[str] = ""

    @dataclass
    class Idle(Job[None]):
        NAME: ClassVar[str] = "test.idle"

    with pytest.raises(JobTypeError, match="taken by Task"):
        runner.register(Clash)
    with pytest.raises(JobTypeError, match="already registered"):
        runner.register(Task)
    with pytest.raises(JobTypeError, match="not a dataclass"):
        runner.register(NotADataclass)
    with pytest.raises(JobTypeError, match="no NAME"):
        runner.register(Nameless)
    with pytest.raises(JobTypeError, match="does not define"):
        runner.register(Idle)
    with pytest.raises(JobTypeError, match="not a Job"):
        runner.register(Receipt)  # type: ignore[arg-type]
    worker = runner.spawn()
    try:
        with pytest.raises(JobTypeError, match="after spawn"):
            runner.register(Charge)
    finally:
        await worker.shutdown()


async def test_runner_options_defaults_checks_and_the_runtime_they_build(
    open_queue: Opener,
) -> None:
    options = JobRunnerOptions()
    assert options.queue_name == DEFAULT_JOBS_QUEUE == "jobs"
    assert options.max_concurrent_jobs == 16
    assert options.result_retention is None
    assert options.group_retention is None
    for bad, name in (
        ({"max_concurrent_jobs": 0}, "max_concurrent_jobs"),
        ({"result_retention": 0.0001}, "result_retention"),
        ({"group_retention": -1}, "group_retention"),
        ({"poll_interval": 0}, "poll_interval"),
    ):
        with pytest.raises(InvalidArgument, match=name):
            JobRunnerOptions(**bad)
    q = await open_queue()
    runner = JobRunner(q, JobRunnerOptions(result_retention=60.0, group_retention=30.0))
    rt = runner.runtime.options
    assert (rt.queue_name, rt.memo_retention, rt.group_retention) == ("jobs", 60.0, 30.0)
    assert rt.max_concurrent_steps == 16
    assert runner.runtime.memos.prefix == "jobs-memo"
    runner.register(Charge)
    handle = await runner.submit(Charge("on-jobs", 1))
    assert await running(runner, lambda: handle) == Receipt("on-jobs", 100)
    assert q.stats("jobs").done == 1
    assert QUEUE not in q.list_queues()


# ------------------------------------------------------------ shared state


async def test_shared_state_is_one_value_per_type(open_queue: Opener) -> None:
    q = await open_queue()
    runner = make_runner(q, Task)
    plan = Plan()
    runner.provide(plan)
    with pytest.raises(InvalidArgument, match="already provided"):
        runner.provide(Plan())
    handle = await runner.submit(Task("uses-state"))
    result = await running(runner, lambda: handle)
    assert result == {"label": "uses-state", "tags": {}, "pair": [1, 2]}
    assert plan.ran == [("uses-state", 1)]

    bare = make_runner(await open_queue(), Task)  # nothing provided
    missing = await bare.submit(Task("no-state"))
    with pytest.raises(JobFailed, match="no state of type Plan") as exc:
        await running(bare, lambda: missing)
    assert exc.value.kind == "permanent"


# ------------------------------------------------------------------- errors


async def _fails(q: Queue, act: Any, job: Job[Any], **options: Any) -> tuple[JobFailed, Plan]:
    runner = make_runner(q, Task, Picky)
    plan = Plan(act)
    runner.provide(plan)
    handle = await runner.submit(job, **options)
    with pytest.raises(JobFailed) as exc:
        await running(runner, lambda: handle)
    assert exc.value.job_id == handle.id
    return exc.value, plan


async def test_exceptions_are_classified_transient_unless_they_say_otherwise(
    open_queue: Opener,
) -> None:
    q = await open_queue(max_attempts=3)

    async def flaky(task: Task, ctx: JobContext) -> str:
        if ctx.attempt < 3:
            raise ConnectionError("upstream down")
        return f"ok on {ctx.attempt} of {ctx.max_attempts}"

    runner = make_runner(q, Task)
    plan = Plan(flaky)
    runner.provide(plan)
    handle = await runner.submit(Task("flaky"))
    assert await running(runner, lambda: handle) == "ok on 3 of 3"
    assert plan.ran == [("flaky", 1), ("flaky", 2), ("flaky", 3)]

    async def always(task: Task, ctx: JobContext) -> str:
        raise ConnectionError("still down")

    error, plan = await _fails(q, always, Task("exhausted"))
    assert (error.kind, error.message) == ("transient", "ConnectionError: still down")
    assert len(plan.ran) == 3  # every attempt

    for raised, kind in (
        (NotTransient("no retry helps"), "permanent"),
        (StepError.permanent("schema"), "permanent"),
        (InvalidArgument("bad value"), "permanent"),  # a DurableError keeps its permanence
        (ValueError("bad value"), "transient"),  # Task does not override classify
    ):

        async def act(task: Task, ctx: JobContext, raised: Exception = raised) -> str:
            raise raised

        error, plan = await _fails(q, act, Task("e"), max_attempts=1)
        assert error.kind == kind, raised
    error, plan = await _fails(q, act, Picky("picky"))  # ValueError: permanent here
    assert error.kind == "permanent"
    assert plan.ran == [("picky", 1)]  # no retry

    async def unstorable(task: Task, ctx: JobContext) -> object:
        return object()

    error, _ = await _fails(q, unstorable, Task("odd"))
    assert error.kind == "permanent"
    assert "'test.task': its output cannot be stored" in error.message


async def test_a_job_of_an_unregistered_type_fails_permanently_naming_it(
    open_queue: Opener,
) -> None:
    q = await open_queue()
    producer = make_runner(q)  # submission needs no registration
    handle = await producer.submit(Charge("o", 1))
    worker_runner = make_runner(q, Task)
    with pytest.raises(JobFailed) as exc:
        await running(worker_runner, lambda: producer.handle(handle.id, Charge))
    assert exc.value.kind == "permanent"
    assert "'test.charge'" in exc.value.message
    assert "register" in exc.value.message
    assert q.stats(QUEUE).dead == 1


# -------------------------------------------------------------- idempotency


async def test_duplicates_collapse_while_active_and_after_completion(open_queue: Opener) -> None:
    q = await open_queue()
    runner = make_runner(q, Task)
    plan = Plan()
    runner.provide(plan)
    first = await runner.submit(Task("same"), idempotency_key="k-1")
    assert first.id == hashlib.sha256(b"k-1").hexdigest()
    again = await runner.submit(Task("same"), idempotency_key="k-1")
    assert (again.id, again.newly_submitted) == (first.id, False)
    with pytest.raises(InputMismatch):
        await runner.submit(Task("other"), idempotency_key="k-1")  # active
    assert (await running(runner, lambda: first))["label"] == "same"
    after = await runner.submit(Task("same"), idempotency_key="k-1")
    assert (after.id, after.newly_submitted) == (first.id, False)
    assert (await after)["label"] == "same"  # answered from the store, no worker
    with pytest.raises(InputMismatch):
        await runner.submit(Task("other"), idempotency_key="k-1")  # finished
    assert plan.ran == [("same", 1)]  # ran once
    with pytest.raises(InvalidArgument):
        await runner.submit(Task("x"), idempotency_key="")


async def test_idempotency_and_results_survive_a_restart(open_queue: Opener) -> None:
    q = await open_queue()
    runner = make_runner(q, Charge)
    handle = await runner.submit(Charge("o-9", 2))
    assert await handle.fetch_result() is None  # not run yet
    await running(runner, lambda: handle)
    pending = await runner.submit(Task("later"), idempotency_key="pending-k")
    await q.close()

    q2 = await open_queue()
    fresh = make_runner(q2, Charge, Task)
    plan = Plan()
    fresh.provide(plan)
    assert await fresh.handle(handle.id, Charge).fetch_result() == Receipt("o-9", 200)
    assert await fresh.handle(handle.id).fetch_result() == {"order": "o-9", "cents": 200}
    dup = await fresh.submit(Charge("o-9", 2))  # finished before the restart
    assert (dup.id, dup.newly_submitted) == (handle.id, False)
    assert await dup.fetch_result() == Receipt("o-9", 200)
    with pytest.raises(InputMismatch):
        await fresh.submit(Charge("o-9", 3))
    still = await fresh.submit(Task("later"), idempotency_key="pending-k")  # active
    assert (still.id, still.newly_submitted) == (pending.id, False)
    assert (await running(fresh, lambda: still))["label"] == "later"
    assert plan.ran == [("later", 1)]


async def test_a_job_runner_and_a_workflow_runtime_on_one_store_keep_their_own_retention(
    open_queue: Opener, clock: MockClock
) -> None:
    """A job runner (result retention 10 s) sweeps its finished jobs, never
    the runs a workflow runtime on the same store ended (memo retention 1 h),
    and the other way round."""
    q = await open_queue()
    runner = make_runner(q, Task, queue_name="jobs", result_retention=10.0)
    runner.provide(Plan())
    job = await runner.submit(Task("quick"))
    await running(runner, job.result)

    async def body(step: Step) -> StepOutcome:
        return Succeed(b"wf")

    runtime = WorkflowRuntime(q, Runner(body), options=RuntimeOptions(memo_retention=3600.0))
    await runtime.submit(RunSpec(b"x", run_id="workflow-run"))
    worker = runtime.spawn()
    try:
        end = await asyncio.wait_for(runtime.wait("workflow-run"), 30)
    finally:
        await worker.shutdown()
    assert end.outcome.result == b"wf"
    clock.advance(11)
    assert await runtime.sweep_memos() == 0  # the job is not the runtime's
    assert await runner.runtime.sweep_memos() == 1
    assert await job.fetch_result() is None
    status = runtime.status("workflow-run")
    assert status is not None
    assert isinstance(status.state, Terminated)
    clock.advance(3600)
    assert await runner.runtime.sweep_memos() == 0
    assert await runtime.sweep_memos() == 1
    assert runtime.status("workflow-run") is None


async def test_a_key_runs_again_once_result_retention_removed_the_job(
    open_queue: Opener, clock: MockClock
) -> None:
    q = await open_queue()
    runner = make_runner(q, Task, result_retention=60.0)
    plan = Plan()
    runner.provide(plan)
    first = await runner.submit(Task("kept"), idempotency_key="r")
    await running(runner, lambda: first)
    clock.advance(59)
    assert not (await runner.submit(Task("kept"), idempotency_key="r")).newly_submitted
    clock.advance(1)
    assert await runner.runtime.sweep_memos() == 1
    assert await first.fetch_result() is None  # gone
    with pytest.raises(JobNotFound):
        await first.result()
    second = await runner.submit(Task("kept"), idempotency_key="r")
    assert (second.id, second.newly_submitted) == (first.id, True)
    await running(runner, lambda: second)
    assert plan.ran == [("kept", 1), ("kept", 1)]


# ------------------------------------------------------------------ handles


async def test_fetch_result_status_and_timeouts(open_queue: Opener, clock: MockClock) -> None:
    q = await open_queue()
    release = asyncio.Event()
    started = asyncio.Event()

    async def slow(task: Task, ctx: JobContext) -> str:
        started.set()
        await release.wait()
        return "done"

    runner = make_runner(q, Task)
    runner.provide(Plan(slow))
    handle = await runner.submit(Task("slow"))
    assert "newly_submitted=True" in repr(handle)
    worker = runner.spawn()
    try:
        await started.wait()
        assert await handle.fetch_result() is None  # running
        status = handle.status()
        assert status is not None
        assert not isinstance(status.state, Terminated)
        await clock.wait_for_sleepers(BG + 1)  # the maintenance loop
        sleepers = clock.sleepers
        waiting = asyncio.create_task(handle.result(timeout=5.0))
        await clock.wait_for_sleepers(sleepers + 1)
        clock.advance(5.0)  # five seconds of the runtime's clock
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(waiting, 30)
        release.set()
        assert await asyncio.wait_for(handle, 30) == "done"
    finally:
        release.set()
        await worker.shutdown()
    assert await handle.fetch_result() == "done"
    assert await handle.cancel() is False  # over
    assert runner.handle("never-submitted").status() is None
    assert await runner.handle("never-submitted").fetch_result() is None
    with pytest.raises(JobNotFound):
        await runner.handle("never-submitted").result()


async def test_cancelled_jobs_raise_job_failed_cancelled(open_queue: Opener) -> None:
    q = await open_queue()
    started = asyncio.Event()

    async def watches_its_token(task: Task, ctx: JobContext) -> str:
        started.set()
        await ctx.cancel_token.wait()
        return "ignored"

    runner = make_runner(q, Task)
    runner.provide(Plan(watches_its_token))
    queued = await runner.submit(Task("queued"))
    assert await queued.cancel() is True  # pending: cancelled at once
    with pytest.raises(JobFailed) as exc:
        await queued.fetch_result()
    assert exc.value.kind == "cancelled"
    live = await runner.submit(Task("live"))
    worker = runner.spawn()
    try:
        await started.wait()
        assert await live.cancel() is True
        with pytest.raises(JobFailed) as exc:
            await asyncio.wait_for(live.result(), 30)
    finally:
        await worker.shutdown()
    assert exc.value.kind == "cancelled"
    assert exc.value.job_id == live.id


async def test_submit_options_reach_the_job(open_queue: Opener, clock: MockClock) -> None:
    q = await open_queue()

    async def report(task: Task, ctx: JobContext) -> Any:
        return {"max": ctx.max_attempts, "headers": dict(ctx.headers), "job": ctx.job_id}

    @dataclass
    class Limited(Task):
        NAME: ClassVar[str] = "test.limited"
        MAX_ATTEMPTS: ClassVar[int | None] = 7

    runner = make_runner(q, Task, Limited)
    runner.provide(Plan(report))
    plain = await runner.submit(Limited("a"), headers={"tenant": "t1"}, priority=3)
    override = await runner.submit(Limited("b"), max_attempts=2)
    later = await runner.submit(Task("c"), run_at=clock.now_ms() + 60_000)
    out = await running(runner, lambda: asyncio.gather(plain.result(), override.result()))
    assert out[0] == {"max": 7, "headers": {"tenant": "t1"}, "job": plain.id}
    assert out[1]["max"] == 2
    assert await later.fetch_result() is None  # held until its time
    clock.advance(60)
    assert q.promote_scheduled_now() == 1
    assert (await running(runner, lambda: later))["job"] == later.id


# ----------------------------------------------------------------- fan-out


@dataclass
class Parent(Job[list[str]]):
    """Fans out one `Task` per label; fails transiently once after submitting."""

    NAME: ClassVar[str] = "test.parent"
    labels: list[str]

    async def run(self, ctx: JobContext) -> list[str]:
        children = [
            await ctx.submit(Task(label), idempotency_key=f"{ctx.job_id}/{label}")
            for label in self.labels
        ]
        if ctx.attempt == 1:
            raise ConnectionError("lost the reply")  # the retry submits them again
        return [child.id for child in children]


async def test_a_job_fans_out_independent_children(open_queue: Opener) -> None:
    q = await open_queue(max_attempts=3)
    runner = make_runner(q, Parent, Task)
    plan = Plan()
    runner.provide(plan)
    parent = await runner.submit(Parent(["a", "b", "c"]))

    async def everything() -> list[Any]:
        ids = await parent
        return [await runner.handle(child) for child in ids]

    results = await running(runner, everything)
    assert [r["label"] for r in results] == ["a", "b", "c"]
    assert sorted(plan.ran) == [("a", 1), ("b", 1), ("c", 1)]  # once each, despite the retry
    child = job_id_for_key(f"{parent.id}/a")
    assert runner.runtime.view.run_record(child) is None  # its own run, finished


# --------------------------------------------------------------- job groups


async def test_a_job_group_joins_typed_results_in_submission_order(open_queue: Opener) -> None:
    q = await open_queue()
    runner = make_runner(q, Charge, Task)
    group = runner.group("charges", Charge)
    assert isinstance(group, JobGroup)
    orders = [Charge(f"o{i}", i) for i in range(5)]
    handles = await group.submit(orders)
    assert [h.id for h in handles] == [member_run_id("charges", f"charge:o{i}") for i in range(5)]
    assert all(isinstance(h, JobHandle) and h.newly_submitted for h in handles)
    joined = await running(runner, group.join)
    assert [r.key for r in joined] == [f"charge:o{i}" for i in range(5)]
    assert [r.result() for r in joined] == [Receipt(f"o{i}", i * 100) for i in range(5)]
    assert all(r.ok for r in joined)
    assert await handles[2] == Receipt("o2", 200)  # a member's handle is a job handle
    assert await group.status() == GroupStatus(5, 0, 5, 0, 0)
    untyped = runner.group("charges")  # the type comes from the manifest and the registry
    assert [r.output for r in await untyped.join()] == [r.output for r in joined]

    plain = runner.group("plain")
    await plain.submit([Task("x"), Task("y")])
    assert [r.key for r in await plain.run_group.members()] == ["item-0", "item-1"]
    with pytest.raises(JobTypeError, match="one group per job type"):
        await runner.group("mixed").submit([Task("x"), Charge("o", 1)])
    with pytest.raises(JobTypeError, match="one group per job type"):
        await runner.group("typed", Charge).submit([Task("x")])
    with pytest.raises(DuplicateMemberKey):
        await runner.group("dups").submit([Charge("o", 1), Charge("o", 2)])


async def test_a_job_group_streams_results_and_resumes_failures_after_a_restart(
    open_queue: Opener,
) -> None:
    q = await open_queue(max_attempts=1)

    async def fails_on_b(task: Task, ctx: JobContext) -> str:
        if task.label == "b":
            raise ConnectionError("b is down")
        return task.label.upper()

    runner = make_runner(q, Task)
    runner.provide(Plan(fails_on_b))
    group = runner.group("batch")
    await group.submit([Task("a"), Task("b"), Task("c")])

    async def stream() -> list[JobMemberResult[Any]]:
        return [r async for r in group.results()]

    streamed = await running(runner, stream)
    by_key = {r.key: r for r in streamed}
    assert by_key["item-0"].output == "A"
    failed = by_key["item-1"]
    assert not failed.ok
    assert failed.output is None
    assert failed.error is not None
    assert (failed.error.kind, failed.error.message) == ("transient", "ConnectionError: b is down")
    with pytest.raises(JobFailed):
        failed.result()
    await q.close()

    q2 = await open_queue(max_attempts=1)
    fresh = make_runner(q2, Task)
    release = asyncio.Event()

    async def held(task: Task, ctx: JobContext) -> Any:
        await release.wait()
        return {"label": task.label}

    plan = Plan(held)
    fresh.provide(plan)
    again = fresh.group("batch")  # the type comes from the manifest and the registry
    assert await again.status() == GroupStatus(3, 0, 2, 1, 0)
    resumed = await again.resume()
    assert [h.newly_submitted for h in resumed] == [False, True, False]

    class ReleasingB(JobGroup[Any]):
        """Lets "b" finish once the join has the first result: "b" comes last."""

        async def results(self) -> AsyncIterator[JobMemberResult[Any]]:
            async for result in super().results():
                yield result
                release.set()

    joined = await running(fresh, ReleasingB(fresh, "batch").join)
    assert plan.ran == [("b", 1)]  # only the failed member ran again
    assert [r.key for r in joined] == ["item-0", "item-1", "item-2"]  # submission order
    assert [joined[0].output, joined[1].result()["label"], joined[2].output] == ["A", "b", "C"]
    with pytest.raises(GroupNotFound):
        await fresh.group("nope").resume()


async def test_a_job_group_cancels_forgets_and_is_retained_like_a_run_group(
    open_queue: Opener, clock: MockClock
) -> None:
    q = await open_queue()
    runner = make_runner(q, Task, group_retention=60.0)
    runner.provide(Plan())
    group = runner.group("short-lived", Task)
    await group.submit([Task("a"), Task("b")])
    assert await group.cancel() == 2  # both pending
    joined = await group.join()  # no worker needed: both ended at the cancel
    assert {r.error.kind for r in joined if r.error is not None} == {"cancelled"}
    assert await group.status() == GroupStatus(2, 0, 0, 0, 2)
    clock.advance(60)
    assert await runner.runtime.sweep_groups() == 1  # a window after the join
    with pytest.raises(GroupNotFound):
        await group.status()

    kept = runner.group("kept", Task)
    await kept.submit([Task("c")], headers={"batch": "1"})
    await running(runner, kept.join)
    assert await kept.forget() == 1
    with pytest.raises(GroupNotFound):
        await kept.status()
    assert "kept" in repr(kept)
