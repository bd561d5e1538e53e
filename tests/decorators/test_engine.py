"""The `Engine`: its store, the current engine, services, a graceful stop."""

from __future__ import annotations

import asyncio
from collections import Counter
from pathlib import Path

import pytest
from decorator_helpers import LIMIT, Factory, journal_names, make_engine, result

import durable
from durable import WorkflowState
from durable.decorators.current import current_engine
from durable.decorators.journal import STEP
from durable.errors import InvalidArgument, NoEngine
from durable.store.clock import MockClock

calls: Counter[str] = Counter()
events: dict[str, asyncio.Event] = {}


@pytest.fixture(autouse=True)
def _fresh() -> None:
    calls.clear()
    events.clear()


def event(name: str) -> asyncio.Event:
    return events.setdefault(name, asyncio.Event())


@durable.step
async def stage(n: int) -> int:
    calls[f"stage {n}"] += 1
    if n == 1:
        event("stage 1 running").set()
        await event("release").wait()
    return n


@durable.workflow
async def three_stages() -> list[int]:
    return [await stage(0), await stage(1), await stage(2)]


@durable.workflow
async def trivial() -> str:
    return "done"


class Recorder:
    """A service that records when it starts and stops, and what it saw."""

    def __init__(self, name: str, log: list[str]) -> None:
        self.name = name
        self.log = log

    async def start(self, engine: durable.Engine) -> None:
        assert engine.for_run(self.name).queue is not None  # the store is open
        self.log.append(f"start {self.name}")

    async def stop(self) -> None:
        self.log.append(f"stop {self.name}")


async def test_the_current_engine_is_set_inside_async_with(
    make_objects: Factory, clock: MockClock
) -> None:
    engine = make_engine(make_objects, clock)
    with pytest.raises(NoEngine, match=r"use `async with durable\.Engine"):
        current_engine()
    with pytest.raises(NoEngine):
        engine.queue  # noqa: B018
    async with engine:
        assert current_engine() is engine
        assert engine.running
        with pytest.raises(InvalidArgument, match="already running"):
            await engine.__aenter__()
    assert not engine.running
    with pytest.raises(NoEngine):
        current_engine()


async def test_services_start_after_the_store_opens_and_stop_before_it_closes(
    make_objects: Factory, clock: MockClock
) -> None:
    log: list[str] = []
    engine = make_engine(make_objects, clock)
    engine.add_service(Recorder("a", log))
    engine.add_service(Recorder("b", log))
    async with engine:
        assert log[-2:] == ["start a", "start b"]
        late = Recorder("late", log)
        engine.add_service(late)
        await engine.start_services()
        assert log[-1] == "start late"
    assert log[-3:] == ["stop late", "stop b", "stop a"]
    with pytest.raises(InvalidArgument):
        engine.add_service(object())  # type: ignore[arg-type]


async def test_engine_without_url_uses_a_local_durable_dir(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, clock: MockClock
) -> None:
    monkeypatch.chdir(tmp_path)
    async with durable.Engine(clock=clock):
        assert await result(await trivial.start()) == "done"
    assert (tmp_path / ".durable").is_dir()
    assert any((tmp_path / ".durable").iterdir())


async def test_stopping_lets_the_step_in_flight_finish_and_suspends_the_run(
    make_objects: Factory, clock: MockClock
) -> None:
    async with make_engine(make_objects, clock) as engine:
        handle = await three_stages.start()
        await asyncio.wait_for(event("stage 1 running").wait(), LIMIT)
        stopping = asyncio.ensure_future(engine.__aexit__(None, None, None))
        await asyncio.sleep(0)
        event("release").set()  # the step in flight finishes ...
        await asyncio.wait_for(stopping, LIMIT)
        # (the engine is closed: leave the `async with` without closing twice)
        engine_closed = engine
    assert not engine_closed.running
    async with make_engine(make_objects, clock, concurrency={"workflows": 0}) as engine:
        status = await engine.handle(handle.run_id).status()
        assert status is not None
        assert status.state is WorkflowState.PENDING
        assert status.steps == 2
        # ... and is journaled; stage 2 was left to the next process.
        assert await journal_names(engine, handle.run_id) == [
            (0, STEP, stage.name),
            (1, STEP, stage.name),
        ]
    async with make_engine(make_objects, clock) as engine:
        assert await result(engine.handle(handle.run_id)) == [0, 1, 2]
    assert calls == {"stage 0": 1, "stage 1": 1, "stage 2": 1}


def test_engine_options_are_checked() -> None:
    with pytest.raises(InvalidArgument, match="codec"):
        durable.Engine("memory://x", codec="json")  # type: ignore[arg-type]
    with pytest.raises(InvalidArgument, match="clock"):
        durable.Engine("memory://x", clock=object())  # type: ignore[arg-type]
    for empty in (b"", ""):  # a bad option, not a value the codec cannot encode
        with pytest.raises(InvalidArgument, match=r"signing_key is empty: pass a secret"):
            durable.Engine("memory://x", signing_key=empty)
    with pytest.raises(InvalidArgument, match=r"signing_key is a int; pass bytes or a str"):
        durable.Engine("memory://x", signing_key=42)  # type: ignore[arg-type]
    assert "stopped" in repr(durable.Engine("memory://x"))
