"""``@step`` (issue point 4): retries with backoff on the engine's clock,
``retry_on``, timeouts, ``at_most_once``, plain calls."""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

import pytest
from decorator_helpers import (
    LIMIT,
    Factory,
    abort_workflows,
    failure_type,
    journal_names,
    make_engine,
    result,
)

import durable
from durable.decorators.journal import START, STEP
from durable.errors import CodecError, StepMaybeExecutedError
from durable.store.clock import MockClock

calls: Counter[str] = Counter()
times: list[int] = []
started: dict[int, asyncio.Event] = {}
cancelled: list[str] = []
CLOCK: list[MockClock] = []


@pytest.fixture(autouse=True)
def _fresh(clock: MockClock) -> None:
    calls.clear()
    times.clear()
    started.clear()
    cancelled.clear()
    CLOCK[:] = [clock]


def attempt_started(n: int) -> asyncio.Event:
    return started.setdefault(n, asyncio.Event())


@durable.step(max_attempts=3, backoff=durable.Backoff(initial=10.0, factor=2.0, max=60.0))
async def flaky(succeed_on: int) -> str:
    calls["flaky"] += 1
    times.append(CLOCK[0].now_ms())
    attempt_started(calls["flaky"]).set()
    if calls["flaky"] < succeed_on:
        raise ConnectionError(f"attempt {calls['flaky']} failed")
    return f"ok after {calls['flaky']}"


@durable.workflow
async def retrying(succeed_on: int) -> str:
    try:
        return await flaky(succeed_on)
    except ConnectionError as e:
        return f"gave up: {e}"


@durable.step(max_attempts=5, backoff=durable.Backoff(initial=0.0), retry_on=(TimeoutError,))
async def picky() -> None:
    calls["picky"] += 1
    raise KeyError("not retryable")


@durable.workflow
async def non_retryable() -> str:
    try:
        await picky()
    except KeyError as e:
        return f"failed once: {e}"
    return "no error"


@durable.step(timeout=30.0)
async def hangs() -> None:
    calls["hangs"] += 1
    attempt_started(1).set()
    try:
        await asyncio.Event().wait()
    except asyncio.CancelledError:
        cancelled.append("hangs")
        raise


@durable.workflow
async def timing_out() -> str:
    try:
        await hangs()
    except TimeoutError as e:
        return f"timed out: {e}"
    return "no timeout"


@durable.step(at_most_once=True)
async def charge_card(amount: int) -> str:
    calls["charge"] += 1
    attempt_started(calls["charge"]).set()
    await asyncio.Event().wait()  # the process dies meanwhile
    return "charged"


@durable.workflow
async def checkout(amount: int) -> str:
    try:
        return await charge_card(amount)
    except StepMaybeExecutedError as e:
        return f"check the card: {e.position} {e.name}"


@durable.step(at_most_once=True)
async def once(x: int) -> int:
    calls["once"] += 1
    return x * 2


@durable.step
async def outer(x: int) -> int:
    calls["outer"] += 1
    return await once(x) + 1  # inside a step: a plain call


@durable.workflow
async def nested(x: int) -> int:
    return await outer(x) + await once(x)


@durable.step
async def returns_a_set() -> Any:
    return {1, 2}


@durable.workflow
async def strict() -> str:
    try:
        await returns_a_set()
    except CodecError as e:
        return "refused: " + str(e)
    return "accepted"


async def test_retries_wait_their_backoff_on_the_engine_clock(
    make_objects: Factory, clock: MockClock
) -> None:
    async with make_engine(make_objects, clock):
        handle = await retrying.start(3)
        for n, wait in ((1, 10.0), (2, 20.0)):
            await asyncio.wait_for(attempt_started(n).wait(), LIMIT)
            # The backoff sleep is registered once the attempt has failed.
            clock.advance(wait - 0.001)
            await asyncio.sleep(0)
            assert not attempt_started(n + 1).is_set()
            clock.advance(0.001)
        assert await result(handle) == "ok after 3"
    t0 = times[0]
    assert [t - t0 for t in times] == [0, 10_000, 30_000]


async def test_the_last_error_stands_after_max_attempts(
    make_objects: Factory, clock: MockClock
) -> None:
    async with make_engine(make_objects, clock):
        handle = await retrying.start(99)
        for n, wait in ((1, 10.0), (2, 20.0)):
            await asyncio.wait_for(attempt_started(n).wait(), LIMIT)
            clock.advance(wait)
        assert await result(handle) == "gave up: attempt 3 failed"
    assert calls["flaky"] == 3


async def test_errors_not_in_retry_on_fail_at_once(make_objects: Factory, clock: MockClock) -> None:
    async with make_engine(make_objects, clock):
        assert await result(await non_retryable.start()) == "failed once: 'not retryable'"
    assert calls["picky"] == 1


async def test_an_attempt_over_its_timeout_is_cancelled(
    make_objects: Factory, clock: MockClock
) -> None:
    async with make_engine(make_objects, clock):
        handle = await timing_out.start()
        await asyncio.wait_for(attempt_started(1).wait(), LIMIT)
        clock.advance(29.999)
        await asyncio.sleep(0)
        assert cancelled == []
        clock.advance(0.001)
        out = await result(handle)
    assert out.startswith("timed out: ")
    assert "did not finish within 30.0 s" in out
    assert cancelled == ["hangs"]


async def test_at_most_once_never_runs_again_after_a_crash(
    make_objects: Factory, clock: MockClock
) -> None:
    async with make_engine(make_objects, clock) as engine:
        handle = await checkout.start(100)
        await asyncio.wait_for(attempt_started(1).wait(), LIMIT)
        assert await journal_names(engine, handle.run_id) == [(0, START, charge_card.name)]
        await abort_workflows(engine)  # the process dies mid-step
    async with make_engine(make_objects, clock) as engine:
        out = await result(engine.handle(handle.run_id))
    assert out == f"check the card: 0 {charge_card.name}"
    assert calls["charge"] == 1


async def test_steps_inside_a_step_are_plain_calls(make_objects: Factory, clock: MockClock) -> None:
    async with make_engine(make_objects, clock) as engine:
        handle = await nested.start(5)
        assert await result(handle) == 21
        # `outer` and the second `once`: the `once` inside `outer` took no position.
        assert await journal_names(engine, handle.run_id) == [
            (0, STEP, outer.name),
            (1, STEP, once.name),
        ]


async def test_a_result_the_codec_refuses_is_the_steps_error(
    make_objects: Factory, clock: MockClock
) -> None:
    async with make_engine(make_objects, clock, codec="msgpack"):
        out = await result(await strict.start())
    assert out.startswith("refused: ")
    assert "set" in out


async def test_a_workflow_failure_re_raises_through_the_handle(
    make_objects: Factory, clock: MockClock
) -> None:
    @durable.workflow
    async def breaks() -> None:
        await once(1)
        raise LookupError("no such order")

    async with make_engine(make_objects, clock):
        with pytest.raises(LookupError, match="no such order"):
            await result(await breaks.start())
    assert failure_type(LookupError()) == "LookupError"


async def test_outside_a_workflow_a_step_is_its_function() -> None:
    assert await once(4) == 8
    with pytest.raises(ConnectionError):
        await flaky(99)  # no retries, no engine needed
    assert calls == {"once": 1, "flaky": 1}
