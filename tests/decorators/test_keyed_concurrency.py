"""Concurrency per key (issue 18 point 6): ``@workflow(concurrency_per_key=n)``
with ``.options(concurrency_key=...)``."""

from __future__ import annotations

import asyncio

import pytest
from decorator_helpers import LIMIT, Factory, make_engine, wait_parked

import durable
from durable.decorators.keyed_concurrency import slot_key
from durable.errors import DecoratorError
from durable.store.clock import MockClock

began: list[str] = []


@durable.step
async def begin(tag: str) -> None:
    began.append(tag)


@durable.workflow(name="keyed.single", concurrency_per_key=1)
async def single(tag: str) -> str:
    await begin(tag)
    return str(await durable.wait_for_signal(f"go-{tag}"))


@durable.workflow(name="keyed.pair", concurrency_per_key=2)
async def pair(tag: str) -> str:
    await begin(tag)
    return str(await durable.wait_for_signal(f"go-{tag}"))


@pytest.fixture(autouse=True)
def _fresh() -> None:
    began.clear()


async def test_one_key_saturated_does_not_hold_back_the_others(
    make_objects: Factory, clock: MockClock
) -> None:
    async with make_engine(make_objects, clock) as engine:
        a1 = await single.options(concurrency_key="tenant-a").start("a1")
        await wait_parked(engine, a1.run_id)
        a2 = await single.options(concurrency_key="tenant-a").start("a2")
        a3 = await single.options(concurrency_key="tenant-a").start("a3")
        b1 = await single.options(concurrency_key="tenant-b").start("b1")
        free = await single.start("free")  # no key: no limit
        for h in (b1, free):
            status = await wait_parked(engine, h.run_id)
            assert status.waiting is not None
            assert status.waiting.signal_key == ("go-b1" if h is b1 else "go-free")
        for h in (a2, a3):  # waiting for a slot, their function not run
            status = await wait_parked(engine, h.run_id)
            assert status.waiting is not None
            assert status.waiting.signal_key == slot_key(h.run_id)
        assert sorted(began) == ["a1", "b1", "free"]
        # a1 ends: the oldest waiter (a2) takes its slot, a3 still waits.
        await engine.signal("go-a1", "1")
        assert await asyncio.wait_for(a1.result(), LIMIT) == "1"
        status = await wait_parked(engine, a2.run_id, step=2)
        assert status.waiting is not None
        assert status.waiting.signal_key == "go-a2"
        assert began[-1] == "a2"
        assert "a3" not in began
        await engine.signal("go-a2", "2")
        assert await asyncio.wait_for(a2.result(), LIMIT) == "2"
        await wait_parked(engine, a3.run_id, step=2)
        await engine.signal("go-a3", "3")
        assert await asyncio.wait_for(a3.result(), LIMIT) == "3"
        for tag, h in (("b1", b1), ("free", free)):
            await engine.signal(f"go-{tag}", tag)
            assert await asyncio.wait_for(h.result(), LIMIT) == tag


async def test_n_runs_of_a_key_at_once_and_a_cancel_frees_a_slot(
    make_objects: Factory, clock: MockClock
) -> None:
    async with make_engine(make_objects, clock) as engine:
        hs = []
        for i in range(3):
            hs.append(await pair.options(concurrency_key="k").start(f"p{i}"))
            await wait_parked(engine, hs[-1].run_id)
        assert sorted(began) == ["p0", "p1"]
        assert (await hs[2].status()).waiting.signal_key == slot_key(hs[2].run_id)  # type: ignore[union-attr]
        assert await hs[0].cancel()
        status = await wait_parked(engine, hs[2].run_id, step=2)
        assert status.waiting is not None
        assert status.waiting.signal_key == "go-p2"
        assert sorted(began) == ["p0", "p1", "p2"]


def test_bad_concurrency_options_are_refused_naming_the_workflow() -> None:
    for bad in (0, -1, 1.5, True, "2"):
        with pytest.raises(DecoratorError, match=r"keyed\.bad.*concurrency_per_key"):

            @durable.workflow(name="keyed.bad", concurrency_per_key=bad)  # type: ignore[arg-type]
            async def bad_wf() -> None: ...

    @durable.workflow(name="keyed.unlimited")
    async def unlimited() -> None: ...

    with pytest.raises(DecoratorError, match=r"keyed\.unlimited.*concurrency_per_key"):
        unlimited.options(concurrency_key="t")
    with pytest.raises(DecoratorError, match=r"keyed\.single.*concurrency_key"):
        single.options(concurrency_key="")
