"""Deduplicated starts (issue 18 point 6): ``wf.options(dedup_key=...)``.

In the owner and from clients through the inbox (the owner decides); on
memory and local stores (``DURABLE_TEST_PARTITIONS=8``: the run lives in the
key's home partition)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator

import pytest
from decorator_helpers import LIMIT, Factory, make_engine, wait_parked

import durable
from durable.decorators.current import reset_engine, set_engine
from durable.errors import DuplicateStart, InvalidArgument
from durable.store.clock import MockClock


@durable.workflow(name="dedup.order")
async def order(item: str) -> str:
    answer = await durable.wait_for_signal(f"go:{durable.run_id()}")
    return f"{item}: {answer}"


@durable.workflow(name="dedup.other")
async def other(item: str) -> str:
    return item


@contextlib.contextmanager
def using(engine: durable.Engine) -> Iterator[None]:
    """Make ``engine`` the current engine for a while."""
    token = set_engine(engine)
    try:
        yield
    finally:
        reset_engine(token)


async def finish(engine: durable.Engine, handle: durable.WorkflowHandle[str]) -> str:
    await wait_parked(engine, handle.run_id)
    await engine.signal(f"go:{handle.run_id}", "ok")
    return await asyncio.wait_for(handle.result(), LIMIT)


async def test_a_key_starts_one_run_at_a_time(make_objects: Factory, clock: MockClock) -> None:
    async with make_engine(make_objects, clock) as engine:
        first = await order.options(dedup_key="cart-1").start("tea")
        with pytest.raises(DuplicateStart) as refused:
            await order.options(dedup_key="cart-1").start("coffee")
        assert refused.value.run_id == first.run_id
        assert refused.value.key == "cart-1"
        assert first.run_id in str(refused.value)
        assert "'dedup.order'" in str(refused.value)
        # Other keys, and the same key of another workflow, are free.
        second = await order.options(dedup_key="cart-2").start("milk")
        assert await asyncio.wait_for(other.options(dedup_key="cart-1").start("x"), LIMIT)
        # The same run id again is that run, not a duplicate.
        again = await order.options(dedup_key="cart-1", run_id=first.run_id).start("tea")
        assert again.run_id == first.run_id
        assert await finish(engine, first) == "tea: ok"
        # Ended: the key starts again.
        third = await order.options(dedup_key="cart-1").start("juice")
        assert third.run_id != first.run_id
        assert await finish(engine, third) == "juice: ok"
        assert await finish(engine, second) == "milk: ok"


async def test_a_cancelled_run_frees_its_key(make_objects: Factory, clock: MockClock) -> None:
    async with make_engine(make_objects, clock):
        first = await order.options(dedup_key="k").start("a")
        assert await first.cancel() is True
        # A delivery in flight ends at once, but after `cancel` returned.
        with pytest.raises(durable.RunCancelled):
            await asyncio.wait_for(first.result(), LIMIT)
        second = await order.options(dedup_key="k").start("b")
        assert second.run_id != first.run_id
        await second.cancel()


@pytest.mark.parametrize("size", [10, 100_000], ids=["inline", "blob"])
async def test_of_concurrent_starts_with_one_key_exactly_one_wins(
    make_objects: Factory, clock: MockClock, size: int
) -> None:
    """Large arguments go to blobs first: the starts interleave at those writes."""
    async with make_engine(make_objects, clock) as engine:
        tries = [order.options(dedup_key="race").start(f"{i}" * size) for i in range(5)]
        outcomes = await asyncio.gather(*tries, return_exceptions=True)
        won = [o for o in outcomes if isinstance(o, durable.WorkflowHandle)]
        lost = [o for o in outcomes if isinstance(o, DuplicateStart)]
        assert len(won) == 1
        assert len(lost) == 4
        assert {e.run_id for e in lost} == {won[0].run_id}
        await finish(engine, won[0])


async def test_clients_starts_are_decided_by_the_owner(
    make_objects: Factory, clock: MockClock
) -> None:
    async with (
        make_engine(make_objects, clock) as owner,
        make_engine(make_objects, clock, role="client") as one,
        make_engine(make_objects, clock, role="client") as two,
    ):
        assert not one.owner
        assert not two.owner

        async def start_from(client: durable.Engine, item: str) -> object:
            with using(client):  # a task of its own: its own current engine
                try:
                    return await order.options(dedup_key="shared").start(item)
                except DuplicateStart as e:
                    return e

        outcomes = await asyncio.gather(start_from(one, "a"), start_from(two, "b"))
        won = [o for o in outcomes if isinstance(o, durable.WorkflowHandle)]
        lost = [o for o in outcomes if isinstance(o, DuplicateStart)]
        assert len(won) == 1
        assert len(lost) == 1
        assert lost[0].run_id == won[0].run_id
        # Once the winner has ended, a client may start the key again.
        await finish(owner, owner.handle(won[0].run_id))
        with using(one):
            again = await order.options(dedup_key="shared").start("c")
            with pytest.raises(DuplicateStart):
                await order.options(dedup_key="shared").start("d")
        assert await finish(owner, owner.handle(again.run_id)) == "c: ok"


def test_a_bad_dedup_key_is_refused() -> None:
    for bad in ["", 3, "x" * 257]:
        with pytest.raises(InvalidArgument, match=r"dedup\.order"):
            order.options(dedup_key=bad)  # type: ignore[arg-type]
