"""``internal=`` on `WorkflowRuntime.signal`, `cancel`, `clear_signal` and
`GroupRetention.mark`: reserved KV writes of a layer built on the runtime (the
cluster's inbox records each request it applies so) commit exactly once, in
the transaction that performs the operation, on every path.

A spy on `LogWriter.commit` (the real method runs) records the writes of every
transaction, so each test asserts which transaction carried the internal writes
and that no other did.
"""

from __future__ import annotations

import asyncio

import pytest
from engine_helpers import Opener, Runner, chain

from durable.engine import (
    RunSpec,
    RuntimeOptions,
    Step,
    StepOutcome,
    Succeed,
    TerminalStatus,
    Terminated,
    WorkflowRuntime,
)
from durable.engine import keys as engine_keys
from durable.engine.records import decode_run_record
from durable.engine.signals import SignalOutcome
from durable.store.keyspace import user_key
from durable.store.log import LogWriter
from durable.store.log.batch import WriteBatch

KEY = "approval:order-1"
MARK = b"workflow/test-internal/request-1"
INTERNAL = {MARK: b"applied"}

Batch = list[tuple[bytes, bytes | None]]


@pytest.fixture
def batches(monkeypatch: pytest.MonkeyPatch) -> list[Batch]:
    """The writes of every transaction committed from now on, in commit order."""
    seen: list[Batch] = []
    real = LogWriter.commit

    def spy(self: LogWriter, batch: WriteBatch, *, lazy: bool = False) -> object:
        ops = batch.ops
        seen.append([(ops[i] or b"", ops[i + 1]) for i in range(0, len(ops), 2)])
        return real(self, batch, lazy=lazy)

    monkeypatch.setattr(LogWriter, "commit", spy)
    return seen


def carrying(batches: list[Batch], key: bytes) -> list[dict[bytes, bytes | None]]:
    """The transactions that wrote caller key ``key``, as key -> value maps."""
    return [dict(b) for b in batches if any(k == user_key(key) for k, _ in b)]


async def wait_on_signal(step: Step) -> StepOutcome:
    """Step 0 waits for a signal on `KEY`; step 1 succeeds with it."""
    if step.step_number == 0:
        return StepOutcome.continue_on_signal(b"waiting", KEY, 3600.0)
    return Succeed(step.signal or b"none")


async def waiting_run(rt: WorkflowRuntime, run_id: str) -> None:
    """Submit ``run_id`` and run its step 0 until it waits on `KEY`."""
    sub = await rt.submit(RunSpec(b"in", run_id=run_id))
    worker = rt.spawn()
    try:
        await asyncio.wait_for(rt.queue.wait_for_completion(sub.job_id, None), 30)
    finally:
        await worker.shutdown()
    assert rt.queue.kv.get(engine_keys.signal_wait_key(KEY)) is not None


# ------------------------------------------------------------------ signal


async def test_signal_internal_writes_ride_the_buffer_write(
    open_queue: Opener, batches: list[Batch]
) -> None:
    rt = WorkflowRuntime(await open_queue(), Runner(wait_on_signal))
    assert await rt.signal(KEY, b"yes", internal=INTERNAL) is SignalOutcome.BUFFERED
    [txn] = carrying(batches, MARK)
    assert txn[user_key(engine_keys.signal_buffer_key(KEY))] == b"yes"
    assert rt.queue.kv.get(MARK) == b"applied"


async def test_a_delivered_signal_commits_its_internal_writes_once(
    open_queue: Opener, batches: list[Batch]
) -> None:
    rt = WorkflowRuntime(await open_queue(), Runner(wait_on_signal))
    await waiting_run(rt, "r1")
    batches.clear()
    assert await rt.signal(KEY, b"yes", internal=INTERNAL) is SignalOutcome.DELIVERED
    [txn] = carrying(batches, MARK)  # not again with the wake or the clean-ups
    assert txn[user_key(engine_keys.signal_buffer_key(KEY))] == b"yes"
    assert len(batches) > 1  # the wake committed on its own


async def test_a_signal_without_internal_writes_commits_as_before(
    open_queue: Opener, batches: list[Batch]
) -> None:
    rt = WorkflowRuntime(await open_queue(), Runner(wait_on_signal))
    await rt.signal(KEY, b"yes")
    assert batches == [[(user_key(engine_keys.signal_buffer_key(KEY)), b"yes")]]


# ------------------------------------------------------------------ cancel


async def test_cancel_internal_writes_ride_the_request_on_the_run_record(
    open_queue: Opener, batches: list[Batch]
) -> None:
    rt = WorkflowRuntime(await open_queue(), Runner(chain(3)))
    await rt.submit(RunSpec(b"in", run_id="r1"))
    batches.clear()
    assert await rt.cancel("r1", internal=INTERNAL)
    [txn] = carrying(batches, MARK)
    flagged = txn[user_key(engine_keys.run_key("r1"))]
    assert flagged is not None
    assert decode_run_record(flagged).cancel_requested
    status = rt.status("r1")
    assert status is not None
    assert isinstance(status.state, Terminated)
    assert status.state.termination.status is TerminalStatus.CANCELLED


async def test_cancel_of_an_unknown_run_commits_its_internal_writes_alone(
    open_queue: Opener, batches: list[Batch]
) -> None:
    rt = WorkflowRuntime(await open_queue(), Runner(chain(0)))
    assert await rt.cancel("nobody", internal=INTERNAL) is False
    assert [dict(b) for b in batches] == [{user_key(MARK): b"applied"}]
    batches.clear()
    assert await rt.cancel("nobody") is False
    assert batches == []  # nothing to record, nothing written


async def test_cancel_already_requested_commits_its_internal_writes_once_without_the_record(
    open_queue: Opener, batches: list[Batch]
) -> None:
    started, release = asyncio.Event(), asyncio.Event()

    async def body(step: Step) -> StepOutcome:
        started.set()
        await release.wait()
        return Succeed(b"done")

    rt = WorkflowRuntime(await open_queue(), Runner(body))
    await rt.submit(RunSpec(b"in", run_id="r1"))
    worker = rt.spawn()
    try:
        await asyncio.wait_for(started.wait(), 30)
        assert await rt.cancel("r1")  # the claimed step is told; the flag is set
        batches.clear()
        assert await rt.cancel("r1", internal=INTERNAL)
        [txn] = carrying(batches, MARK)
        assert user_key(engine_keys.run_key("r1")) not in txn
        assert len(carrying(batches, engine_keys.run_key("r1"))) == 0
        release.set()
        end = await asyncio.wait_for(rt.wait("r1"), 30)
        assert end is not None
        assert end.termination.status is TerminalStatus.CANCELLED
    finally:
        release.set()
        await worker.shutdown()
    assert len(carrying(batches, MARK)) == 1


async def test_cancel_of_a_terminated_run_commits_its_internal_writes_alone(
    open_queue: Opener, batches: list[Batch]
) -> None:
    rt = WorkflowRuntime(await open_queue(), Runner(chain(0)))
    await rt.submit(RunSpec(b"in", run_id="r1"))
    worker = rt.spawn()
    try:
        await asyncio.wait_for(rt.wait("r1"), 30)
    finally:
        await worker.shutdown()
    batches.clear()
    assert await rt.cancel("r1", internal=INTERNAL) is False
    assert [dict(b) for b in batches] == [{user_key(MARK): b"applied"}]


# ------------------------------------------------------------ clear_signal


async def test_clear_signal_internal_writes_ride_the_buffers_delete(
    open_queue: Opener, batches: list[Batch]
) -> None:
    rt = WorkflowRuntime(await open_queue(), Runner(wait_on_signal))
    await rt.signal(KEY, b"yes")
    batches.clear()
    assert await rt.clear_signal(KEY, internal=INTERNAL)
    buf = user_key(engine_keys.signal_buffer_key(KEY))
    assert [dict(b) for b in batches] == [{user_key(MARK): b"applied", buf: None}]
    batches.clear()
    assert await rt.clear_signal(KEY, internal={MARK: b"again"}) is False
    assert [dict(b) for b in batches] == [{user_key(MARK): b"again"}]
    batches.clear()
    assert await rt.clear_signal(KEY) is False
    assert batches == []


# -------------------------------------------------------------- group marks


async def test_group_mark_internal_writes_ride_the_marker(
    open_queue: Opener, batches: list[Batch]
) -> None:
    rt = WorkflowRuntime(
        await open_queue(), Runner(chain(0)), options=RuntimeOptions(group_retention=60.0)
    )
    assert await rt.group_markers.mark("g1", internal=INTERNAL)
    [txn] = carrying(batches, MARK)
    assert len(txn) == 2
    [marker] = [k for k in txn if k != user_key(MARK)]
    prefix = engine_keys.group_terminals_prefix(rt.options.queue_name)
    assert marker.startswith(user_key(prefix))
    assert marker.endswith(b"g1")
    # one entry of the group-retention index: the marker itself
    assert rt.queue.kv.count(prefix) == 1


async def test_group_mark_without_retention_commits_internal_writes_alone(
    open_queue: Opener, batches: list[Batch]
) -> None:
    rt = WorkflowRuntime(await open_queue(), Runner(chain(0)))
    assert await rt.group_markers.mark("g1", internal=INTERNAL) is False
    assert [dict(b) for b in batches] == [{user_key(MARK): b"applied"}]
    batches.clear()
    assert await rt.group_markers.mark("g1") is False
    assert batches == []
