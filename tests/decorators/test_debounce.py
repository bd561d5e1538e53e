"""Debounced starts (issue 18 point 6): ``wf.options(debounce=seconds, key=...)``.

On a `MockClock`, memory and local stores (``DURABLE_TEST_PARTITIONS=8``:
the runs live in the key's home partition)."""

from __future__ import annotations

import asyncio

import pytest
from decorator_helpers import LIMIT, Factory, make_engine
from deferral_helpers import drive, due_at

import durable
from durable.errors import InvalidArgument
from durable.store.clock import MockClock

#: (argument, ms since the test's start) of each beginning of `notify`'s body.
began: list[tuple[str, int]] = []
clocks: list[MockClock] = []
T0 = MockClock().now_ms()


@pytest.fixture(autouse=True)
def _fresh(clock: MockClock) -> None:
    began.clear()
    clocks[:] = [clock]


@durable.step(name="debounce.send")
async def send(text: str) -> str:
    return f"sent {text}"


@durable.workflow(name="debounce.notify")
async def notify(text: str) -> str:
    began.append((text, clocks[0].now_ms() - T0))
    return await send(text)


async def test_starts_within_the_window_collapse_into_the_last(
    make_objects: Factory, clock: MockClock
) -> None:
    async with make_engine(make_objects, clock) as engine:
        first = await notify.options(debounce=5, key="user-1").start("a")
        clock.advance(2)
        second = await notify.options(debounce=5, key="user-1").start("b")
        clock.advance(2)
        third = await notify.options(debounce=5, key="user-1").start("c")
        # One run, whatever handle: it begins 5 s after the last start.
        assert first.run_id == second.run_id == third.run_id
        other = await notify.options(debounce=5, key="user-2").start("x")
        assert other.run_id != first.run_id
        await drive(engine, clock, [first, other])
        assert await asyncio.wait_for(first.result(), LIMIT) == "sent c"
        assert await asyncio.wait_for(other.result(), LIMIT) == "sent x"
        assert sorted(began) == [("c", 9_000), ("x", 9_000)]
        # The run has begun: the next start with the key is a new run.
        later = await notify.options(debounce=1, key="user-1").start("d")
        assert later.run_id != first.run_id
        await drive(engine, clock, [later])
        assert await later.result() == "sent d"
        assert began[-1] == ("d", 10_000)


@durable.workflow(name="debounce.later")
async def later(text: str) -> str:
    await durable.sleep(60)  # resumed from its step 1 job: the last start's arguments still
    return await send(text)


async def test_the_last_arguments_hold_after_a_wait(
    make_objects: Factory, clock: MockClock
) -> None:
    async with make_engine(make_objects, clock) as engine:
        first = await later.options(debounce=5, key="k").start("a")
        clock.advance(1)
        await later.options(debounce=5, key="k").start("b")
        await drive(engine, clock, [first])
        assert await first.result() == "sent b"


async def test_without_a_key_the_workflow_is_one_window(
    make_objects: Factory, clock: MockClock
) -> None:
    async with make_engine(make_objects, clock) as engine:
        handles = [await notify.options(debounce=3).start(str(i)) for i in range(3)]
        assert len({h.run_id for h in handles}) == 1
        assert due_at(engine, handles[0].run_id) == T0 + 3_000
        await drive(engine, clock, handles[:1])
        assert began == [("2", 3_000)]


async def test_a_client_cannot_debounce(make_objects: Factory, clock: MockClock) -> None:
    async with (
        make_engine(make_objects, clock),
        make_engine(make_objects, clock, role="client"),
    ):
        with pytest.raises(InvalidArgument, match="owns the store"):
            await notify.options(debounce=1, key="k").start("a")


def test_bad_debounce_options_are_refused() -> None:
    for bad in [0, -1, "5", True]:
        with pytest.raises(InvalidArgument, match="debounce"):
            notify.options(debounce=bad)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgument, match="give debounce"):
        notify.options(key="k")
    for combined in [{"run_id": "r1"}, {"run_at": 5}, {"dedup_key": "d"}]:
        with pytest.raises(InvalidArgument, match="cannot be combined"):
            notify.options(debounce=1, **combined)  # type: ignore[arg-type]
