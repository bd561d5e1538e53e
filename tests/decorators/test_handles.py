"""Handles (issue point 2): start, options, result, status, cancel,
``engine.handle`` after a restart, ``await wf(x)``."""

from __future__ import annotations

import asyncio
import datetime as dt
from collections import Counter

import pytest
from decorator_helpers import LIMIT, Factory, make_engine, promote_due, result, wait_parked

import durable
from durable import WorkflowState
from durable.errors import InputMismatch, NoEngine, RunCancelled, RunNotFound
from durable.store.clock import MockClock

calls: Counter[str] = Counter()
events: dict[str, asyncio.Event] = {}


@pytest.fixture(autouse=True)
def _fresh() -> None:
    calls.clear()
    events.clear()


def event(name: str) -> asyncio.Event:
    return events.setdefault(name, asyncio.Event())


class OrderError(Exception):
    """A workflow's own exception type."""

    def __init__(self, order: str, reason: str) -> None:
        super().__init__(f"order {order}: {reason}")
        self.order = order
        self.reason = reason

    def __reduce__(self) -> tuple[object, ...]:
        return (type(self), (self.order, self.reason))


@durable.step
async def price(item: str) -> int:
    calls[item] += 1
    return len(item) * 10


@durable.workflow
async def order(item: str, quantity: int = 1) -> dict[str, int]:
    return {item: await price(item) * quantity}


@durable.workflow
async def failing(order_id: str) -> None:
    await price(order_id)
    raise OrderError(order_id, "out of stock")


@durable.workflow
async def waiting(key: str) -> object:
    return await durable.wait_for_signal(key)


@durable.step
async def blocking() -> None:
    calls["blocking"] += 1
    event("blocking").set()
    try:
        await asyncio.Event().wait()
    except asyncio.CancelledError:
        calls["blocking-cancelled"] += 1
        raise


@durable.workflow
async def stuck() -> None:
    await blocking()


async def test_start_returns_a_handle_with_the_result(
    make_objects: Factory, clock: MockClock
) -> None:
    async with make_engine(make_objects, clock):
        handle = await order.start("book", quantity=3)
        assert len(handle.run_id) == 26  # a generated ULID
        assert await result(handle) == {"book": 120}
        status = await handle.status()
        assert status is not None
        assert status.state is WorkflowState.SUCCEEDED


async def test_awaiting_a_workflow_outside_one_starts_it_and_waits(
    make_objects: Factory, clock: MockClock
) -> None:
    async with make_engine(make_objects, clock):
        assert await asyncio.wait_for(order("pen"), LIMIT) == {"pen": 30}


async def test_a_run_id_names_one_run(make_objects: Factory, clock: MockClock) -> None:
    async with make_engine(make_objects, clock):
        first = await order.options(run_id="order-42").start("lamp")
        assert first.run_id == "order-42"
        assert await result(first) == {"lamp": 40}
        # Started again, terminated or not: the same run; nothing runs again.
        again = await order.options(run_id="order-42").start("lamp")
        assert await result(again) == {"lamp": 40}
        assert calls == {"lamp": 1}
        with pytest.raises(InputMismatch):
            await order.options(run_id="order-42").start("desk")


async def test_options_are_checked_when_given() -> None:
    with pytest.raises(ValueError, match="bad id!"):
        order.options(run_id="bad id!")
    with pytest.raises(ValueError, match="priority"):
        order.options(priority=-1)
    with pytest.raises(ValueError, match=r"workflow\.x"):
        order.options(headers={"workflow.x": "reserved"})
    with pytest.raises(NoEngine, match="order"):
        await order.start("x")


async def test_run_at_delays_the_start(make_objects: Factory, clock: MockClock) -> None:
    async with make_engine(make_objects, clock) as engine:
        at = dt.datetime.fromtimestamp(clock.now_ms() / 1000 + 60, tz=dt.UTC)
        handle = await order.options(run_at=at, priority=5, headers={"tenant": "t1"}).start("cup")
        status = await handle.status()
        assert status is not None
        assert status.state is WorkflowState.PENDING
        assert promote_due(engine) == 0
        clock.advance(60)
        assert await result(handle) == {"cup": 30}
        outcome = await engine.for_run(handle.run_id).workflows.default.outcome(handle.run_id)
        assert outcome is not None
        assert outcome.headers == {"tenant": "t1"}


async def test_the_workflows_exception_is_raised_again(
    make_objects: Factory, clock: MockClock
) -> None:
    async with make_engine(make_objects, clock):
        handle = await failing.start("o-7")
        with pytest.raises(OrderError) as caught:
            await result(handle)
        assert (caught.value.order, caught.value.reason) == ("o-7", "out of stock")
        status = await handle.status()
        assert status is not None
        assert status.state is WorkflowState.FAILED
        assert (status.error_type, status.error) == ("OrderError", "order o-7: out of stock")


async def test_result_times_out_on_the_engine_clock(
    make_objects: Factory, clock: MockClock
) -> None:
    async with make_engine(make_objects, clock) as engine:
        handle = await waiting.start("never")
        await wait_parked(engine, handle.run_id)
        idle = clock.sleepers
        waiter = asyncio.ensure_future(handle.result(timeout=5))
        await asyncio.wait_for(clock.wait_for_sleepers(idle + 1), LIMIT)
        clock.advance(5)
        await asyncio.wait({waiter}, timeout=LIMIT)
        assert isinstance(waiter.exception(), TimeoutError)


async def test_cancel_a_waiting_run(make_objects: Factory, clock: MockClock) -> None:
    async with make_engine(make_objects, clock) as engine:
        handle = await waiting.start("k-cancel")
        await wait_parked(engine, handle.run_id)
        assert await handle.cancel()
        with pytest.raises(RunCancelled) as caught:
            await result(handle)
        assert caught.value.run_id == handle.run_id
        assert not await handle.cancel()  # already terminated


async def test_cancel_a_running_delivery_cancels_its_step(
    make_objects: Factory, clock: MockClock
) -> None:
    async with make_engine(make_objects, clock):
        handle = await stuck.start()
        await asyncio.wait_for(event("blocking").wait(), LIMIT)
        status = await handle.status()
        assert status is not None
        assert status.state is WorkflowState.RUNNING
        assert await handle.cancel()
        status = await handle.status()
        assert status is not None
        assert status.cancel_requested or status.state is WorkflowState.CANCELLED
        with pytest.raises(RunCancelled):
            await result(handle)
    assert calls == {"blocking": 1, "blocking-cancelled": 1}


async def test_handles_are_rebuilt_after_a_restart(make_objects: Factory, clock: MockClock) -> None:
    async with make_engine(make_objects, clock) as engine:
        done = await order.start("mug")
        await result(done)
        pending = await waiting.start("k-restart")
        await wait_parked(engine, pending.run_id)
    async with make_engine(make_objects, clock) as engine:
        assert await result(engine.handle(done.run_id)) == {"mug": 30}
        await engine.signal("k-restart", ["late", 1])
        assert await result(engine.handle(pending.run_id)) == ["late", 1]
        unknown = engine.handle("no-such-run")
        assert await unknown.status() is None
        with pytest.raises(RunNotFound, match=r"no-such-run.*unknown"):
            await unknown.result()
        with pytest.raises(LookupError):  # RunNotFound is a LookupError too
            await unknown.get("progress")
    assert calls == {"mug": 1}
