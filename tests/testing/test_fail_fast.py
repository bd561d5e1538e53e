"""A run waiting on a MockClock nothing advances: ``result()`` fails fast."""

from __future__ import annotations

import asyncio
import time

import pytest
import replay_flows as flows

from durable import Engine
from durable.errors import ClockNotAdvanced
from durable.store.clock import MockClock
from durable.store.objects.memory import MemoryObjectStore

STALL = 0.3


async def test_result_on_a_sleeping_run_fails_fast_saying_to_advance_the_clock() -> None:
    clock = MockClock(stall_after=STALL)
    async with Engine(MemoryObjectStore(), clock=clock):
        handle = await flows.billing.start(1)
        t0 = time.perf_counter()
        with pytest.raises(ClockNotAdvanced) as caught:
            await asyncio.wait_for(handle.result(), 10)
        assert time.perf_counter() - t0 < 5
        message = str(caught.value)
        assert handle.run_id in message
        assert "30 days ahead" in message
        assert "clock.advance(seconds)" in message
        assert "run_until_settled(handle)" in message
        assert isinstance(caught.value, TimeoutError)


async def test_a_clock_advanced_meanwhile_is_not_a_stall() -> None:
    clock = MockClock(stall_after=STALL)
    async with Engine(MemoryObjectStore(), clock=clock):
        handle = await flows.billing.start(2)

        async def advance() -> None:
            await handle.waiting()
            clock.advance(30 * flows.DAY)

        mover = asyncio.create_task(advance())
        assert await asyncio.wait_for(handle.result(), 10) == "charged 200"
        await mover


async def test_a_wait_no_time_can_end_is_no_stall_of_the_clock() -> None:
    clock = MockClock(stall_after=STALL)
    async with Engine(MemoryObjectStore(), clock=clock):
        handle = await flows.approval.start()
        await handle.waiting()  # on its sleep
        clock.advance(flows.DAY)
        # Only the bound of the test ends it: a plain timeout, not ClockNotAdvanced.
        with pytest.raises(TimeoutError) as caught:
            await asyncio.wait_for(handle.result(), 4 * STALL)
        assert not isinstance(caught.value, ClockNotAdvanced)


async def test_stall_after_none_waits_without_the_check() -> None:
    clock = MockClock(stall_after=None)
    async with Engine(MemoryObjectStore(), clock=clock):
        handle = await flows.billing.start(3)
        with pytest.raises(TimeoutError) as caught:
            await asyncio.wait_for(handle.result(), 4 * STALL)
        assert not isinstance(caught.value, ClockNotAdvanced)


def test_stall_after_must_be_positive() -> None:
    with pytest.raises(ValueError, match="stall_after"):
        MockClock(stall_after=0)
