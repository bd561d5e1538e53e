"""Workflow-level timeouts (issue 18 point 6): ``@workflow(timeout=...)``."""

from __future__ import annotations

import asyncio

import pytest
from decorator_helpers import LIMIT, Factory, make_engine, wait_parked, wait_started

import durable
from durable.errors import DecoratorError, RunCancelled, RunTimedOut
from durable.store.clock import MockClock
from durable.testing.time_skipping import run_until_settled

#: Set by the step that never ends (one per test: an Event belongs to its loop).
began: dict[str, asyncio.Event] = {}


@durable.workflow(name="timeout.waits", timeout=10)
async def waits(key: str) -> str:
    return str(await durable.wait_for_signal(key))


@durable.workflow(name="timeout.child")
async def child(key: str) -> str:
    return str(await durable.wait_for_signal(key))


@durable.workflow(name="timeout.parent", timeout=10)
async def parent(key: str) -> str:
    return await child(key)


@durable.step
async def forever() -> None:
    began["step"].set()
    await asyncio.Event().wait()


@durable.workflow(name="timeout.busy", timeout=5)
async def busy() -> None:
    await forever()


@durable.workflow(name="timeout.sleeps", timeout=30)
async def sleeps() -> str:
    await durable.sleep(3600)
    return "woke"


async def _timed_out(
    handle: durable.WorkflowHandle[object], seconds: float, *, skip: bool = True
) -> RunTimedOut:
    """Skip the clock (a waiting run wakes at its deadline at the latest)
    until the run ends; check it timed out, named so."""
    if skip:
        settled = await asyncio.wait_for(run_until_settled(handle), LIMIT)
        assert settled.ended
    with pytest.raises(RunTimedOut) as info:
        await asyncio.wait_for(handle.result(), LIMIT)
    assert info.value.run_id == handle.run_id
    assert info.value.timeout == seconds
    assert handle.run_id in str(info.value)
    assert f"{seconds:g} s" in str(info.value)
    return info.value


async def test_a_run_waiting_on_a_signal_is_cancelled_at_its_deadline(
    make_objects: Factory, clock: MockClock
) -> None:
    async with make_engine(make_objects, clock) as engine:
        start = clock.now_ms()
        h = await waits.start("never")
        await wait_parked(engine, h.run_id)
        clock.advance(9.5)  # the worker polls each 0.25 s of the clock
        await asyncio.sleep(0.05)
        assert (await h.status()).state.name == "WAITING"  # type: ignore[union-attr]
        error = await _timed_out(h, 10)
        assert clock.now_ms() == start + 10_000  # woken at the deadline, not later
        assert isinstance(error, RunCancelled)
        assert (await h.status()).state.name == "CANCELLED"  # type: ignore[union-attr]
        # In time, the signal wins: the deadline only bounds the run.
        ok = await waits.start("soon")
        await wait_parked(engine, ok.run_id)
        clock.advance(5)
        await engine.signal("soon", "v")
        assert await asyncio.wait_for(ok.result(), LIMIT) == "v"


async def test_its_children_are_cancelled_too(make_objects: Factory, clock: MockClock) -> None:
    async with make_engine(make_objects, clock) as engine:
        h = await parent.start("child-never")
        await wait_parked(engine, h.run_id)
        kid = engine.handle(durable.decorators.children.child_run_id(h.run_id, 0))
        await wait_started(engine, kid.run_id)
        await wait_parked(engine, kid.run_id)
        await _timed_out(h, 10)
        with pytest.raises(RunCancelled) as info:
            await asyncio.wait_for(kid.result(), LIMIT)
        assert not isinstance(info.value, RunTimedOut)  # cancelled by its parent


async def test_a_step_in_flight_is_cancelled_at_the_deadline(
    make_objects: Factory, clock: MockClock
) -> None:
    began["step"] = asyncio.Event()
    async with make_engine(make_objects, clock):
        h = await busy.start()
        await asyncio.wait_for(began["step"].wait(), LIMIT)
        clock.advance(5)  # the delivery's own timer on the clock
        await _timed_out(h, 5, skip=False)


async def test_a_sleep_past_the_deadline_and_a_per_start_timeout(
    make_objects: Factory, clock: MockClock
) -> None:
    async with make_engine(make_objects, clock) as engine:
        start = clock.now_ms()
        h = await sleeps.start()
        await wait_parked(engine, h.run_id)
        await _timed_out(h, 30)
        assert clock.now_ms() == start + 30_000  # not an hour
        longer = await sleeps.options(timeout=7200).start()
        await wait_parked(engine, longer.run_id)
        assert (await run_until_settled(longer)).ended
        assert await asyncio.wait_for(longer.result(), LIMIT) == "woke"
        # A per-start timeout on a workflow without one.
        short = await child.options(timeout=2).start("k-short")
        await wait_parked(engine, short.run_id)
        await _timed_out(short, 2)


async def test_a_restart_does_not_reset_the_deadline(
    make_objects: Factory, clock: MockClock
) -> None:
    async with make_engine(make_objects, clock) as engine:
        start = clock.now_ms()
        h = await waits.start("restart-never")
        run_id = h.run_id
        await wait_parked(engine, run_id)
        clock.advance(6)
    async with make_engine(make_objects, clock) as engine:  # the same store, reopened
        h = engine.handle(run_id)
        await wait_parked(engine, run_id)
        clock.advance(3.5)
        await asyncio.sleep(0.05)
        assert (await h.status()).state.name == "WAITING"  # type: ignore[union-attr]
        await _timed_out(h, 10)
        assert clock.now_ms() == start + 10_000  # 10 s after the start, 4 s after the restart


def test_bad_timeouts_are_refused_naming_the_workflow() -> None:
    for bad in (0, -1, float("inf"), "5", True):
        with pytest.raises(DecoratorError, match=r"timeout\.bad.*timeout"):

            @durable.workflow(name="timeout.bad", timeout=bad)  # type: ignore[arg-type]
            async def bad_wf() -> None: ...

    with pytest.raises(DecoratorError, match=r"timeout\.waits.*timeout must be > 0"):
        waits.options(timeout=0)
