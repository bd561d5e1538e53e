"""Run groups at their public API: manifest, submit and resume, results,
status, cancel, forget and retention; the member record on every
terminating path. Time is a `MockClock`; restarts close the queue and open
the same store again."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from engine_helpers import BG, HOUR, QUEUE, Factory, Opener, Runner

from durable.engine import (
    RunOptions,
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
from durable.engine.groups import (
    MAX_CONCURRENT_SUBMISSIONS,
    GroupMember,
    GroupStatus,
    MemberResult,
    RunGroup,
    member_run_id,
)
from durable.engine.outcomes import Fail
from durable.engine.records import GroupMembership, decode_group_manifest
from durable.engine.runs import SubmitOutcome
from durable.errors import (
    DuplicateMemberKey,
    GroupMismatch,
    GroupNotFound,
    InputMismatch,
    InvalidArgument,
    InvalidId,
    MemberNotSubmitted,
    StoreClosed,
)
from durable.store.clock import MockClock
from durable.store.objects.faults import FaultyObjectStore, SimulatedCrash
from durable.store.queue import OpenOptions, Queue, QueueConfig, SettlementEffects

SUCCEEDED, FAILED, CANCELLED = (
    TerminalStatus.SUCCEEDED,
    TerminalStatus.FAILED,
    TerminalStatus.CANCELLED,
)


def members(*keys: str) -> list[GroupMember]:
    """One member per key; its input is ``b"in:" + key``."""
    return [GroupMember(key, f"in:{key}".encode()) for key in keys]


class Script:
    """A step runner that does what each member's input says, and counts runs.

    ``fail:<x>`` fails (a verdict) until ``heal`` is called; ``wait:<x>`` waits
    until released (or cancelled); anything else succeeds with its input
    upper-cased.
    """

    def __init__(self) -> None:
        self.ran: list[bytes] = []
        self.healed = False
        self.release: dict[bytes, asyncio.Event] = {}
        self.started: dict[bytes, asyncio.Event] = {}

    def gate(self, payload: bytes) -> tuple[asyncio.Event, asyncio.Event]:
        """The (started, release) events of a ``wait:`` payload."""
        started = self.started.setdefault(payload, asyncio.Event())
        release = self.release.setdefault(payload, asyncio.Event())
        return started, release

    async def run_step(self, step: Step) -> StepOutcome:
        self.ran.append(step.payload)
        if step.payload.startswith(b"fail:") and not self.healed:
            return Fail(f"{step.payload.decode()} is broken")
        if step.payload.startswith(b"wait:"):
            started, release = self.gate(step.payload)
            started.set()
            await release.wait()
        return Succeed(step.payload.upper())


async def drain(group: RunGroup) -> list[MemberResult]:
    """Every result of ``group`` (bounded in wall time, in case of a bug)."""

    async def collect() -> list[MemberResult]:
        return [r async for r in group.results()]

    return await asyncio.wait_for(collect(), 30)


async def run_until(rt: WorkflowRuntime, done: Callable[[], Awaitable[Any]]) -> Any:
    """Run a worker until ``done`` returns."""
    worker = rt.spawn()
    try:
        return await asyncio.wait_for(done(), 30)
    finally:
        await worker.shutdown()


async def yield_to_the_loop(times: int = 20) -> None:
    for _ in range(times):
        await asyncio.sleep(0)


# ------------------------------------------------------------ submit, results


async def test_a_group_runs_its_members_and_streams_their_results(open_queue: Opener) -> None:
    """Member run ids are hex SHA-256 of "{group}/{key}"; the manifest (keys and
    inputs) is an object beside the memos; each result carries its outcome."""
    q = await open_queue()
    rt = WorkflowRuntime(q, Script())
    group = rt.group("docs")
    subs = await group.submit(members("a", "b", "c"))
    expected = {k: hashlib.sha256(f"docs/{k}".encode()).hexdigest() for k in "abc"}
    assert [s.run_id for s in subs] == [expected[k] for k in "abc"]
    assert all(s.newly_submitted for s in subs)
    assert member_run_id("docs", "a") == group.run_id("a") == expected["a"]
    data = await rt.memos.objects.get(f"{rt.memos.prefix}/groups/docs/manifest")
    manifest = decode_group_manifest(data)
    assert manifest.members == (("a", b"in:a"), ("b", b"in:b"), ("c", b"in:c"))
    assert [m.key for m in await group.members()] == ["a", "b", "c"]
    record = group.member_record("b")
    assert record is not None
    assert record.run_id == expected["b"]
    assert record.termination is None  # pending, written with the member's step 0
    assert await group.status() == GroupStatus(3, 3, 0, 0, 0)

    results = await run_until(rt, lambda: drain(group))
    assert sorted(r.key for r in results) == ["a", "b", "c"]
    for r in results:
        assert r.run_id == expected[r.key]
        assert r.termination.status is SUCCEEDED
        assert r.outcome is not None
        assert r.outcome.result == f"IN:{r.key.upper()}".encode()
    assert await group.status() == GroupStatus(3, 0, 3, 0, 0)


async def test_a_duplicate_key_is_rejected_before_anything_is_written(
    open_queue: Opener,
) -> None:
    q = await open_queue()
    rt = WorkflowRuntime(q, Script())
    before = dict(q.writer.state.scan())
    with pytest.raises(DuplicateMemberKey, match="'a'") as exc:
        await rt.group("dup").submit([*members("a", "b"), GroupMember("a", b"other")])
    assert exc.value.key == "a"
    assert dict(q.writer.state.scan()) == before
    with pytest.raises(GroupNotFound):
        await rt.group("dup").status()  # no manifest either
    with pytest.raises(InvalidArgument):
        await rt.group("dup").submit([("a", b"x")])  # type: ignore[list-item]
    for bad in ("", "has space", "x" * 129):
        with pytest.raises(InvalidId, match="group id"):
            rt.group(bad)
    with pytest.raises(InvalidArgument):
        GroupMember("", b"x")
    with pytest.raises(InvalidArgument):
        GroupMember("k", "not bytes")  # type: ignore[arg-type]


async def test_another_member_list_is_a_group_mismatch_and_writes_nothing(
    open_queue: Opener,
) -> None:
    q = await open_queue()
    rt = WorkflowRuntime(q, Script())
    group = rt.group("fixed")
    await group.submit(members("a", "b"))
    before = dict(q.writer.state.scan())
    cases = {
        "2 members stored, 3 given": members("a", "b", "c"),
        "member 1 is 'b' in the manifest, 'c' here": members("a", "c"),
        "member 'b' has another input": [*members("a"), GroupMember("b", b"changed")],
        "member 0 is 'a' in the manifest, 'b' here": members("b", "a"),
    }
    for detail, other in cases.items():
        with pytest.raises(GroupMismatch, match=detail):
            await group.submit(other)
    assert dict(q.writer.state.scan()) == before
    assert [m.key for m in await group.members()] == ["a", "b"]


async def test_submitting_again_reruns_only_the_members_that_did_not_succeed(
    open_queue: Opener,
) -> None:
    """Succeeded members are skipped, failed and cancelled ones run again, an
    active one is a duplicate (not an error); inputs come from the manifest."""
    q = await open_queue()
    script = Script()
    rt = WorkflowRuntime(q, script)
    group = rt.group("retry")
    given = [
        GroupMember("ok", b"ok"),
        GroupMember("bad", b"fail:bad"),
        GroupMember("gone", b"cancel-me"),
        GroupMember("slow", b"wait:slow"),
    ]
    await group.submit(given)
    assert await rt.cancel(group.run_id("gone"))  # cancelled while pending
    started, release = script.gate(b"wait:slow")
    worker = rt.spawn()
    try:
        await started.wait()
        first = {r.key: r async for r in _take(group, 3)}
        assert {k: r.termination.status for k, r in first.items()} == {
            "ok": SUCCEEDED,
            "bad": FAILED,
            "gone": CANCELLED,
        }
        assert first["gone"].outcome is None  # no worker recorded one
        assert first["bad"].termination.error == "fail:bad is broken"
        script.healed = True
        script.ran.clear()
        again = await group.submit(given)  # "slow" is still running
        assert [(s.run_id, s.newly_submitted) for s in again] == [
            (group.run_id("ok"), False),
            (group.run_id("bad"), True),
            (group.run_id("gone"), True),
            (group.run_id("slow"), False),
        ]
        assert again[0].job_id == ""  # succeeded: nothing was submitted
        assert again[3].job_id != ""  # the active member's current step
        release.set()
        results = await drain(group)
    finally:
        release.set()
        await worker.shutdown()
    assert sorted(script.ran) == [b"cancel-me", b"fail:bad"]  # "ok" never ran again
    assert {r.key: r.termination.status for r in results} == dict.fromkeys(
        ["ok", "bad", "gone", "slow"], SUCCEEDED
    )
    assert await group.status() == GroupStatus(4, 0, 4, 0, 0)


async def _take(group: RunGroup, n: int) -> Any:
    """The first ``n`` results of ``group`` (the stream is closed after)."""
    stream = group.results()
    try:
        for _ in range(n):
            yield await asyncio.wait_for(anext(stream), 30)
    finally:
        await stream.aclose()


async def test_resume_from_the_manifest_alone_after_a_restart(open_queue: Opener) -> None:
    """A new process with only the group id re-runs the failed members."""
    q = await open_queue()
    rt = WorkflowRuntime(q, Script())
    given = [GroupMember("a", b"a"), GroupMember("b", b"fail:b"), GroupMember("c", b"fail:c")]
    await rt.group("batch").submit(given)
    first = await run_until(rt, lambda: drain(rt.group("batch")))
    assert sorted(r.termination.status.value for r in first) == ["failed", "failed", "succeeded"]
    await q.close()

    q2 = await open_queue()
    script = Script()
    script.healed = True
    rt2 = WorkflowRuntime(q2, script)
    group = rt2.group("batch")
    assert await group.status() == GroupStatus(3, 0, 1, 2, 0)
    resumed = await group.resume(RunOptions(headers={"attempt": "2"}))
    assert [s.newly_submitted for s in resumed] == [False, True, True]
    results = await run_until(rt2, lambda: drain(group))
    assert sorted(script.ran) == [b"fail:b", b"fail:c"]
    assert {r.key: r.termination.status for r in results} == dict.fromkeys("abc", SUCCEEDED)
    outcome = {r.key: r.outcome for r in results}["b"]
    assert outcome is not None
    assert outcome.headers == {"attempt": "2"}  # the resume's options
    with pytest.raises(GroupNotFound, match="'never'"):
        await rt2.group("never").resume()


async def test_a_crash_between_the_manifest_and_the_members_is_repaired_by_resume(
    make_objects: Factory, clock: MockClock
) -> None:
    """The manifest is written before any member: a process that dies right
    after it leaves members without records (`MemberNotSubmitted`), and
    `resume` in the next process submits them."""
    options = OpenOptions(
        clock=clock,
        reaper_interval=HOUR,
        scheduler_interval=HOUR,
        queue_configs={QUEUE: QueueConfig(retry_backoff_base=0.0)},
    )
    faulty = FaultyObjectStore(make_objects())
    q = await Queue.open(faulty, options)
    rt = WorkflowRuntime(q, Script())
    faulty.crash_after_writes(1)  # the manifest lands, then the process dies
    with pytest.raises((SimulatedCrash, StoreClosed)):
        await rt.group("torn").submit(members("a", "b"))
    with contextlib.suppress(SimulatedCrash, StoreClosed):
        await q.close()  # the dead process's handle

    q2 = await Queue.open(make_objects(), options)
    try:
        rt2 = WorkflowRuntime(q2, Script())
        group = rt2.group("torn")
        assert [m.key for m in await group.members()] == ["a", "b"]
        assert group.member_record("a") is None
        with pytest.raises(MemberNotSubmitted, match="'a'"):
            await drain(group)
        assert await group.status() == GroupStatus(2, 2, 0, 0, 0)  # never submitted: pending
        assert [s.newly_submitted for s in await group.resume()] == [True, True]
        results = await run_until(rt2, lambda: drain(group))
        assert sorted(r.key for r in results) == ["a", "b"]
    finally:
        await q2.close()


async def test_a_member_whose_run_id_holds_another_input_fails_the_submit_as_itself(
    open_queue: Opener,
) -> None:
    """A failed member submission raises its own error (not an exception
    group), after the manifest was written."""
    q = await open_queue()
    rt = WorkflowRuntime(q, Script())
    await rt.submit(RunSpec(b"squatter", run_id=member_run_id("clash", "b")))
    with pytest.raises(InputMismatch):
        await rt.group("clash").submit(members("a", "b", "c"))
    assert [m.key for m in await rt.group("clash").members()] == ["a", "b", "c"]


async def test_submissions_run_at_most_32_at_once(open_queue: Opener) -> None:
    q = await open_queue()
    in_flight = 0
    peak = 0
    gate = asyncio.Event()
    full = asyncio.Event()

    class Counting(WorkflowRuntime):
        async def submit_member(
            self, spec: RunSpec, member: GroupMembership | None
        ) -> SubmitOutcome:
            nonlocal in_flight, peak
            in_flight += 1
            peak = max(peak, in_flight)
            if in_flight == MAX_CONCURRENT_SUBMISSIONS:
                full.set()
            try:
                await gate.wait()
                return await super().submit_member(spec, member)
            finally:
                in_flight -= 1

    rt = Counting(q, Script())
    task = asyncio.create_task(rt.group("wide").submit(members(*(f"m{i}" for i in range(80)))))
    await asyncio.wait_for(full.wait(), 30)  # after the manifest was written
    await yield_to_the_loop()
    assert in_flight == MAX_CONCURRENT_SUBMISSIONS == 32
    gate.set()
    subs = await asyncio.wait_for(task, 30)
    assert len(subs) == 80
    assert peak == 32
    assert len({s.run_id for s in subs}) == 80


async def test_results_stream_in_completion_order_without_polling(
    open_queue: Opener, clock: MockClock
) -> None:
    """Terminated members come at once; the rest as they terminate. The stream
    sleeps on the member records, not on the clock."""
    q = await open_queue()
    script = Script()
    rt = WorkflowRuntime(q, script)
    group = rt.group("order")
    await group.submit([GroupMember(k, b"wait:" + k.encode()) for k in ("x", "y", "z")])
    gates = {k: script.gate(b"wait:" + k.encode()) for k in ("x", "y", "z")}
    worker = rt.spawn()
    seen: list[str] = []
    got = asyncio.Event()

    async def consume() -> None:
        async for r in group.results():
            seen.append(r.key)
            got.set()

    consumer: asyncio.Task[None] | None = None
    try:
        for k in ("x", "y", "z"):
            await gates[k][0].wait()  # all three are running
        gates["y"][1].set()
        await asyncio.wait_for(rt.wait(group.run_id("y")), 30)
        await clock.wait_for_sleepers(BG)
        sleepers = clock.sleepers
        consumer = asyncio.create_task(consume())
        await asyncio.wait_for(got.wait(), 30)
        assert seen == ["y"]  # already terminated: at once
        await yield_to_the_loop()
        assert clock.sleepers == sleepers  # waiting adds no clock sleeper
        for k in ("z", "x"):
            got.clear()
            gates[k][1].set()
            await asyncio.wait_for(got.wait(), 30)
        await asyncio.wait_for(consumer, 30)
    finally:
        for _, release in gates.values():
            release.set()
        if consumer is not None:
            consumer.cancel()
        await worker.shutdown()
    assert seen == ["y", "z", "x"]


async def test_the_outcome_is_reported_only_while_it_matches_the_termination(
    open_queue: Opener, clock: MockClock
) -> None:
    """Large outcomes come from the run memo, small ones from the terminal
    record; once memo retention removed them, the member record still tells
    how the run ended."""
    q = await open_queue()

    async def body(step: Step) -> StepOutcome:
        return Succeed(step.payload * (5000 if step.payload == b"L" else 1))

    rt = WorkflowRuntime(q, Runner(body), options=RuntimeOptions(memo_retention=60.0))
    group = rt.group("sizes")
    await group.submit([GroupMember("small", b"s"), GroupMember("large", b"L")])
    results = {r.key: r for r in await run_until(rt, lambda: drain(group))}
    assert results["small"].outcome is not None
    assert results["small"].outcome.result == b"s"
    assert results["large"].outcome is not None
    assert results["large"].outcome.result == b"L" * 5000
    clock.advance(60)
    assert await rt.sweep_memos() == 2
    later = {r.key: r for r in await drain(group)}
    for key in ("small", "large"):
        assert later[key].termination == results[key].termination
        assert later[key].outcome is None


async def test_a_plain_run_under_a_members_id_does_not_change_the_members_result(
    open_queue: Opener, clock: MockClock
) -> None:
    """A plain submit of a terminated member's run id is another run: the
    group keeps the member's termination, and reports no outcome of the other
    run as the member's."""
    q = await open_queue()
    rt = WorkflowRuntime(q, Script())
    group = rt.group("shadowed")
    await group.submit(members("a"))
    [mine] = await run_until(rt, lambda: drain(group))
    assert mine.outcome is not None
    run_id = group.run_id("a")
    clock.advance(1)  # terminations are told apart by their time, among the rest
    again = await rt.submit(RunSpec(b"plain", run_id=run_id))  # not a member: no record
    assert again.newly_submitted
    assert (await group.submit(members("a")))[0].newly_submitted is False  # succeeded
    other = await run_until(rt, lambda: rt.wait(run_id))
    assert other.outcome.result == b"PLAIN"
    [later] = await drain(group)
    assert later.termination == mine.termination
    assert later.outcome is None  # the terminal record is the other run's


async def test_status_and_cancel_count_the_members(open_queue: Opener) -> None:
    q = await open_queue()
    script = Script()
    rt = WorkflowRuntime(q, script)
    group = rt.group("mixed")
    await group.submit(
        [
            GroupMember("ok", b"ok"),
            GroupMember("bad", b"fail:bad"),
            GroupMember("running", b"wait:running"),
            GroupMember("queued", b"queued"),
        ]
    )
    started, release = script.gate(b"wait:running")
    queued_id = group.run_id("queued")
    worker = rt.spawn()
    try:
        await started.wait()
        await asyncio.wait_for(rt.wait(group.run_id("ok")), 30)
        await asyncio.wait_for(rt.wait(group.run_id("bad")), 30)
        await asyncio.wait_for(rt.wait(queued_id), 30)
        assert await group.status() == GroupStatus(4, 1, 2, 1, 0)
        assert await group.cancel() == 1  # only the active member
        release.set()  # its outcome is discarded: the run was cancelled
        results = {r.key: r.termination for r in await drain(group)}
    finally:
        release.set()
        await worker.shutdown()
    assert results["running"].status is CANCELLED
    assert await group.status() == GroupStatus(4, 0, 2, 1, 1)
    assert await group.cancel() == 0
    with pytest.raises(GroupNotFound):
        await rt.group("nobody").cancel()


async def test_forget_removes_everything_the_group_left(open_queue: Opener) -> None:
    q = await open_queue()

    async def body(step: Step) -> StepOutcome:
        await step.memo.put("stage", step.payload)
        return Succeed(step.payload)

    rt = WorkflowRuntime(q, Runner(body))
    group = rt.group("temp")
    await group.submit(members("a", "b"))
    await run_until(rt, lambda: drain(group))
    other = rt.group("other")
    await other.submit(members("a"))
    await run_until(rt, lambda: drain(other))
    objects = rt.memos.objects
    assert len(await objects.list(rt.memos.prefix + "/memos/")) == 3

    assert await group.forget() == 2
    with pytest.raises(GroupNotFound):
        await group.status()
    assert q.kv.scan(engine_keys.group_prefix("temp"), limit=10).entries == []
    for key in ("a", "b"):
        assert rt.status(group.run_id(key)) is None  # terminal record gone
        assert await rt.memos.step_memo(group.run_id(key), 0).get("stage") is None
    assert len(await objects.list(rt.memos.prefix + "/memos/")) == 1  # the other group's
    assert (await other.status()).succeeded == 1
    assert await group.forget() == 0  # already gone: a no-op
    again = await group.submit(members("a", "b"))  # the id is free again
    assert all(s.newly_submitted for s in again)


# ---------------------------------------------------------------- retention


async def test_group_retention_forgets_a_consumed_group_a_window_later(
    open_queue: Opener, clock: MockClock
) -> None:
    q = await open_queue()
    rt = WorkflowRuntime(q, Script(), options=RuntimeOptions(group_retention=60.0))
    consumed, ignored = rt.group("consumed"), rt.group("ignored")
    await consumed.submit(members("a"))
    await ignored.submit(members("a"))
    await run_until(rt, lambda: rt.wait(ignored.run_id("a")))
    await drain(consumed)  # observes the last termination: the marker is written
    markers = q.kv.scan(engine_keys.group_terminals_prefix(QUEUE), limit=10).entries
    assert [k.endswith(b"consumed") for k, _ in markers] == [True]
    clock.advance(59)
    assert await rt.sweep_groups() == 0
    assert (await consumed.status()).succeeded == 1
    clock.advance(1)
    assert await rt.sweep_groups() == 1
    with pytest.raises(GroupNotFound):
        await consumed.status()
    assert rt.status(consumed.run_id("a")) is None
    clock.advance(10 * 365 * 86400)
    assert await rt.sweep_groups() == 0
    assert (await ignored.status()).succeeded == 1  # never consumed: kept


async def test_group_retention_spares_a_group_submitted_again_since_its_marker(
    open_queue: Opener, clock: MockClock
) -> None:
    q = await open_queue()
    script = Script()
    rt = WorkflowRuntime(q, script, options=RuntimeOptions(group_retention=60.0))
    group = rt.group("again")
    given = [GroupMember("a", b"fail:a")]
    await group.submit(given)
    await run_until(rt, lambda: drain(group))  # marker at t0
    await group.submit(given)  # failed: runs again, and is active at the sweep
    clock.advance(60)
    assert await rt.sweep_groups() == 1  # the marker goes, the group stays
    assert (await group.status()).pending == 1
    script.healed = True
    await run_until(rt, lambda: drain(group))  # a new marker
    assert (await group.status()).succeeded == 1
    await group.forget()
    clock.advance(1)
    await group.submit(given)  # a new group under the same id, after the marker
    await run_until(rt, lambda: rt.wait(group.run_id("a")))  # over, but not consumed
    clock.advance(60)
    assert await rt.sweep_groups() == 1
    assert await group.status() == GroupStatus(1, 0, 1, 0, 0)  # newer than the marker: kept


async def test_a_runtime_forgets_only_its_own_groups_with_its_own_retention(
    open_queue: Opener, clock: MockClock
) -> None:
    """Runtimes on queues "long" (group retention 1 h) and "short" (10 s):
    the short one's sweep forgets its own consumed group, never the long
    one's, whose runtime forgets it after its hour."""
    q = await open_queue()
    long = WorkflowRuntime(q, Script(), options=RuntimeOptions("long", group_retention=3600.0))
    short = WorkflowRuntime(q, Script(), options=RuntimeOptions("short", group_retention=10.0))
    for rt in (long, short):
        group = rt.group(f"of-{rt.options.queue_name}")
        await group.submit(members("a"))
        await run_until(rt, lambda group=group: drain(group))  # consumed: marked
    clock.advance(11)
    assert await short.sweep_groups() == 1
    with pytest.raises(GroupNotFound):
        await short.group("of-short").status()
    assert await long.sweep_groups() == 0
    assert (await long.group("of-long").status()).succeeded == 1
    clock.advance(3600)
    assert await short.sweep_groups() == 0
    assert await long.sweep_groups() == 1
    with pytest.raises(GroupNotFound):
        await long.group("of-long").status()


async def test_group_markers_a_store_wrote_before_they_were_per_queue_are_still_swept(
    open_queue: Opener, clock: MockClock
) -> None:
    q = await open_queue()
    options = RuntimeOptions(group_retention=60.0)
    rt = WorkflowRuntime(q, Script(), options=options)
    group = rt.group("old")
    await group.submit(members("a"))
    await run_until(rt, lambda: drain(group))
    [(marker, _)] = q.kv.scan(engine_keys.group_terminals_prefix(QUEUE), limit=10).entries
    at = marker[len(engine_keys.group_terminals_prefix(QUEUE)) :][:8]
    legacy = engine_keys.GROUP_TERMINALS_PREFIX + at + b"old"
    await q.commit_effects(SettlementEffects().kv_delete(marker).kv_put(legacy, b""))
    await q.close()
    q2 = await open_queue()
    rt2 = WorkflowRuntime(q2, Script(), options=options)
    clock.advance(59)
    assert await rt2.sweep_groups() == 0
    clock.advance(1)
    assert await rt2.sweep_groups() == 1
    with pytest.raises(GroupNotFound):
        await rt2.group("old").status()
    assert q2.kv.scan(engine_keys.GROUP_TERMINALS_PREFIX, limit=10).entries == []


async def test_group_retention_runs_in_the_maintenance_loop_after_a_restart(
    open_queue: Opener, clock: MockClock
) -> None:
    q = await open_queue()
    options = RuntimeOptions(group_retention=30.0, poll_interval=5.0)
    rt = WorkflowRuntime(q, Script(), options=options)
    await rt.group("swept").submit(members("a", "b"))
    await run_until(rt, lambda: drain(rt.group("swept")))
    await q.close()
    q2 = await open_queue()
    rt2 = WorkflowRuntime(q2, Script(), options=options)
    group = rt2.group("swept")
    manifest = engine_keys.manifest_object(rt2.memos.prefix, "swept")
    record = engine_keys.member_key("swept", "a")
    assert q2.kv.get(record) is not None
    [(marker, _)] = q2.kv.scan(engine_keys.group_terminals_prefix(QUEUE), limit=10).entries
    worker = rt2.spawn()
    try:
        await clock.wait_for_sleepers(BG + 2)  # the idle worker and maintenance
        gone = q2.kv.watch(marker)  # deleted once the group is forgotten
        clock.advance(30)
        await asyncio.wait_for(gone, 30)
    finally:
        await worker.shutdown()
    assert q2.kv.get(record) is None
    assert await rt2.memos.objects.list(manifest) == []
    with pytest.raises(GroupNotFound):
        await group.status()


async def test_group_retention_is_checked_like_memo_retention() -> None:
    assert RuntimeOptions().group_retention is None
    assert RuntimeOptions(group_retention=0.001).group_retention == 0.001
    for bad in (0.0005, -1, "60"):
        with pytest.raises(InvalidArgument, match="group_retention"):
            RuntimeOptions(group_retention=bad)  # type: ignore[arg-type]


# -------------------------------------------- the member record on every path


async def _path_succeed(q: Queue, clock: MockClock) -> tuple[WorkflowRuntime, RunGroup]:
    rt = WorkflowRuntime(q, Script())
    group = rt.group("paths")
    await group.submit(members("m"))
    await run_until(rt, lambda: rt.wait(group.run_id("m")))
    return rt, group


async def _body_group(q: Queue, body: Callable[[Step], Awaitable[StepOutcome]]) -> Any:
    rt = WorkflowRuntime(q, Runner(body))
    group = rt.group("paths")
    await group.submit(members("m"))
    await run_until(rt, lambda: rt.wait(group.run_id("m")))
    return rt, group


async def _path_fail(q: Queue, clock: MockClock) -> Any:
    async def body(step: Step) -> StepOutcome:
        return Fail("verdict")

    return await _body_group(q, body)


async def _path_permanent(q: Queue, clock: MockClock) -> Any:
    async def body(step: Step) -> StepOutcome:
        raise StepError.permanent("schema violation")

    return await _body_group(q, body)


async def _path_exhausted(q: Queue, clock: MockClock) -> Any:
    async def body(step: Step) -> StepOutcome:
        raise StepError.transient("still down")

    return await _body_group(q, body)


async def _path_cancel_pending(q: Queue, clock: MockClock) -> Any:
    rt = WorkflowRuntime(q, Script())
    group = rt.group("paths")
    await group.submit(members("m"))
    assert await rt.cancel(group.run_id("m"))
    return rt, group


async def _path_cancel_running(q: Queue, clock: MockClock) -> Any:
    started = asyncio.Event()

    async def body(step: Step) -> StepOutcome:
        started.set()
        await step.cancel_token.wait()
        return Succeed(b"ignored")

    rt = WorkflowRuntime(q, Runner(body))
    group = rt.group("paths")
    await group.submit(members("m"))
    worker = rt.spawn()
    try:
        await started.wait()
        assert await rt.cancel(group.run_id("m"))
        await asyncio.wait_for(rt.wait(group.run_id("m")), 30)
    finally:
        await worker.shutdown()
    return rt, group


async def _path_reaper(q: Queue, clock: MockClock) -> Any:
    started = asyncio.Event()
    release = asyncio.Event()

    async def body(step: Step) -> StepOutcome:
        started.set()
        await release.wait()
        return Succeed(b"too late")

    rt = WorkflowRuntime(q, Runner(body))
    group = rt.group("paths")
    await group.submit(members("m"))
    worker = rt.spawn()
    try:
        await started.wait()
        clock.advance(31)
        assert q.reap_now() == 1  # out of attempts: dead-lettered by the reaper
        assert await rt.reconcile_dead() == 1
    finally:
        release.set()
        await worker.shutdown()
    return rt, group


PATHS: dict[str, tuple[Callable[[Queue, MockClock], Awaitable[Any]], TerminalStatus, Any]] = {
    "succeed": (_path_succeed, SUCCEEDED, None),
    "fail": (_path_fail, FAILED, None),
    "permanent error": (_path_permanent, FAILED, StepErrorKind.PERMANENT),
    "exhausted retries": (_path_exhausted, FAILED, StepErrorKind.TRANSIENT),
    "cancel pending": (_path_cancel_pending, CANCELLED, None),
    "cancel running": (_path_cancel_running, CANCELLED, None),
    "reaper reconciliation": (_path_reaper, FAILED, None),
}


@pytest.mark.parametrize("path", list(PATHS))
async def test_the_member_record_is_rewritten_on_every_terminating_path(
    path: str, open_queue: Opener, clock: MockClock
) -> None:
    q = await open_queue(
        max_attempts=1 if path == "reaper reconciliation" else 2, lease_duration=30.0
    )
    make, status, kind = PATHS[path]
    rt, group = await make(q, clock)
    record = group.member_record("m")
    assert record is not None
    assert record.run_id == group.run_id("m")
    assert record.termination is not None
    end = await rt.wait(group.run_id("m"))
    assert end is not None
    assert record.termination == end.termination  # the same settlement wrote both
    assert record.termination.status is status
    assert record.termination.error_kind is kind
    [result] = await drain(group)
    assert result.termination == end.termination
