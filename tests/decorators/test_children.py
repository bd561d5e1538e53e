"""Child workflows (issue point 6): a workflow called inside a workflow."""

from __future__ import annotations

from collections import Counter

import pytest
from decorator_helpers import Factory, journal_of, make_engine, result, wait_parked

import durable
from durable import WorkflowState
from durable.decorators.children import (
    HEADER_PARENT,
    HEADER_POSITION,
    child_key,
    child_run_id,
)
from durable.decorators.journal import CHILD
from durable.errors import RunCancelled
from durable.store.clock import MockClock

calls: Counter[str] = Counter()


@pytest.fixture(autouse=True)
def _fresh() -> None:
    calls.clear()


@durable.step
async def double(x: int) -> int:
    calls[f"double {x}"] += 1
    return 2 * x


@durable.workflow
async def child(x: int) -> int:
    calls[f"child {x}"] += 1
    return await double(x)


@durable.workflow
async def parent(x: int) -> int:
    first = await double(x)
    second = await child(x + 1)
    await durable.sleep(5)  # the next delivery replays the child from the journal
    return first + second


@durable.workflow
async def awaits_signal(key: str) -> str:
    value = await durable.wait_for_signal(key)
    return f"{key}={value}"


@durable.workflow
async def fan_out(n: int) -> list[str]:
    import asyncio

    return list(await asyncio.gather(*(awaits_signal(f"item-{i}") for i in range(n))))


class Boom(Exception):
    pass


@durable.workflow
async def explodes() -> None:
    raise Boom("child failed")


@durable.workflow
async def catches() -> str:
    try:
        await explodes()
    except Boom as e:
        return f"caught {type(e).__name__}: {e}"
    return "no error"


@durable.workflow
async def grandparent() -> str:
    return await middle()


@durable.workflow
async def middle() -> str:
    return await awaits_signal("deep")


async def test_a_child_runs_as_its_own_run_and_is_replayed(
    make_objects: Factory, clock: MockClock
) -> None:
    async with make_engine(make_objects, clock) as engine:
        handle = await parent.options(run_id="p1").start(10)
        await wait_parked(engine, handle.run_id, step=2)  # asleep after the child
        clock.advance(5)
        assert await result(handle) == 20 + 22
        kid = child_run_id("p1", 1)
        assert kid == engine.co_located("p1-c1", "p1")
        assert await result(engine.handle(kid)) == 22
        outcome = await engine.for_run(kid).workflows.default.outcome(kid)
        assert outcome is not None
        assert outcome.headers == {HEADER_PARENT: "p1", HEADER_POSITION: "1"}
        entry = (await journal_of(engine, "p1")).get(1)
        assert entry is not None
        assert entry.kind == CHILD
        assert entry.key == kid
    assert calls == {"double 10": 1, "child 11": 1, "double 11": 1}


async def test_gathered_children_all_start_in_one_delivery(
    make_objects: Factory, clock: MockClock
) -> None:
    async with make_engine(make_objects, clock) as engine:
        handle = await fan_out.options(run_id="fan").start(3)
        await wait_parked(engine, handle.run_id)
        kids = [child_run_id("fan", i) for i in range(3)]
        for kid in kids:  # every child started, though the parent waits on the first
            await wait_parked(engine, kid)
        for i in (2, 0, 1):  # in any order: early ones are buffered
            await engine.signal(f"item-{i}", i * 10)
        assert await result(handle) == ["item-0=0", "item-1=10", "item-2=20"]


async def test_a_childs_exception_is_raised_in_the_parent(
    make_objects: Factory, clock: MockClock
) -> None:
    async with make_engine(make_objects, clock):
        assert await result(await catches.start()) == "caught Boom: child failed"


async def test_cancelling_a_parent_cancels_its_children(
    make_objects: Factory, clock: MockClock
) -> None:
    async with make_engine(make_objects, clock) as engine:
        handle = await grandparent.options(run_id="gp").start()
        grandchild = child_run_id(child_run_id("gp", 0), 0)
        await wait_parked(engine, grandchild)
        assert await handle.cancel()
        for run_id in ("gp", child_run_id("gp", 0), grandchild):
            with pytest.raises(RunCancelled):
                await result(engine.handle(run_id))
            status = await engine.handle(run_id).status()
            assert status is not None
            assert status.state is WorkflowState.CANCELLED
        # No notification is left waiting for a parent that is gone.
        kv = engine.for_run(grandchild).queue.kv  # co-located with its parent
        assert kv.get(b"workflow/signal-buf/" + child_key(grandchild).encode()) in (
            None,
            b"terminated",
        )


def test_child_ids_derive_from_parent_and_position() -> None:
    assert child_run_id("order-1", 3) == "order-1-c3"
    long_parent = "p" * 126
    long_id = child_run_id(long_parent, 12)
    assert len(long_id) <= 128
    assert long_id == child_run_id(long_parent, 12)
    assert long_id != child_run_id(long_parent, 13)
    assert long_id.startswith("c-")
