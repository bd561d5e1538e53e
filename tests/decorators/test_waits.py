"""Durable waits (issue point 5): sleep and wait_for_signal hold no worker,
run on the engine's clock and replay what ended them; run_id()."""

from __future__ import annotations

import asyncio
import datetime as dt
from collections import Counter
from typing import Any

import pytest
from decorator_helpers import LIMIT, Factory, make_engine, result, wait_parked

import durable
from durable.decorators.journal import SIGNAL, SLEEP
from durable.decorators.waiting import Waiting
from durable.engine import SignalOutcome
from durable.errors import InvalidArgument, NotInWorkflow, RunNotFound
from durable.store.clock import MockClock

calls: Counter[str] = Counter()
seen: dict[str, Any] = {}


@pytest.fixture(autouse=True)
def _fresh() -> None:
    calls.clear()
    seen.clear()
    gates.clear()


@durable.step
async def note(name: str) -> str:
    calls[name] += 1
    return name


@durable.workflow
async def napper(seconds: float) -> str:
    await note("before")
    await durable.sleep(seconds)
    await note("after")
    return "rested"


@durable.workflow
async def quick() -> str:
    return await note("quick")


@durable.workflow
async def timedelta_nap() -> int:
    await durable.sleep(dt.timedelta(minutes=2))
    return durable.decorators.context.run_id().count("-")


@durable.workflow
async def approval(key: str, limit: float) -> Any:
    await note("asked")
    answer = await durable.wait_for_signal(key, timeout=limit)
    await durable.sleep(10)  # a later delivery must replay the answer, not re-read it
    return answer


@durable.step
async def whoami() -> str:
    return durable.run_id()


@durable.workflow
async def identity() -> list[str]:
    return [durable.run_id(), await whoami()]


@durable.step
async def sleeps_inside() -> None:
    await durable.sleep(1)


@durable.workflow
async def misuse() -> str:
    try:
        await sleeps_inside()
    except NotInWorkflow as e:
        return str(e)
    return "no error"


async def test_a_sleeping_run_holds_no_worker(make_objects: Factory, clock: MockClock) -> None:
    async with make_engine(make_objects, clock, concurrency={"workflows": 1}) as engine:
        sleeper = await napper.start(3600)
        await wait_parked(engine, sleeper.run_id)
        # The only worker is free: another run completes meanwhile.
        assert await result(await quick.start()) == "quick"
        clock.advance(3599)
        assert engine.queue.promote_scheduled_now() == 0  # not due yet
        clock.advance(1)
        assert await result(sleeper) == "rested"
    assert calls == {"before": 1, "after": 1, "quick": 1}


async def test_a_sleep_survives_a_restart(make_objects: Factory, clock: MockClock) -> None:
    async with make_engine(make_objects, clock) as engine:
        handle = await napper.start(60)
        await wait_parked(engine, handle.run_id)
    clock.advance(60)
    async with make_engine(make_objects, clock) as engine:
        assert engine.queue.promote_scheduled_now() == 1  # (the scheduler ticks each second)
        assert await result(engine.handle(handle.run_id)) == "rested"
    assert calls == {"before": 1, "after": 1}


async def test_sleep_takes_a_timedelta(make_objects: Factory, clock: MockClock) -> None:
    async with make_engine(make_objects, clock) as engine:
        handle = await timedelta_nap.options(run_id="nap-1").start()
        await wait_parked(engine, handle.run_id)
        clock.advance(119)
        assert engine.queue.promote_scheduled_now() == 0
        clock.advance(1)
        assert await result(handle) == 1


async def test_a_signal_wakes_the_waiting_run_and_is_replayed(
    make_objects: Factory, clock: MockClock
) -> None:
    async with make_engine(make_objects, clock) as engine:
        handle = await approval.start("approve:1", 3600)
        await wait_parked(engine, handle.run_id)
        outcome = await engine.signal("approve:1", {"by": "ana", "ok": True})
        assert outcome is SignalOutcome.DELIVERED
        await wait_parked(engine, handle.run_id, step=2)  # now in the sleep
        clock.advance(10)
        assert await result(handle) == {"by": "ana", "ok": True}
    assert calls == {"asked": 1}


async def test_a_wait_times_out_with_none(make_objects: Factory, clock: MockClock) -> None:
    async with make_engine(make_objects, clock) as engine:
        handle = await approval.start("approve:2", 300)
        await wait_parked(engine, handle.run_id)
        clock.advance(299)
        assert engine.queue.promote_scheduled_now() == 0
        clock.advance(1)
        await wait_parked(engine, handle.run_id, step=2)
        clock.advance(10)
        assert await result(handle) is None
        kinds = [
            e.kind
            for _, e in durable.decorators.journal.Journal.load(
                engine.queue.kv.internal(),
                engine.workflows.default.memos.run_memo(handle.run_id),
                handle.run_id,
            ).entries()
        ]
    assert kinds == ["step", SIGNAL, SLEEP]


async def test_a_signal_sent_before_the_wait_is_buffered_for_it(
    make_objects: Factory, clock: MockClock
) -> None:
    async with make_engine(make_objects, clock) as engine:
        assert await engine.signal("approve:3", "early") is SignalOutcome.BUFFERED
        handle = await approval.start("approve:3", 3600)
        await wait_parked(engine, handle.run_id, step=2)  # took it at once: sleeping
        clock.advance(10)
        assert await result(handle) == "early"


async def test_a_wait_survives_a_restart(make_objects: Factory, clock: MockClock) -> None:
    async with make_engine(make_objects, clock) as engine:
        handle = await approval.start("approve:4", 3600)
        await wait_parked(engine, handle.run_id)
    async with make_engine(make_objects, clock) as engine:
        assert await engine.signal("approve:4", 42) is SignalOutcome.DELIVERED
        await wait_parked(engine, handle.run_id, step=2)
        clock.advance(10)
        assert await result(engine.handle(handle.run_id)) == 42
    assert calls == {"asked": 1}


async def test_run_id_inside_a_workflow_and_its_steps(
    make_objects: Factory, clock: MockClock
) -> None:
    async with make_engine(make_objects, clock):
        handle = await identity.options(run_id="who-1").start()
        assert await result(handle) == ["who-1", "who-1"]


async def test_waits_are_refused_outside_a_workflow_and_inside_steps(
    make_objects: Factory, clock: MockClock
) -> None:
    with pytest.raises(NotInWorkflow, match=r"durable\.sleep\(\)"):
        durable.sleep(1)
    with pytest.raises(NotInWorkflow, match=r"wait_for_signal"):
        durable.wait_for_signal("k", 1)
    with pytest.raises(NotInWorkflow, match=r"run_id"):
        durable.run_id()
    async with make_engine(make_objects, clock):
        message = await result(await misuse.start())
    assert "inside the body of step" in message


async def test_wait_arguments_are_checked() -> None:
    with pytest.raises(NotInWorkflow):
        durable.sleep(-1)  # outside a workflow first
    for bad in (-1, float("nan"), "soon"):
        with pytest.raises(InvalidArgument):
            durable.decorators.waits._seconds("durable.sleep()", bad)
    with pytest.raises(InvalidArgument):
        durable.decorators.waits._seconds("timeout", 0, positive=True)
    assert asyncio  # the module is used by the workflows' helpers


@durable.workflow
async def two_answers() -> list[Any]:
    return list(
        await asyncio.gather(durable.wait_for_signal("first"), durable.wait_for_signal("second"))
    )


async def test_gathered_waits_each_keep_the_signal_that_ended_them(
    make_objects: Factory, clock: MockClock
) -> None:
    async with make_engine(make_objects, clock) as engine:
        handle = await two_answers.start()
        await wait_parked(engine, handle.run_id)
        # The run waits on "first"; "second" is buffered until it waits on it.
        assert await engine.signal("second", "B") is SignalOutcome.BUFFERED
        assert await engine.signal("first", "A") is SignalOutcome.DELIVERED
        assert await result(handle) == ["A", "B"]
        for k in ("first", "second"):
            assert engine.for_key(k).queue.kv.scan(b"workflow/signal-", limit=10).entries == []


# ------------------------------------------------------------ handle.waiting()

gates: dict[str, asyncio.Event] = {}


def gate(name: str) -> asyncio.Event:
    return gates.setdefault(name, asyncio.Event())


@durable.step
async def held(name: str) -> str:
    """Runs until the test opens gate ``name``; sets ``{name} entered``."""
    gate(f"{name} entered").set()
    await gate(name).wait()
    return name


@durable.workflow
async def held_then_nap(name: str) -> str:
    await held(name)
    await durable.sleep(30)
    return name


@durable.workflow
async def nap_then_held(name: str) -> str:
    await durable.sleep(30)
    return await held(name)


async def test_waiting_describes_a_sleep(make_objects: Factory, clock: MockClock) -> None:
    async with make_engine(make_objects, clock):
        start = clock.now_ms()
        handle = await napper.start(3600)
        waiting = await asyncio.wait_for(handle.waiting(), LIMIT)
        assert waiting == Waiting(
            run_id=handle.run_id,
            step=1,
            signal_key=None,
            until_ms=start + 3_600_000,
            since_ms=start,
        )
        assert waiting.child_run_id is None
        # Already waiting: at once, the same.
        assert await handle.waiting(timeout=0) == waiting
        clock.advance(3600)
        assert await asyncio.wait_for(handle.waiting(after=waiting), LIMIT) is None  # ended


async def test_waiting_describes_a_signal_wait(make_objects: Factory, clock: MockClock) -> None:
    async with make_engine(make_objects, clock) as engine:
        start = clock.now_ms()
        handle = await approval.start("approve:w", 300)
        waiting = await asyncio.wait_for(handle.waiting(), LIMIT)
        assert (waiting.signal_key, waiting.until_ms, waiting.step) == (
            "approve:w",
            start + 300_000,
            1,
        )
        await engine.signal("approve:w", "ok")
        later = await asyncio.wait_for(handle.waiting(after=waiting), LIMIT)
        assert later is not None
        assert (later.signal_key, later.until_ms, later.step) == (None, start + 10_000, 2)
        with pytest.raises(InvalidArgument, match="describes run"):
            await engine.handle("someone-else").waiting(after=later)


async def test_waiting_returns_once_the_run_waits(make_objects: Factory, clock: MockClock) -> None:
    async with make_engine(make_objects, clock):
        handle = await held_then_nap.start("h1")
        await asyncio.wait_for(gate("h1 entered").wait(), LIMIT)
        waiter = asyncio.ensure_future(handle.waiting())
        await asyncio.sleep(0)
        assert not waiter.done()  # the run runs its step
        gate("h1").set()
        waiting = await asyncio.wait_for(waiter, LIMIT)
        assert waiting is not None
        assert waiting.signal_key is None


async def test_a_run_woken_from_its_wait_is_not_waiting(
    make_objects: Factory, clock: MockClock
) -> None:
    async with make_engine(make_objects, clock):
        handle = await nap_then_held.start("h3")
        first = await asyncio.wait_for(handle.waiting(), LIMIT)
        assert first is not None
        clock.advance(30)
        await asyncio.wait_for(gate("h3 entered").wait(), LIMIT)
        waiter = asyncio.ensure_future(handle.waiting())  # it runs its step now
        for _ in range(10):
            await asyncio.sleep(0)
        assert not waiter.done()
        gate("h3").set()
        assert await asyncio.wait_for(waiter, LIMIT) is None  # and then it ended


async def test_waiting_is_none_for_a_run_that_terminates_first(
    make_objects: Factory, clock: MockClock
) -> None:
    async with make_engine(make_objects, clock) as engine:
        done = await quick.start()
        assert await result(done) == "quick"
        assert await done.waiting() is None  # had terminated
        handle = await approval.start("approve:never", 60)
        first = await asyncio.wait_for(handle.waiting(), LIMIT)
        waiter = asyncio.ensure_future(handle.waiting(after=first))
        await asyncio.sleep(0)
        assert not waiter.done()
        assert await handle.cancel()
        assert await asyncio.wait_for(waiter, LIMIT) is None  # terminated while watched
        with pytest.raises(RunNotFound, match="no-such-run"):
            await engine.handle("no-such-run").waiting()


async def test_waiting_times_out_on_the_engine_clock(
    make_objects: Factory, clock: MockClock
) -> None:
    async with make_engine(make_objects, clock):
        handle = await held_then_nap.options(run_id="held-2").start("h2")
        await asyncio.wait_for(gate("h2 entered").wait(), LIMIT)
        idle = clock.sleepers
        waiter = asyncio.ensure_future(handle.waiting(timeout=5))
        await asyncio.wait_for(clock.wait_for_sleepers(idle + 1), LIMIT)
        clock.advance(5)
        await asyncio.wait({waiter}, timeout=LIMIT)
        error = waiter.exception()
        assert isinstance(error, TimeoutError)
        assert "'held-2'" in str(error)
        gate("h2").set()
