"""`call_later` (a timer on any `Clock`) and `wait_or_sleep` (a wait for a
future, a timeout and a stop, with no task made)."""

from __future__ import annotations

import asyncio

import pytest

from durable.store.clock import MockClock, SystemClock, call_later
from durable.store.queue.wakeups import wait_or_sleep

LIMIT = 10.0


class OwnClock:
    """A `Clock` of the user's: only ``now_ms`` and ``sleep``."""

    def __init__(self) -> None:
        self.mock = MockClock()

    def now_ms(self) -> int:
        return self.mock.now_ms()

    async def sleep(self, seconds: float) -> None:
        await self.mock.sleep(seconds)


async def test_a_system_clock_timer_fires_once_and_a_cancelled_one_never() -> None:
    fired = asyncio.Event()
    calls: list[str] = []
    call_later(SystemClock(), 0.001, lambda: (calls.append("a"), fired.set()))
    cancel = call_later(SystemClock(), 0.001, lambda: calls.append("b"))
    cancel()
    await asyncio.wait_for(fired.wait(), LIMIT)
    late = asyncio.Event()
    call_later(SystemClock(), 0.002, late.set)  # after the cancelled one's time
    await asyncio.wait_for(late.wait(), LIMIT)
    assert calls == ["a"]


async def test_a_mock_clock_timer_is_a_sleeper_until_the_clock_passes_it() -> None:
    clock = MockClock()
    calls: list[int] = []
    call_later(clock, 5, lambda: calls.append(5))
    cancel = call_later(clock, 3, lambda: calls.append(3))
    assert clock.sleepers == 2
    assert clock.next_deadline() == clock.now_ms() + 3000
    cancel()
    assert clock.sleepers == 1
    clock.advance(4.999)
    await asyncio.sleep(0)
    assert calls == []
    clock.advance(0.001)
    await asyncio.sleep(0)
    assert calls == [5]
    assert clock.sleepers == 0
    call_later(clock, 0, lambda: calls.append(0))  # due now: on the next turn
    await asyncio.sleep(0)
    assert calls == [5, 0]


async def test_any_other_clock_gets_a_task_that_sleeps_on_it() -> None:
    clock = OwnClock()
    calls: list[int] = []
    call_later(clock, 2, lambda: calls.append(2))
    cancel = call_later(clock, 1, lambda: calls.append(1))
    await clock.mock.wait_for_sleepers(2)
    cancel()
    await asyncio.sleep(0)
    clock.mock.advance(2)
    for _ in range(3):
        await asyncio.sleep(0)
    assert calls == [2]


async def test_wait_or_sleep_makes_no_task_and_wakes_on_the_future() -> None:
    loop = asyncio.get_running_loop()
    fut: asyncio.Future[None] = loop.create_future()
    clock = MockClock()
    waiting = asyncio.ensure_future(wait_or_sleep(clock, fut, 10))
    await asyncio.sleep(0)
    tasks = len(asyncio.all_tasks())
    assert clock.sleepers == 1  # the timeout: a timer, not a task
    fut.set_result(None)
    assert await waiting is True
    assert len(asyncio.all_tasks()) == tasks - 1  # only the waiting task itself was one
    assert clock.sleepers == 0  # its timer withdrawn


async def test_wait_or_sleep_times_out_and_until_ends_it_too() -> None:
    loop = asyncio.get_running_loop()
    clock = MockClock()
    fut: asyncio.Future[None] = loop.create_future()
    waiting = asyncio.ensure_future(wait_or_sleep(clock, fut, 1))
    await clock.wait_for_sleepers(1)
    clock.advance(1)
    assert await waiting is False
    stop: asyncio.Future[None] = loop.create_future()
    waiting = asyncio.ensure_future(wait_or_sleep(clock, fut, 60, until=stop))
    await asyncio.sleep(0)
    stop.set_result(None)
    assert await waiting is False
    assert not fut.done()  # neither future is touched
    assert await wait_or_sleep(clock, fut, 0) is False
    fut.set_result(None)
    assert await wait_or_sleep(clock, fut, 0) is True


async def test_wait_or_sleep_without_limit_raises_the_futures_error() -> None:
    loop = asyncio.get_running_loop()
    fut: asyncio.Future[None] = loop.create_future()
    waiting = asyncio.ensure_future(wait_or_sleep(MockClock(), fut, None))
    await asyncio.sleep(0)
    fut.set_exception(RuntimeError("the store stopped"))
    with pytest.raises(RuntimeError, match="the store stopped"):
        await waiting


async def test_a_cancelled_waiter_leaves_the_future_alone() -> None:
    loop = asyncio.get_running_loop()
    clock = MockClock()
    fut: asyncio.Future[None] = loop.create_future()
    waiting = asyncio.ensure_future(wait_or_sleep(clock, fut, 60))
    await asyncio.sleep(0)
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    assert not fut.done()
    assert clock.sleepers == 0
