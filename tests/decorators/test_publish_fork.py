"""Publish and fork (issue point 7): ``durable.publish`` / ``handle.get``
and ``engine.fork``."""

from __future__ import annotations

import asyncio
from collections import Counter

import pytest
from decorator_helpers import LIMIT, Factory, make_engine, result, wait_parked

import durable
from durable.decorators.publish import published_key
from durable.errors import InvalidArgument, NotInWorkflow, RunNotFound
from durable.store.clock import MockClock

calls: Counter[str] = Counter()


@pytest.fixture(autouse=True)
def _fresh() -> None:
    calls.clear()


@durable.workflow
async def progress(name: str) -> str:
    await durable.publish("progress", {"done": 1})
    await durable.wait_for_signal(f"{name}:a")
    await durable.publish("progress", {"done": 2})
    await durable.publish("note", "half way")
    await durable.wait_for_signal(f"{name}:b")
    return name


@durable.workflow
async def late(name: str) -> None:
    value = await durable.wait_for_signal(f"{name}:go")
    await durable.publish("answer", value)


# ------------------------------------------------------------------ publish


async def test_get_returns_the_latest_published_value(
    make_objects: Factory, clock: MockClock
) -> None:
    async with make_engine(make_objects, clock) as engine:
        handle = await progress.start("p1")
        await wait_parked(engine, handle.run_id)
        assert await handle.get("progress") == {"done": 1}
        await engine.signal("p1:a")
        await wait_parked(engine, handle.run_id, step=2)
        assert await handle.get("progress") == {"done": 2}
        assert await handle.get("note") == "half way"
        await engine.signal("p1:b")
        assert await result(handle) == "p1"
        assert await handle.get("progress") == {"done": 2}  # kept after the run ends


async def test_a_replayed_publish_writes_nothing(make_objects: Factory, clock: MockClock) -> None:
    async with make_engine(make_objects, clock) as engine:
        handle = await progress.start("p2")
        await wait_parked(engine, handle.run_id)
        await engine.signal("p2:a")
        await wait_parked(engine, handle.run_id, step=2)
        # The last delivery replays both publishes: neither may write again
        # (a replayed write of {"done": 1} would take the key backwards).
        kv = engine.for_run(handle.run_id).queue.kv
        key = published_key(handle.run_id, "progress")
        fut = kv.watch(key)
        try:
            await engine.signal("p2:b")
            assert await result(handle) == "p2"
            assert not fut.done()
        finally:
            kv.unwatch(key, fut)
        assert await handle.get("progress") == {"done": 2}


async def test_get_waits_for_the_first_value(make_objects: Factory, clock: MockClock) -> None:
    async with make_engine(make_objects, clock) as engine:
        handle = await late.start("l1")
        await wait_parked(engine, handle.run_id)
        getter = asyncio.ensure_future(handle.get("answer"))
        await asyncio.sleep(0)
        assert not getter.done()
        await engine.signal("l1:go", [1, "two"])
        assert await asyncio.wait_for(getter, LIMIT) == [1, "two"]
        await result(handle)


async def test_get_times_out_on_the_engine_clock(make_objects: Factory, clock: MockClock) -> None:
    async with make_engine(make_objects, clock) as engine:
        handle = await late.start("l2")
        await wait_parked(engine, handle.run_id)
        idle = clock.sleepers
        getter = asyncio.ensure_future(handle.get("answer", timeout=30))
        await asyncio.wait_for(clock.wait_for_sleepers(idle + 1), LIMIT)
        clock.advance(29)
        await asyncio.sleep(0)
        assert not getter.done()
        clock.advance(1)
        await asyncio.wait({getter}, timeout=LIMIT)
        error = getter.exception()
        assert isinstance(error, TimeoutError)
        assert handle.run_id in str(error)
        assert "answer" in str(error)
        with pytest.raises(TimeoutError):
            await handle.get("answer", timeout=0)


async def test_get_after_a_restart(make_objects: Factory, clock: MockClock) -> None:
    async with make_engine(make_objects, clock) as engine:
        handle = await progress.start("p3")
        await wait_parked(engine, handle.run_id)
    async with make_engine(make_objects, clock) as engine:
        again = engine.handle(handle.run_id)
        assert await again.get("progress") == {"done": 1}
        await engine.signal("p3:a")
        await engine.signal("p3:b")
        assert await result(again) == "p3"
        assert await again.get("progress") == {"done": 2}


async def test_publish_only_in_a_workflow(make_objects: Factory, clock: MockClock) -> None:
    with pytest.raises(NotInWorkflow, match=r"durable\.publish"):
        await durable.publish("k", 1)
    async with make_engine(make_objects, clock) as engine:
        handle = await late.start("l3")
        with pytest.raises(InvalidArgument, match="key"):
            await handle.get("")
        with pytest.raises(InvalidArgument, match="timeout"):
            await handle.get("answer", timeout=-1)
        await wait_parked(engine, handle.run_id)


@durable.workflow
async def publish_while_sleeping(n: int) -> None:
    await asyncio.gather(*(durable.publish(f"k{i}", i) for i in range(n)), durable.sleep(60))


async def test_a_gathered_publish_lands_before_the_run_suspends(
    make_objects: Factory, clock: MockClock
) -> None:
    async with make_engine(make_objects, clock):
        handle = await publish_while_sleeping.start(20)
        waiting = await asyncio.wait_for(handle.waiting(), LIMIT)
        assert waiting is not None
        assert waiting.signal_key is None  # parked on the sleep
        # Every publish finished in the first delivery: none waits for the replay.
        assert [await handle.get(f"k{i}", timeout=0) for i in range(20)] == list(range(20))


# --------------------------------------------------------------------- fork


@durable.step
async def count(name: str, value: int) -> int:
    calls[name] += 1
    return value + 1


@durable.workflow
async def pipeline(start: int) -> list[int]:
    a = await count("a", start)
    b = await count("b", a)
    await durable.wait_for_signal(f"go:{durable.run_id()}")
    c = await count("c", b)
    return [a, b, c]


async def finish(engine: durable.Engine, handle: durable.WorkflowHandle[list[int]]) -> list[int]:
    await wait_parked(engine, handle.run_id)
    await engine.signal(f"go:{handle.run_id}")
    value: list[int] = await result(handle)
    return value


async def test_fork_an_active_run_reuses_the_steps_before_n(
    make_objects: Factory, clock: MockClock
) -> None:
    async with make_engine(make_objects, clock) as engine:
        source = await pipeline.start(10)
        await wait_parked(engine, source.run_id)
        assert calls == {"a": 1, "b": 1}
        forked = await engine.fork(source.run_id, from_step=2, new_run_id="fork-2")
        assert forked.run_id == "fork-2"
        assert await finish(engine, forked) == [11, 12, 13]
        assert calls == {"a": 1, "b": 1, "c": 1}  # a and b came from the journal
        again = await engine.fork(source.run_id, from_step=1)
        assert again.run_id != source.run_id
        assert await finish(engine, again) == [11, 12, 13]
        assert calls == {"a": 1, "b": 2, "c": 2}  # b on runs again
        assert await finish(engine, source) == [11, 12, 13]  # the source is untouched


async def test_fork_a_terminated_fork_and_after_a_restart(
    make_objects: Factory, clock: MockClock
) -> None:
    async with make_engine(make_objects, clock) as engine:
        source = await pipeline.start(0)
        await wait_parked(engine, source.run_id)
    async with make_engine(make_objects, clock) as engine:
        first = await engine.fork(source.run_id, from_step=2, new_run_id="f1")
        assert await finish(engine, first) == [1, 2, 3]
        # f1 has terminated (a fork keeps its arguments): fork it again.
        second = await engine.fork("f1", from_step=2, new_run_id="f2")
        assert await finish(engine, second) == [1, 2, 3]
        assert calls == {"a": 1, "b": 1, "c": 2}
        # Past the wait, the copied wait names f1's key: f3 differs there.
        third = await engine.fork("f1", from_step=4, new_run_id="f3")
        with pytest.raises(durable.NonDeterminismError, match="go:f1"):
            await result(third)


async def test_fork_refuses_what_it_cannot_copy(make_objects: Factory, clock: MockClock) -> None:
    async with make_engine(make_objects, clock) as engine:
        source = await pipeline.start(1)
        await wait_parked(engine, source.run_id)
        with pytest.raises(RunNotFound, match=r"engine\.fork.*no-such-run"):
            await engine.fork("no-such-run", from_step=0)
        for bad in (3, -1, True, "1"):
            with pytest.raises(InvalidArgument, match=rf"{source.run_id}.*from 0 to 2"):
                await engine.fork(source.run_id, from_step=bad)  # type: ignore[arg-type]
        with pytest.raises(InvalidArgument, match="exists"):
            await engine.fork(source.run_id, from_step=1, new_run_id=source.run_id)
        forked = await engine.fork(source.run_id, from_step=0, new_run_id="fork-0")
        assert await finish(engine, forked) == [2, 3, 4]
        assert calls == {"a": 2, "b": 2, "c": 1}
