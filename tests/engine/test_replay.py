"""Step-output replay: a recorded outcome is settled without running the step again."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest

from durable.engine import (
    After,
    Continue,
    OnSignal,
    RunSpec,
    RuntimeOptions,
    Step,
    StepError,
    StepOutcome,
    Succeed,
    WorkflowRuntime,
)
from durable.engine.outcomes import Cancel, Fail
from durable.engine.replay import ReplayRecord, ReplayStore, decode_replay, encode_replay
from durable.store.clock import MockClock
from durable.store.objects.base import ObjectStore
from durable.store.queue import OpenOptions, Queue, QueueConfig

Factory = Callable[[], ObjectStore]
REPLAY = RuntimeOptions(step_output_replay=True)


@pytest.mark.parametrize(
    "outcome",
    [
        Continue(b"p", After(12.5)),
        Continue(b"p", OnSignal("approve:1", 3600.0)),
        Continue(b"p"),
        Succeed(b"r"),
        Fail("no"),
        Cancel("stop"),
    ],
)
def test_records_round_trip(outcome: StepOutcome) -> None:
    record = ReplayRecord(1_000, outcome, {b"k": b"v"}, frozenset({b"gone"}))
    assert decode_replay("x", encode_replay(record)) == record


def test_a_replayed_delay_keeps_the_original_schedule() -> None:
    record = ReplayRecord(1_000, Continue(b"p", After(60.0)), {}, frozenset())
    assert record.adjusted(46_000) == Continue(b"p", After(15.0))
    assert record.adjusted(500) == Continue(b"p", After(60.0))  # clock behind: full delay
    assert record.adjusted(100_000) == Continue(b"p", After(0.0))
    waiting = ReplayRecord(1_000, Continue(b"p", OnSignal("k", 60.0)), {}, frozenset())
    adjusted = waiting.adjusted(31_000)
    assert isinstance(adjusted, Continue)
    assert adjusted.when == OnSignal("k", 30.0)
    assert ReplayRecord(0, Succeed(b"r"), {}, frozenset()).adjusted(9_999) == Succeed(b"r")


class CrashAfterRecording(ReplayStore):
    """Writes the record, then never returns: the process dies before the ack."""

    recorded = asyncio.Event()

    async def put(self, run_id: str, step: int, payload: bytes, record: ReplayRecord) -> None:
        await super().put(run_id, step, payload, record)
        self.recorded.set()
        await asyncio.Event().wait()


async def test_a_redelivered_step_replays_its_outcome_and_effects(
    make_objects: Factory,
) -> None:
    clock = MockClock()
    options = OpenOptions(clock=clock, reaper_interval=3600, scheduler_interval=3600)
    q = await Queue.open(make_objects(), options)
    ran: list[int] = []

    async def body(step: Step) -> StepOutcome:
        ran.append(step.step_number)
        step.effects.put(b"app/step", b"%d" % step.step_number)
        if step.step_number == 0:
            return StepOutcome.continue_now(b"from step 0")
        return Succeed(step.payload)

    class Runner:
        async def run_step(self, step: Step) -> StepOutcome:
            return await body(step)

    rt = WorkflowRuntime(q, Runner(), options=REPLAY)
    crashing = CrashAfterRecording(rt.memos)
    CrashAfterRecording.recorded = asyncio.Event()
    rt.replays = crashing
    await rt.submit(RunSpec(b"in", run_id="replayed"))
    worker = rt.spawn()
    await crashing.recorded.wait()
    await worker.abort()  # died after recording step 0's outcome, before its ack
    assert ran == [0]
    assert q.kv.get(b"app/step") is None  # nothing was settled

    q2 = await Queue.open(make_objects(), options)  # requeues the interrupted step 0
    rt2 = WorkflowRuntime(q2, Runner(), options=REPLAY)
    worker2 = rt2.spawn()
    try:
        end = await asyncio.wait_for(rt2.wait("replayed"), timeout=30)
    finally:
        await worker2.shutdown()
        await q2.close()
    assert ran == [0, 1]  # step 0 was not run again
    assert end.outcome is not None
    assert end.outcome.result == b"from step 0"
    assert q2.kv.get(b"app/step") == b"1"


async def test_errors_are_not_recorded_and_a_bad_record_is_ignored(
    make_objects: Factory,
) -> None:
    clock = MockClock()
    cfg = QueueConfig(retry_backoff_base=0.0)
    options = OpenOptions(
        clock=clock,
        reaper_interval=3600,
        scheduler_interval=3600,
        queue_configs={"workflow-steps": cfg},
    )
    q = await Queue.open(make_objects(), options)
    attempts: list[int] = []

    class Runner:
        async def run_step(self, step: Step) -> StepOutcome:
            attempts.append(step.attempts)
            if step.attempts == 1:
                assert await rt.replays.get(step.run_id, 0, step.payload) is None
                raise StepError.transient("first try fails")
            return Succeed(b"ok")

    rt = WorkflowRuntime(q, Runner(), options=REPLAY)
    # A corrupt record where step 0's would go: treated as absent.
    await q.writer.objects.put(rt.replays.name("errs", 0, b"x"), b"garbage")
    await rt.submit(RunSpec(b"x", run_id="errs"))
    worker = rt.spawn()
    try:
        end: Any = await asyncio.wait_for(rt.wait("errs"), timeout=30)
    finally:
        await worker.shutdown()
        await q.close()
    assert attempts == [1, 2]
    assert end.outcome.result == b"ok"
    stored = await rt.replays.get("errs", 0, b"x")
    assert stored is not None  # overwritten by the successful attempt
    assert stored.outcome == Succeed(b"ok")
