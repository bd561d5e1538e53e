"""`run_until_settled`: a run's timers skipped on the MockClock, at once."""

from __future__ import annotations

import time

import pytest
import replay_flows as flows

from durable import Engine
from durable.errors import InvalidArgument
from durable.store.clock import MockClock, SystemClock
from durable.store.objects.memory import MemoryObjectStore
from durable.testing import run_until_settled


async def test_a_30_day_sleep_finishes_in_well_under_a_second(
    durable_engine: Engine, durable_clock: MockClock
) -> None:
    began_ms = durable_clock.now_ms()
    handle = await flows.billing.start(7)
    t0 = time.perf_counter()
    settled = await run_until_settled(handle)
    assert await handle.result() == "charged 700"
    elapsed = time.perf_counter() - t0
    assert elapsed < 1.0, elapsed
    assert settled.ended
    assert settled.waiting is None
    assert settled.skipped == 30 * flows.DAY
    assert durable_clock.now_ms() - began_ms == 30 * flows.DAY * 1000


async def test_every_timer_of_a_long_run_is_skipped(durable_engine: Engine) -> None:
    handle = await flows.monthly.start(12)
    settled = await run_until_settled(handle)
    assert settled.ended
    assert settled.skipped == 12 * 30 * flows.DAY
    assert await handle.result() == sum(m * 100 for m in range(12))


async def test_a_child_runs_timers_are_skipped_through_its_parent(
    durable_local_engine: Engine,
) -> None:
    handle = await flows.parent.start()
    settled = await run_until_settled(handle)
    assert settled.ended
    assert settled.skipped == 8 * flows.DAY
    assert await handle.result() == "parent saw child done"


async def test_a_signal_wait_without_timeout_settles_as_waiting(
    durable_engine: Engine, durable_clock: MockClock
) -> None:
    handle = await flows.approval.start()
    settled = await run_until_settled(handle)
    assert not settled.ended
    assert settled.waiting is not None
    assert settled.waiting.signal_key == "approve"
    assert settled.skipped == flows.DAY  # the sleep before it, not the wait's ten years
    await durable_engine.signal("approve", "yes")
    again = await run_until_settled(handle)
    assert again.ended
    assert again.skipped == 0
    assert await handle.result() == "yes"


async def test_a_signal_timeout_is_a_time_and_is_skipped(durable_engine: Engine) -> None:
    handle = await flows.deadline.start()
    settled = await run_until_settled(handle)
    assert settled.ended
    assert settled.skipped == 3600
    assert await handle.result() is None


async def test_an_engine_on_the_wall_clock_is_refused() -> None:
    async with Engine(MemoryObjectStore(), clock=SystemClock()) as engine:
        handle = engine.handle("some-run")
        with pytest.raises(InvalidArgument, match="MockClock"):
            await run_until_settled(handle)
