"""``handle.status()``: a `WorkflowStatus` (issue 13, point 14).

Each state is reached for real and read from the process running the run
(its handle, and ``engine.handle(run_id)``) and, where the state outlives
the process (all but RUNNING, whose claim dies with it), from an `Engine`
opened on the store afterwards. A status reads the store's memory: it
scans no journal.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
from collections import Counter
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
from decorator_helpers import (
    LIMIT,
    Factory,
    archived,
    kv_count,
    make_engine,
    promote_due,
    result,
    wait_parked,
)

import durable
from durable import WorkflowState, WorkflowStatus
from durable.cluster.outbox import OUTBOX_PREFIX
from durable.decorators import archive
from durable.decorators.children import child_run_id
from durable.decorators.journal import decode_entry, entry_key
from durable.decorators.registry import DEFAULT_QUEUE
from durable.decorators.workflow import Workflow
from durable.store.clock import MockClock
from durable.store.kv import KvNamespace

events: dict[str, asyncio.Event] = {}


@pytest.fixture(autouse=True)
def _fresh() -> None:
    events.clear()


def event(name: str) -> asyncio.Event:
    return events.setdefault(name, asyncio.Event())


@contextlib.asynccontextmanager
async def running(
    make_objects: Factory, clock: MockClock, **options: Any
) -> AsyncIterator[durable.Engine]:
    """An engine on the test's store; leaving it releases every blocked step
    first, so a failed assertion does not leave the engine waiting for one."""
    async with make_engine(make_objects, clock, **options) as engine:
        try:
            yield engine
        finally:
            for name, ev in list(events.items()):
                if name.endswith(":release"):
                    ev.set()


async def entered(name: str) -> None:
    await asyncio.wait_for(event(f"{name}:entered").wait(), LIMIT)


@durable.step(name="status.prepare")
async def prepare(x: int) -> int:
    return x


@durable.step(name="status.block")
async def block(key: str) -> str:
    """Runs until ``key:release``; a cancel waits for it too (a slow stop)."""
    event(f"{key}:entered").set()
    try:
        await event(f"{key}:release").wait()
    except asyncio.CancelledError:
        await event(f"{key}:release").wait()
        raise
    return key


@durable.step(name="status.other")
async def other(key: str) -> str:
    return await block(key)  # a plain call inside a step


@durable.workflow(name="status.blocked")
async def blocked(key: str) -> str:
    await prepare(1)
    await prepare(2)
    return await block(key)


@durable.workflow(name="status.longer")
async def longer(key: str) -> int:
    await block(key)
    return await prepare(3)


@durable.workflow(name="status.gathered")
async def gathered() -> list[str]:
    return list(await asyncio.gather(other("g1"), block("g2")))


@durable.workflow(name="status.between")
async def between() -> None:
    await prepare(1)
    event("between:entered").set()
    await event("between:release").wait()  # workflow code, not a step


@durable.workflow(name="status.sleeper")
async def sleeper() -> str:
    await prepare(1)
    await durable.sleep(60)
    return "rested"


@durable.workflow(name="status.approval")
async def approval(key: str) -> object:
    await prepare(1)
    return await durable.wait_for_signal(key, timeout=3600)


@durable.workflow(name="status.kid")
async def kid(key: str) -> object:
    return await durable.wait_for_signal(key)


@durable.workflow(name="status.parent")
async def parent(key: str) -> object:
    return await kid(key)


@durable.workflow(name="status.fails")
async def fails() -> None:
    await prepare(1)
    raise LookupError("no such order")


async def status_of(engine: durable.Engine, run_id: str) -> WorkflowStatus:
    """The status through a handle rebuilt from the id (as another caller would)."""
    status = await engine.handle(run_id).status()
    assert status is not None
    return status


async def journaled(engine: durable.Engine, run_id: str, position: int) -> None:
    """Wait until the journal holds ``position`` of run ``run_id`` (a KV watch)."""
    kv = engine.for_run(run_id).queue.kv
    key = entry_key(run_id, position)
    while kv.get(key) is None:
        fut = kv.watch(key)  # no await since the read: no write slips through
        try:
            await asyncio.wait_for(fut, LIMIT)
        finally:
            kv.unwatch(key, fut)


# ------------------------------------------------------------------ PENDING


async def test_pending_a_run_that_starts_later_or_that_no_worker_here_runs(
    make_objects: Factory, clock: MockClock
) -> None:
    at = dt.datetime.fromtimestamp(clock.now_ms() / 1000 + 60, tz=dt.UTC)
    async with running(make_objects, clock) as engine:
        later = await blocked.options(run_at=at).start("later")
        assert await later.status() == WorkflowStatus(
            later.run_id, "status.blocked", WorkflowState.PENDING, 0, version=blocked.version
        )
    async with running(make_objects, clock, concurrency={"workflows": 0}) as engine:
        queued = await sleeper.start()
        assert await status_of(engine, later.run_id) == WorkflowStatus(
            later.run_id, "status.blocked", WorkflowState.PENDING, 0, version=blocked.version
        )
        status = await queued.status()
        assert status == WorkflowStatus(
            queued.run_id, "status.sleeper", WorkflowState.PENDING, 0, version=sleeper.version
        )
        assert status.state == "pending"  # a plain str enum
        assert not status.terminated
    async with running(make_objects, clock, concurrency={"workflows": 0}) as engine:
        # another engine (that runs nothing: a worker would claim it at once): the same
        assert (await status_of(engine, queued.run_id)).state is WorkflowState.PENDING
    async with running(make_objects, clock) as engine:
        clock.advance(60)
        promote_due(engine)  # not left to the scheduler's next tick
        await entered("later")
        event("later:release").set()
        assert await result(engine.handle(later.run_id)) == "later"


async def test_pending_after_a_delivery_was_cut_short_with_its_journal(
    make_objects: Factory, clock: MockClock
) -> None:
    """The engine stopped in the middle of a run: the next process finds it
    queued, with the steps it journaled."""
    async with running(make_objects, clock) as engine:
        handle = await longer.start("cut")
        await entered("cut")
        closing = asyncio.ensure_future(engine.__aexit__(None, None, None))
        await asyncio.sleep(0)
        event("cut:release").set()  # the step finishes; the next one waits for a process
        await asyncio.wait_for(closing, LIMIT)
    async with running(make_objects, clock, concurrency={"workflows": 0}) as engine:
        status = await status_of(engine, handle.run_id)
        assert status == WorkflowStatus(
            handle.run_id, "status.longer", WorkflowState.PENDING, 1, version=longer.version
        )


# ------------------------------------------------------------------ RUNNING


async def test_running_names_the_step_in_flight(make_objects: Factory, clock: MockClock) -> None:
    async with running(make_objects, clock) as engine:
        handle = await blocked.start("run")
        await entered("run")
        expected = WorkflowStatus(
            handle.run_id,
            "status.blocked",
            WorkflowState.RUNNING,
            2,
            "status.block",
            version=blocked.version,
        )
        assert await handle.status() == expected
        assert await status_of(engine, handle.run_id) == expected
        event("run:release").set()
        assert await result(handle) == "run"


async def test_running_gathered_steps_name_the_first_called(
    make_objects: Factory, clock: MockClock
) -> None:
    async with running(make_objects, clock) as engine:
        handle = await gathered.start()
        await entered("g1")
        await entered("g2")
        status = await handle.status()
        assert status is not None
        assert (status.state, status.current_step) == (WorkflowState.RUNNING, "status.other")
        event("g1:release").set()
        await journaled(engine, handle.run_id, 0)
        status = await handle.status()
        assert status is not None
        assert (status.state, status.steps, status.current_step) == (
            WorkflowState.RUNNING,
            1,
            "status.block",
        )
        event("g2:release").set()
        assert await result(handle) == ["g1", "g2"]


async def test_running_between_steps_names_none(make_objects: Factory, clock: MockClock) -> None:
    async with running(make_objects, clock):
        handle = await between.start()
        await entered("between")
        status = await handle.status()
        assert status is not None
        assert (status.state, status.steps, status.current_step) == (
            WorkflowState.RUNNING,
            1,
            None,
        )
        event("between:release").set()
        await result(handle)


async def test_a_cancel_asked_of_a_running_run_shows_until_it_ends(
    make_objects: Factory, clock: MockClock
) -> None:
    async with running(make_objects, clock):
        handle = await blocked.start("slow-stop")
        await entered("slow-stop")
        assert await handle.cancel()
        status = await handle.status()
        assert status is not None
        assert (status.state, status.cancel_requested) == (WorkflowState.RUNNING, True)
        event("slow-stop:release").set()
        with pytest.raises(durable.RunCancelled):
            await result(handle)
        status = await handle.status()
        assert status is not None
        assert (status.state, status.cancel_requested) == (WorkflowState.CANCELLED, False)
        assert status.terminated


# ------------------------------------------------------------------ WAITING


async def test_waiting_on_a_sleep_a_signal_and_a_child(
    make_objects: Factory, clock: MockClock
) -> None:
    async with running(make_objects, clock) as engine:
        nap = await sleeper.start()
        ask = await approval.start("approve:1")
        dad = await parent.options(run_id="dad").start("kid-signal")
        kid_id = child_run_id("dad", 0)
        found = {}
        for handle, name in ((nap, "durable.sleep"), (ask, "durable.wait_for_signal")):
            status = await wait_parked(engine, handle.run_id)
            assert (status.state, status.steps, status.current_step) == (
                WorkflowState.WAITING,
                2,  # the step and the wait
                name,
            )
            assert status.waiting == await handle.waiting()
            found[handle.run_id] = status
        assert found[nap.run_id].waiting is not None
        assert found[nap.run_id].waiting.signal_key is None
        assert found[ask.run_id].waiting is not None
        assert found[ask.run_id].waiting.signal_key == "approve:1"
        await wait_parked(engine, kid_id)
        status = await wait_parked(engine, dad.run_id)
        assert (status.state, status.current_step) == (WorkflowState.WAITING, "status.kid")
        assert status.waiting is not None
        assert status.waiting.child_run_id == kid_id
        assert (await status_of(engine, kid_id)).current_step == "durable.wait_for_signal"
    async with running(make_objects, clock, concurrency={"workflows": 0}) as engine:
        # Another engine, after a restart: still waiting, on the same.
        for run_id, status in found.items():
            assert await status_of(engine, run_id) == status
        assert (await status_of(engine, dad.run_id)).current_step == "status.kid"


# --------------------------------------------------------------- terminated


async def test_terminated_runs_with_their_error(make_objects: Factory, clock: MockClock) -> None:
    async with running(make_objects, clock) as engine:
        ok = await blocked.start("ok")
        await entered("ok")
        event("ok:release").set()
        await result(ok)
        bad = await fails.start()
        with pytest.raises(LookupError):
            await result(bad)
        ask = await approval.start("approve:never")
        await wait_parked(engine, ask.run_id)
        assert await ask.cancel()
        done = {
            ok.run_id: WorkflowStatus(
                ok.run_id, "status.blocked", WorkflowState.SUCCEEDED, 3, version=blocked.version
            ),
            bad.run_id: WorkflowStatus(
                bad.run_id,
                "status.fails",
                WorkflowState.FAILED,
                1,
                error_type="LookupError",
                error="no such order",
                version=fails.version,
            ),
        }
        for run_id, expected in done.items():
            assert await status_of(engine, run_id) == expected
        cancelled = await status_of(engine, ask.run_id)
        assert (cancelled.state, cancelled.steps) == (WorkflowState.CANCELLED, 2)
        assert cancelled.error_type is None
    async with running(make_objects, clock) as engine:
        for run_id, expected in done.items():
            assert await status_of(engine, run_id) == expected
        assert await status_of(engine, ask.run_id) == cancelled
        assert await engine.handle("no-such-run").status() is None


async def test_a_run_the_engine_failed_names_the_error(
    make_objects: Factory, clock: MockClock
) -> None:
    """A run of a workflow no process knows (never registered) fails with
    UnknownWorkflow: the engine's failure, with its type and message."""
    unknown = Workflow(blocked.fn, name="status.nowhere", queue=DEFAULT_QUEUE)
    async with running(make_objects, clock) as engine:
        handle = await unknown.start("unknown")
        with pytest.raises(durable.UnknownWorkflow):
            await result(handle)
        status = await status_of(engine, handle.run_id)
    assert (status.workflow, status.state) == ("status.nowhere", WorkflowState.FAILED)
    assert status.error_type == "UnknownWorkflow"
    assert status.error is not None
    assert "'status.nowhere'" in status.error


async def test_an_archived_run_keeps_its_status(
    make_objects: Factory, clock: MockClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(archive, "ARCHIVE_MIN_BYTES", 0)  # archive every run
    async with running(make_objects, clock) as engine:
        handle = await blocked.start("archived")
        await entered("archived")
        event("archived:release").set()
        await result(handle)
        await archived(engine, handle.run_id)
        assert kv_count(engine, b"workflow/journal/") == 0
        assert await handle.status() == WorkflowStatus(
            handle.run_id, "status.blocked", WorkflowState.SUCCEEDED, 3, version=blocked.version
        )


# --------------------------------------------------------------------- cost


async def test_a_status_scans_no_journal(
    make_objects: Factory, clock: MockClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Counted, not read: no scan of a prefix, no journal entry decoded."""
    calls: Counter[str] = Counter()

    def counting(name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        def counted(*args: Any, **kwargs: Any) -> Any:
            # A partition's outbox loop scans its (empty) outbox in the
            # background once a second: not the status's doing.
            if not (name == "scan" and args[1:2] == (OUTBOX_PREFIX,)):
                calls[name] += 1
            return fn(*args, **kwargs)

        return counted

    async with running(make_objects, clock) as engine:
        handle = await sleeper.start()
        await wait_parked(engine, handle.run_id)
        monkeypatch.setattr(KvNamespace, "scan", counting("scan", KvNamespace.scan))
        monkeypatch.setattr(KvNamespace, "snapshot", counting("snapshot", KvNamespace.snapshot))
        monkeypatch.setattr(
            "durable.decorators.journal.decode_entry", counting("decode", decode_entry)
        )
        status = await handle.status()
        assert status is not None
        assert (status.state, status.steps) == (WorkflowState.WAITING, 2)
    assert calls == {}
