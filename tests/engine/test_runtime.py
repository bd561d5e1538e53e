"""The workflow runtime at its public API: submit, steps, outcomes, cancel, hooks."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from engine_helpers import BG, QUEUE, Factory, RecordingHook, Runner, chain, finish

from durable.engine import (
    Cancel,
    Cancelling,
    Fail,
    Pending,
    RunOptions,
    RunSpec,
    RuntimeOptions,
    Step,
    StepError,
    StepErrorKind,
    StepOutcome,
    Succeed,
    TerminalStatus,
    Terminated,
    WorkflowRuntime,
    WorkflowView,
)
from durable.engine.memo import MemoStore
from durable.errors import InputMismatch, ReservedKey
from durable.store.clock import MockClock
from durable.store.queue import (
    JobStatus,
    Queue,
    QueueReader,
    SettlementEffects,
)


async def test_single_step_run_succeeds_with_its_result(open_queue: Any) -> None:
    q = await open_queue()
    rt = WorkflowRuntime(q, Runner(chain(0)))
    sub = await rt.submit(RunSpec(b"hello", run_id="r1"))
    assert sub.newly_submitted
    assert sub.run_id == "r1"
    status = rt.status("r1")
    assert status is not None
    assert isinstance(status.state, Pending)
    end = await finish(rt, "r1")
    assert end.termination.status is TerminalStatus.SUCCEEDED
    assert end.outcome.result == b"hello!"
    assert end.outcome.final_step == 0
    assert (await rt.outcome("r1")) == end.outcome


async def test_multi_step_run_chains_payloads_and_terminates_once(open_queue: Any) -> None:
    q = await open_queue()
    runner = Runner(chain(3))
    rt = WorkflowRuntime(q, runner)
    await rt.submit(RunSpec(b"in", run_id="multi"))
    end = await finish(rt, "multi")
    assert end.outcome.result == b"in>0>1>2!"
    assert end.termination.final_step == 3
    assert [s for _, s, _ in runner.ran] == [0, 1, 2, 3]
    assert q.stats(QUEUE).pending == 0
    assert q.stats(QUEUE).claimed == 0
    status = rt.status("multi")
    assert status is not None
    assert isinstance(status.state, Terminated)
    assert status.current_step == 3


async def test_generated_run_ids_are_ulids(open_queue: Any) -> None:
    q = await open_queue()
    rt = WorkflowRuntime(q, Runner(chain(0)))
    a = await rt.submit(RunSpec(b"x"))
    b = await rt.submit(RunSpec(b"x"))
    assert len(a.run_id) == 26
    assert a.run_id < b.run_id


async def test_continue_after_waits_on_the_clock(open_queue: Any, clock: MockClock) -> None:
    q = await open_queue()

    async def body(step: Step) -> StepOutcome:
        if step.step_number == 0:
            return StepOutcome.continue_after(b"later", 60.0)
        return Succeed(step.payload)

    rt = WorkflowRuntime(q, Runner(body))
    sub = await rt.submit(RunSpec(b"now", run_id="delayed"))
    worker = rt.spawn()
    try:
        await q.wait_for_completion(sub.job_id, None)  # step 0 acked
        assert q.stats(QUEUE).scheduled == 1  # step 1 is scheduled a minute out
        assert q.promote_scheduled_now() == 0
        clock.advance(60)
        assert q.promote_scheduled_now() == 1
        end = await asyncio.wait_for(rt.wait("delayed"), timeout=30)
    finally:
        await worker.shutdown()
    assert end.outcome.result == b"later"


async def test_wait_timeout_runs_on_the_runtime_clock(open_queue: Any, clock: MockClock) -> None:
    q = await open_queue()

    async def body(step: Step) -> StepOutcome:
        if step.step_number == 0:
            return StepOutcome.continue_after(b"later", 60.0)
        return Succeed(step.payload)

    rt = WorkflowRuntime(q, Runner(body))
    assert await rt.wait("never-submitted") is None
    assert await rt.wait_timeout("never-submitted", 1.0) is None
    sub = await rt.submit(RunSpec(b"now", run_id="slow"))
    worker = rt.spawn()
    await q.wait_for_completion(sub.job_id, None)  # step 1 is scheduled a minute out
    await worker.shutdown()  # no worker polling the clock while we time out
    before = clock.sleepers
    waiting = asyncio.create_task(rt.wait_timeout("slow", 10.0))
    await clock.wait_for_sleepers(before + 1)
    clock.advance(9.0)
    await asyncio.sleep(0)
    assert not waiting.done()
    clock.advance(1.0)  # ten seconds of the runtime's clock, not of the wall
    with pytest.raises(TimeoutError, match="'slow'"):
        await asyncio.wait_for(waiting, 5)
    worker = rt.spawn()
    try:
        whole = asyncio.create_task(rt.wait("slow"))
        for _ in range(5):
            await asyncio.sleep(0)
        assert not whole.done()
        clock.advance(50.0)
        assert q.promote_scheduled_now() == 1
        end = await asyncio.wait_for(whole, 30)
        again = await rt.wait_timeout("slow", 0.0)  # already over: no wait at all
    finally:
        await worker.shutdown()
    assert end.outcome.result == b"later"
    assert again is not None
    assert again.outcome == end.outcome


async def test_fail_verdict_terminates_without_a_dead_job(open_queue: Any) -> None:
    q = await open_queue()

    async def body(step: Step) -> StepOutcome:
        return Fail("card declined")

    rt = WorkflowRuntime(q, Runner(body))
    await rt.submit(RunSpec(b"x", run_id="declined"))
    end = await finish(rt, "declined")
    assert end.termination.status is TerminalStatus.FAILED
    assert end.termination.error == "card declined"
    assert end.termination.error_kind is None
    assert q.stats(QUEUE).dead == 0


async def test_permanent_error_dead_letters_and_fails_the_run(open_queue: Any) -> None:
    q = await open_queue()

    async def body(step: Step) -> StepOutcome:
        raise StepError.permanent("schema violation")

    runner = Runner(body)
    rt = WorkflowRuntime(q, runner)
    await rt.submit(RunSpec(b"x", run_id="perm"))
    end = await finish(rt, "perm")
    assert end.termination.status is TerminalStatus.FAILED
    assert end.termination.error == "schema violation"
    assert end.termination.error_kind is StepErrorKind.PERMANENT
    assert len(runner.ran) == 1
    assert q.stats(QUEUE).dead == 1


async def test_transient_errors_retry_then_succeed(open_queue: Any) -> None:
    q = await open_queue(max_attempts=5)

    async def body(step: Step) -> StepOutcome:
        if step.attempts < 3:
            raise ConnectionError("flaky upstream")
        return Succeed(b"ok after %d" % step.attempts)

    runner = Runner(body)
    rt = WorkflowRuntime(q, runner)
    await rt.submit(RunSpec(b"x", run_id="flaky"))
    end = await finish(rt, "flaky")
    assert end.outcome.result == b"ok after 3"
    assert [a for _, _, a in runner.ran] == [1, 2, 3]


async def test_transient_errors_exhaust_attempts_and_fail_the_run(open_queue: Any) -> None:
    q = await open_queue(max_attempts=2)

    async def body(step: Step) -> StepOutcome:
        raise StepError.transient("still down")

    runner = Runner(body)
    rt = WorkflowRuntime(q, runner)
    await rt.submit(RunSpec(b"x", run_id="exhausted"))
    end = await finish(rt, "exhausted")
    assert end.termination.status is TerminalStatus.FAILED
    assert end.termination.error_kind is StepErrorKind.TRANSIENT
    assert end.outcome is not None  # written before the exhausting nack
    assert len(runner.ran) == 2
    assert q.stats(QUEUE).dead == 1


async def test_submit_is_idempotent_on_run_id_and_input(open_queue: Any) -> None:
    q = await open_queue()
    rt = WorkflowRuntime(q, Runner(chain(1)))
    first = await rt.submit(RunSpec(b"same", run_id="idem"))
    again = await rt.submit(RunSpec(b"same", run_id="idem"))
    assert not again.newly_submitted
    assert again.job_id == first.job_id
    before = dict(q.writer.state.scan())
    with pytest.raises(InputMismatch) as exc:
        await rt.submit(RunSpec(b"different", run_id="idem"))
    assert "idem" in str(exc.value)
    assert dict(q.writer.state.scan()) == before  # nothing written
    claim = await q.claim(QUEUE)  # step 0 claimed: its dedup key is released
    assert claim is not None
    still = await rt.submit(RunSpec(b"same", run_id="idem"))
    assert not still.newly_submitted
    assert q.stats(QUEUE).pending == 0


async def test_a_once_submit_of_an_ended_run_is_that_run(open_queue: Any) -> None:
    """A terminated run's id starts a new run, unless submitted ``once``: then
    the same input is the ended run (nothing starts), another a clash."""
    q = await open_queue()
    runner = Runner(chain(0))
    rt = WorkflowRuntime(q, runner)
    await rt.submit(RunSpec(b"same", run_id="ended"))
    await finish(rt, "ended")
    assert len(runner.ran) == 1
    again = await rt.submit(RunSpec(b"same", run_id="ended"), once=True)
    assert not again.newly_submitted
    assert rt.status("ended") is not None
    before = dict(q.writer.state.scan())
    with pytest.raises(InputMismatch):
        await rt.submit(RunSpec(b"other", run_id="ended"), once=True)
    assert dict(q.writer.state.scan()) == before  # nothing written
    assert q.stats(QUEUE).pending == 0
    rerun = await rt.submit(RunSpec(b"other", run_id="ended"))  # not once: a new run
    assert rerun.newly_submitted


async def test_submit_idempotency_survives_a_restart(open_queue: Any) -> None:
    q = await open_queue()
    rt = WorkflowRuntime(q, Runner(chain(0)))
    await rt.submit(RunSpec(b"same", run_id="durable-idem"))
    await q.close()
    q2 = await open_queue()
    rt2 = WorkflowRuntime(q2, Runner(chain(0)))
    assert not (await rt2.submit(RunSpec(b"same", run_id="durable-idem"))).newly_submitted
    with pytest.raises(InputMismatch):
        await rt2.submit(RunSpec(b"other", run_id="durable-idem"))


async def test_a_terminated_run_id_can_be_submitted_again(open_queue: Any) -> None:
    q = await open_queue()
    rt = WorkflowRuntime(q, Runner(chain(0)))
    await rt.submit(RunSpec(b"one", run_id="again"))
    await finish(rt, "again")
    second = await rt.submit(RunSpec(b"two", run_id="again"))
    assert second.newly_submitted
    end = await finish(rt, "again")
    assert end.outcome.result == b"two!"


async def test_submit_effects_commit_with_step_zero(open_queue: Any) -> None:
    q = await open_queue()
    rt = WorkflowRuntime(q, Runner(chain(0)))
    fx = SettlementEffects().kv_put(b"app/orders/1", b"submitted")
    await rt.submit(RunSpec(b"x", run_id="fx", effects=fx))
    assert q.kv.get(b"app/orders/1") == b"submitted"
    dup = SettlementEffects().kv_put(b"app/orders/1", b"overwritten")
    await rt.submit(RunSpec(b"x", run_id="fx", effects=dup))
    assert q.kv.get(b"app/orders/1") == b"submitted"  # a duplicate drops its effects
    with pytest.raises(ReservedKey):
        RunSpec(b"x", effects=SettlementEffects().kv_put(b"workflow/runs/x", b"evil"))


async def test_step_effects_commit_with_the_outcome_and_not_on_errors(open_queue: Any) -> None:
    q = await open_queue(max_attempts=3)
    seen: list[bytes | None] = []

    async def body(step: Step) -> StepOutcome:
        seen.append(step.kv.get(b"app/progress"))
        step.effects.put(b"app/progress", b"%d" % step.step_number)
        if step.step_number == 1 and step.attempts == 1:
            raise StepError.transient("retry me")  # its staged effect is dropped
        if step.step_number < 2:
            return StepOutcome.continue_now(step.payload)
        with pytest.raises(ReservedKey):
            step.effects.put(b"workflow/x", b"no")
        return Succeed(b"done")

    rt = WorkflowRuntime(q, Runner(body))
    await rt.submit(RunSpec(b"x", run_id="fx-steps"))
    await finish(rt, "fx-steps")
    # committed state only: step 0's write, seen by both attempts of step 1.
    assert seen == [None, b"0", b"0", b"1"]
    assert q.kv.get(b"app/progress") == b"2"


async def test_cancel_of_a_pending_run_terminates_it_at_once(open_queue: Any) -> None:
    q = await open_queue()
    hook = RecordingHook()
    rt = WorkflowRuntime(q, Runner(chain(0)), hook)
    await rt.submit(RunSpec(b"x", run_id="c1"))
    assert await rt.cancel("c1") is True
    status = rt.status("c1")
    assert status is not None
    assert isinstance(status.state, Terminated)
    assert status.state.termination.status is TerminalStatus.CANCELLED
    assert await rt.outcome("c1") is None  # no worker recorded an outcome
    assert await rt.cancel("c1") is False  # already terminal
    assert await rt.cancel("nobody") is False
    end = await finish(rt, "c1")  # the notification is still delivered
    assert end.termination.status is TerminalStatus.CANCELLED
    worker = rt.spawn()
    try:
        await hook.called.wait()
    finally:
        await worker.shutdown()
    assert [o.status for o in hook.seen] == [TerminalStatus.CANCELLED]


async def test_cancel_of_a_running_step_discards_its_outcome(open_queue: Any) -> None:
    q = await open_queue()
    started = asyncio.Event()

    async def body(step: Step) -> StepOutcome:
        step.effects.put(b"app/should-not", b"land")
        started.set()
        await step.cancel_token.wait()
        return StepOutcome.continue_now(b"ignored")

    rt = WorkflowRuntime(q, Runner(body))
    await rt.submit(RunSpec(b"x", run_id="c2"))
    worker = rt.spawn()
    try:
        await started.wait()
        assert await rt.cancel("c2") is True
        status = rt.status("c2")
        assert status is not None
        if not isinstance(status.state, Terminated):
            assert isinstance(status.state, Cancelling)
        end = await asyncio.wait_for(rt.wait("c2"), timeout=30)
    finally:
        await worker.shutdown()
    assert end.termination.status is TerminalStatus.CANCELLED
    assert end.termination.error is None
    assert q.kv.get(b"app/should-not") is None


async def test_runner_cancel_verdict_keeps_its_effects(open_queue: Any) -> None:
    q = await open_queue()

    async def body(step: Step) -> StepOutcome:
        step.effects.put(b"app/why", b"user gave up")
        return Cancel("user gave up")

    rt = WorkflowRuntime(q, Runner(body))
    await rt.submit(RunSpec(b"x", run_id="c3"))
    end = await finish(rt, "c3")
    assert end.termination.status is TerminalStatus.CANCELLED
    assert end.termination.error == "user gave up"
    assert q.kv.get(b"app/why") == b"user gave up"


async def test_terminal_hook_sees_each_outcome_and_commits_its_effects(
    open_queue: Any,
) -> None:
    q = await open_queue(max_attempts=3)
    hook = RecordingHook(fail_first=1)
    rt = WorkflowRuntime(q, Runner(chain(1)), hook)
    await rt.submit(RunSpec(b"x", run_id="h1", options=RunOptions(headers={"tenant": "t1"})))
    worker = rt.spawn()
    try:
        await asyncio.wait_for(rt.wait("h1"), timeout=30)
        await hook.called.wait()  # the first hook call failed transiently: retried
    finally:
        await worker.shutdown()
    [seen] = hook.seen
    assert seen.status is TerminalStatus.SUCCEEDED
    assert seen.headers == {"tenant": "t1"}
    assert seen.result == b"x>0!"
    assert q.kv.get(b"hooked/h1") == b"succeeded"


async def test_a_restarted_process_resumes_without_repeating_finished_steps(
    open_queue: Any,
) -> None:
    q = await open_queue()
    gate = asyncio.Event()
    in_step_2 = asyncio.Event()

    async def body(step: Step) -> StepOutcome:
        if step.step_number == 2 and not gate.is_set():
            in_step_2.set()
            await asyncio.Event().wait()  # "crashes" here: never returns
        return await chain(3)(step)

    runner = Runner(body)
    rt = WorkflowRuntime(q, runner)
    await rt.submit(RunSpec(b"in", run_id="resume"))
    worker = rt.spawn()
    await in_step_2.wait()
    assert [s for _, s, _ in runner.ran] == [0, 1, 2]
    await worker.abort()  # the process dies with step 2 in flight
    gate.set()
    q2 = await open_queue()  # a new writer fences the old one and requeues step 2
    runner2 = Runner(body)
    rt2 = WorkflowRuntime(q2, runner2)
    status = rt2.status("resume")
    assert status is not None
    assert status.current_step == 2
    end = await finish(rt2, "resume")
    assert end.outcome.result == b"in>0>1>2!"
    assert [s for _, s, _ in runner2.ran] == [2, 3]  # 0 and 1 never ran again


async def test_status_from_a_reader_in_another_process(
    open_queue: Any, make_objects: Factory
) -> None:
    q = await open_queue()
    rt = WorkflowRuntime(q, Runner(chain(1)), options=RuntimeOptions(memo_prefix="memo"))
    await rt.submit(RunSpec(b"x", run_id="seen"))
    await q.writer.flush()
    reader = await QueueReader.open(make_objects())
    view = WorkflowView(reader, MemoStore(make_objects(), "memo"))
    status = view.status("seen")
    assert status is not None
    assert isinstance(status.state, Pending)
    await finish(rt, "seen")
    await q.writer.flush()
    await reader.refresh()
    status = view.status("seen")
    assert status is not None
    assert isinstance(status.state, Terminated)
    outcome = await view.outcome("seen")
    assert outcome is not None
    assert outcome.result == b"x>0!"
    assert view.status("never") is None


async def test_a_bad_step_job_is_dead_lettered(open_queue: Any) -> None:
    q = await open_queue()
    rt = WorkflowRuntime(q, Runner(chain(0)))
    job = await q.enqueue(QUEUE, b"not a step")
    worker = rt.spawn()
    try:
        await q.wait_for_completion(job, None)
    finally:
        await worker.shutdown()
    rec = q.job_record(job)
    assert rec is not None
    assert rec.status is JobStatus.DEAD
    assert "not a step of a run" in (rec.last_error or "")


async def test_multi_step_run_on_every_backend(location: Any) -> None:
    q = await Queue.open(location.url, storage_options=location.options)
    try:
        runner = Runner(chain(4))
        rt = WorkflowRuntime(q, runner)
        await rt.submit(RunSpec(b"cloud", run_id="everywhere"))
        end = await finish(rt, "everywhere")
    finally:
        await q.close()
    assert end.outcome.result == b"cloud>0>1>2>3!"
    assert [s for _, s, _ in runner.ran] == [0, 1, 2, 3, 4]
    q = await Queue.open(location.url, storage_options=location.options)  # reopened
    try:
        status = WorkflowRuntime(q, runner).status("everywhere")
        assert status is not None
        assert isinstance(status.state, Terminated)
    finally:
        await q.close()


async def test_memo_retention_removes_a_terminated_runs_memos_after_the_window(
    open_queue: Any, clock: MockClock
) -> None:
    q = await open_queue()

    async def body(step: Step) -> StepOutcome:
        await step.memo.put("k", "step value")
        await step.run_memo.put("journal", [1, 2])
        return Succeed(b"done")

    rt = WorkflowRuntime(q, Runner(body), options=RuntimeOptions(memo_retention=60.0))
    await rt.submit(RunSpec(b"x", run_id="kept"))
    await finish(rt, "kept")
    assert await rt.memos.step_memo("kept", 0).get("k") == "step value"
    assert await rt.sweep_memos() == 0  # not due yet
    clock.advance(59)
    assert await rt.sweep_memos() == 0
    assert await rt.outcome("kept") is not None
    clock.advance(1)  # due when terminated_at + retention <= now
    assert await rt.sweep_memos() == 1
    assert await rt.memos.step_memo("kept", 0).get("k") is None
    assert await rt.memos.run_memo("kept").get("journal") is None
    assert rt.status("kept") is None  # the terminal record went too
    assert await rt.outcome("kept") is None
    assert await rt.sweep_memos() == 0


async def test_without_memo_retention_nothing_is_swept(open_queue: Any, clock: MockClock) -> None:
    q = await open_queue()
    rt = WorkflowRuntime(q, Runner(chain(0)))
    await rt.submit(RunSpec(b"x", run_id="forever"))
    await finish(rt, "forever")
    clock.advance(10 * 365 * 86400)
    assert await rt.sweep_memos() == 0
    assert await rt.outcome("forever") is not None


async def test_memo_retention_sweep_runs_in_the_worker_and_after_a_restart(
    open_queue: Any, clock: MockClock
) -> None:
    q = await open_queue()
    rt = WorkflowRuntime(q, Runner(chain(0)), options=RuntimeOptions(memo_retention=30.0))
    await rt.submit(RunSpec(b"x", run_id="swept"))
    await finish(rt, "swept")
    await q.close()
    q2 = await open_queue()  # a new process: the index bound is unknown, found by scan
    rt2 = WorkflowRuntime(q2, Runner(chain(0)), options=RuntimeOptions(memo_retention=30.0))
    clock.advance(30)
    assert rt2.status("swept") is not None
    await clock.wait_for_sleepers(BG)  # the queue's background loops are parked
    parked = clock.sleepers
    worker = rt2.spawn()  # sweeps at startup, then every poll interval
    try:
        # The idle worker and the sweeper are parked on the clock too: the
        # startup pass is done.
        await clock.wait_for_sleepers(parked + 2)
        assert rt2.status("swept") is None
    finally:
        await worker.shutdown()
    assert await rt2.outcome("swept") is None


async def test_a_long_step_extends_its_lease_through_the_delivery(
    open_queue: Any, clock: MockClock
) -> None:
    q = await open_queue(lease_duration=30.0)
    started = asyncio.Event()
    release = asyncio.Event()

    async def body(step: Step) -> StepOutcome:
        if step.headers.get("extend") == "yes":
            step.lease.ensure_at_least(600)  # before a slow call with a 10-minute timeout
        started.set()
        await release.wait()
        return Succeed(b"slow")

    for extend, reaped in (("yes", 0), ("no", 1)):
        started.clear()
        release.clear()
        rt = WorkflowRuntime(q, Runner(body))
        run_id = f"long-{extend}"
        await rt.submit(
            RunSpec(b"x", run_id=run_id, options=RunOptions(headers={"extend": extend}))
        )
        worker = rt.spawn()
        try:
            await started.wait()
            clock.advance(31)  # past the queue's 30 s lease
            assert q.reap_now() == reaped
            release.set()
            end = await asyncio.wait_for(rt.wait(run_id), timeout=30)
        finally:
            await worker.shutdown()
        assert end.termination.status is TerminalStatus.SUCCEEDED


async def test_a_step_claimed_after_a_cancel_request_never_runs(open_queue: Any) -> None:
    from durable.engine import keys
    from durable.engine.records import decode_run_record, encode_run_record

    q = await open_queue()
    runner = Runner(chain(0))
    rt = WorkflowRuntime(q, runner)
    await rt.submit(RunSpec(b"x", run_id="late"))
    # A request recorded by another runtime whose cancel found no queued job.
    raw = q.kv.get(keys.run_key("late"))
    assert raw is not None
    flagged = encode_run_record(decode_run_record(raw).with_cancel_requested())
    await q.commit_effects(SettlementEffects().kv_put(keys.run_key("late"), flagged))
    status = rt.status("late")
    assert status is not None
    assert isinstance(status.state, Cancelling)
    end = await finish(rt, "late")
    assert end.termination.status is TerminalStatus.CANCELLED
    assert runner.ran == []


async def test_a_step_the_reaper_dead_letters_fails_its_run(
    open_queue: Any, clock: MockClock
) -> None:
    q = await open_queue(max_attempts=1, lease_duration=30.0)
    started = asyncio.Event()
    release = asyncio.Event()
    hook = RecordingHook()

    async def body(step: Step) -> StepOutcome:
        started.set()
        await release.wait()
        return Succeed(b"too late")

    rt = WorkflowRuntime(q, Runner(body), hook)
    await rt.submit(RunSpec(b"x", run_id="reaped"))
    worker = rt.spawn()
    try:
        await started.wait()
        clock.advance(31)
        assert q.reap_now() == 1  # out of attempts: dead-lettered by the reaper
        assert await rt.reconcile_dead() == 1
        assert await rt.reconcile_dead() == 0  # nothing new
        release.set()  # the late ack finds its claim lost; the run stays failed
        await hook.called.wait()
    finally:
        await worker.shutdown()
    status = rt.status("reaped")
    assert status is not None
    assert isinstance(status.state, Terminated)
    assert status.state.termination.status is TerminalStatus.FAILED
    assert status.state.termination.error == "lease expired"
    assert status.state.termination.error_kind is None
    assert await rt.outcome("reaped") is None  # no worker recorded one
    assert [o.status for o in hook.seen] == [TerminalStatus.FAILED]


async def test_a_step_dead_lettered_at_open_fails_its_run(open_queue: Any) -> None:
    q = await open_queue(max_attempts=1)
    started = asyncio.Event()

    async def body(step: Step) -> StepOutcome:
        started.set()
        await asyncio.Event().wait()
        raise AssertionError("unreachable")

    rt = WorkflowRuntime(q, Runner(body))
    await rt.submit(RunSpec(b"x", run_id="interrupted"))
    worker = rt.spawn()
    await started.wait()
    await q.writer.flush()  # the claim reached the store (claims ride the next flush)
    await worker.abort()  # the process dies with the step claimed
    q2 = await open_queue(max_attempts=1)  # recovery dead-letters it: no attempts left
    rt2 = WorkflowRuntime(q2, Runner(chain(0)))
    worker2 = rt2.spawn()  # reconciles at startup
    try:
        end = await asyncio.wait_for(rt2.wait("interrupted"), timeout=30)
    finally:
        await worker2.shutdown()
    assert end.termination.status is TerminalStatus.FAILED
    assert end.termination.error == "claim interrupted by process exit"


async def test_a_runner_can_be_unit_tested_on_a_detached_step() -> None:
    from durable.engine import Delivery

    async def body(step: Step) -> StepOutcome:
        cached = await step.memo.memoized("llm", lambda: "answer")
        step.effects.put(b"app/seen", step.payload)
        step.lease.ensure_at_least(600)  # no queue: no effect, no error
        if step.is_last_attempt():
            return Fail("giving up")
        return Succeed(cached.encode())

    step = Delivery.detached(b"input", attempts=1, max_attempts=3)
    assert await Runner(body).run_step(step) == Succeed(b"answer")
    assert step.effects.staged() == ({b"app/seen": b"input"}, frozenset())
    assert not step.cancel_token.is_cancelled()
    last = Step.detached(b"input", attempts=3, max_attempts=3)
    assert await Runner(body).run_step(last) == Fail("giving up")


async def test_small_outcomes_ride_the_terminal_record_large_ones_the_memo(
    open_queue: Any,
) -> None:
    from durable.engine.records import (
        TerminalRecord,
        decode_terminal_record,
        encode_terminal_record,
    )

    q = await open_queue()

    async def body(step: Step) -> StepOutcome:
        return Succeed(step.payload * 2)

    rt = WorkflowRuntime(q, Runner(body))
    memo_objects = rt.memos.objects
    await rt.submit(RunSpec(b"s" * 10, run_id="small"))
    small = await finish(rt, "small")
    assert small.outcome.result == b"s" * 20
    assert await memo_objects.list(rt.memos.prefix) == []  # no object written for it
    await rt.submit(RunSpec(b"L" * 10_000, run_id="large"))
    large = await finish(rt, "large")
    assert large.outcome.result == b"L" * 20_000  # read back from the run memo
    assert len(await memo_objects.list(rt.memos.prefix)) == 1
    terminal = rt.view.terminal_record("small")
    assert terminal is not None
    assert terminal.outcome == small.outcome
    assert decode_terminal_record(encode_terminal_record(terminal)) == terminal
    bare = TerminalRecord(terminal.termination, terminal.input_sha256)
    assert decode_terminal_record(encode_terminal_record(bare)).outcome is None
