"""Concurrent durable waits: gathered waits park together, gathered steps
finish (once) before the delivery suspends, and one trigger wakes the run
for all of its waits."""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

import pytest
from decorator_helpers import LIMIT, Factory, journal_of, make_engine, result, wait_parked

import durable
from durable.decorators.children import child_run_id
from durable.decorators.journal import entry_key
from durable.decorators.parking import SETTLE_ITERATIONS
from durable.decorators.waiting import Waiting
from durable.engine import SignalOutcome, Terminated
from durable.errors import RunCancelled
from durable.store.clock import MockClock

calls: Counter[str] = Counter()
gates: dict[str, asyncio.Event] = {}


@pytest.fixture(autouse=True)
def _fresh() -> None:
    calls.clear()
    gates.clear()


def gate(name: str) -> asyncio.Event:
    return gates.setdefault(name, asyncio.Event())


@durable.step
async def note(name: str) -> str:
    calls[name] += 1
    return name


@durable.step
async def blocking(name: str) -> str:
    """Runs until the test opens the gate ``name``; ``{name} entered`` is set
    once it runs."""
    calls[name] += 1
    gate(f"{name} entered").set()
    try:
        await gate(name).wait()
    except asyncio.CancelledError:
        calls[f"{name} cancelled"] += 1
        raise
    return name


@durable.step
async def mark(name: str) -> str:
    """Opens gate ``name``."""
    calls[name] += 1
    gate(name).set()
    return name


async def nap_then_mark(seconds: float, name: str) -> str:
    await durable.sleep(seconds)
    return await mark(name)


@durable.workflow
async def wake_beside_a_step(seconds: float) -> list[Any]:
    return list(await asyncio.gather(nap_then_mark(seconds, "woke"), blocking("long")))


@durable.workflow
async def two_naps(first: float, second: float) -> str:
    await asyncio.gather(durable.sleep(first), durable.sleep(second))
    return await note("after naps")


@durable.workflow
async def nap_beside_a_step(seconds: float) -> list[Any]:
    return list(await asyncio.gather(durable.sleep(seconds), blocking("work")))


@durable.workflow
async def nap_or_signal(key: str, nap: float, limit: float) -> Any:
    _, answer = await asyncio.gather(
        durable.sleep(nap), durable.wait_for_signal(key, timeout=limit)
    )
    await note("after")
    return answer


@durable.workflow
async def two_signals(first: str, second: str) -> list[Any]:
    return list(
        await asyncio.gather(durable.wait_for_signal(first), durable.wait_for_signal(second))
    )


@durable.workflow
async def signal_beside_a_step(key: str, limit: float) -> list[Any]:
    return list(await asyncio.gather(blocking("busy"), durable.wait_for_signal(key, timeout=limit)))


@durable.workflow
async def napping_child(seconds: float) -> float:
    await durable.sleep(seconds)
    return seconds


@durable.workflow
async def children_and_a_step() -> list[Any]:
    return list(await asyncio.gather(napping_child(20), napping_child(10), note("beside")))


@durable.workflow
async def many_waits(key: str) -> list[Any]:
    return list(
        await asyncio.gather(
            durable.sleep(100), durable.wait_for_signal(key), note("with the waits")
        )
    )


async def waiting(engine: durable.Engine, run_id: str, after: Waiting | None = None) -> Waiting:
    """Where the run waits next (bounded by `LIMIT` of wall time)."""
    found = await asyncio.wait_for(engine.handle(run_id).waiting(after=after), LIMIT)
    assert found is not None, f"run {run_id!r} terminated instead of waiting"
    return found


async def parked_beside_a_step(engine: durable.Engine, run_id: str, position: int) -> None:
    """Return once the wait at ``position`` is journaled, durably, and the
    delivery has had many turns of the loop to park it (and, were parking
    broken, to suspend and cancel the step running beside it)."""
    kv = engine.for_run(run_id).queue.kv
    key = entry_key(run_id, position)

    async def journaled() -> None:
        while kv.get(key) is None:
            fut = kv.watch(key)  # no await since the read: no write slips through
            try:
                await fut
            finally:
                kv.unwatch(key, fut)

    await asyncio.wait_for(journaled(), LIMIT)
    await engine.for_run(run_id).queue.writer.flush()
    for _ in range(SETTLE_ITERATIONS * 4):
        await asyncio.sleep(0)


async def final_step(engine: durable.Engine, run_id: str) -> int:
    """The run's last delivery number (the engine's status)."""
    status = engine.workflows.default.status(run_id)
    assert status is not None
    assert isinstance(status.state, Terminated)
    return status.current_step


async def test_gathered_sleeps_wait_together(make_objects: Factory, clock: MockClock) -> None:
    async with make_engine(make_objects, clock) as engine:
        start = clock.now_ms()
        handle = await two_naps.start(10, 20)
        first = await waiting(engine, handle.run_id)
        assert (first.signal_key, first.until_ms) == (None, start + 10_000)
        clock.advance(10)
        second = await waiting(engine, handle.run_id, after=first)
        # Both timers started together: the second ends at +20, not +30.
        assert (second.signal_key, second.until_ms) == (None, start + 20_000)
        clock.advance(10)
        assert await result(handle) == "after naps"
        assert await final_step(engine, handle.run_id) == 2
    assert calls == {"after naps": 1}


async def test_equal_gathered_sleeps_take_one_wait(make_objects: Factory, clock: MockClock) -> None:
    async with make_engine(make_objects, clock) as engine:
        handle = await two_naps.start(10, 10)
        await waiting(engine, handle.run_id)
        clock.advance(10)
        assert await result(handle) == "after naps"
        # (They used to take turns: 20 s and one more delivery.)
        assert await final_step(engine, handle.run_id) == 1


async def test_a_step_gathered_with_a_sleep_runs_once(
    make_objects: Factory, clock: MockClock
) -> None:
    async with make_engine(make_objects, clock) as engine:
        handle = await nap_beside_a_step.start(5)
        await asyncio.wait_for(gate("work entered").wait(), LIMIT)
        await parked_beside_a_step(engine, handle.run_id, 0)
        clock.advance(10)  # the sleep's deadline passes while the step runs
        gate("work").set()
        assert await result(handle) == [None, "work"]
        # Neither cancelled nor run again: it finished in the first delivery,
        # where the sleep, past its deadline, returned in place.
        assert calls == {"work": 1}
        assert await final_step(engine, handle.run_id) == 0


async def test_a_sleep_ends_at_its_time_while_a_gathered_step_runs(
    make_objects: Factory, clock: MockClock
) -> None:
    async with make_engine(make_objects, clock) as engine:
        handle = await wake_beside_a_step.start(5)
        await asyncio.wait_for(gate("long entered").wait(), LIMIT)
        await parked_beside_a_step(engine, handle.run_id, 1)  # (the step took 0 at call)
        clock.advance(5)
        # The branch after the sleep goes on while the other step still runs.
        await asyncio.wait_for(gate("woke").wait(), LIMIT)
        assert calls == {"long": 1, "woke": 1}
        gate("long").set()
        assert await result(handle) == ["woke", "long"]
        assert await final_step(engine, handle.run_id) == 0
    assert calls == {"long": 1, "woke": 1}


async def test_a_step_gathered_with_a_sleep_finishes_before_the_run_suspends(
    make_objects: Factory, clock: MockClock
) -> None:
    async with make_engine(make_objects, clock) as engine:
        handle = await nap_beside_a_step.start(30)
        await asyncio.wait_for(gate("work entered").wait(), LIMIT)
        await parked_beside_a_step(engine, handle.run_id, 0)
        clock.advance(10)
        gate("work").set()  # done before the sleep: the run suspends for the rest
        parked = await waiting(engine, handle.run_id)
        assert parked.signal_key is None
        assert parked.step == 1
        assert calls == {"work": 1}
        clock.advance(20)
        assert await result(handle) == [None, "work"]
    assert calls == {"work": 1}


async def test_a_signal_before_the_gathered_sleep_ends(
    make_objects: Factory, clock: MockClock
) -> None:
    async with make_engine(make_objects, clock) as engine:
        start = clock.now_ms()
        handle = await nap_or_signal.start("k-early", 10, 100)
        first = await waiting(engine, handle.run_id)
        # One trigger: the signal, or the earliest deadline (the sleep's).
        assert (first.signal_key, first.until_ms) == ("k-early", start + 10_000)
        assert await engine.signal("k-early", "yes") is SignalOutcome.DELIVERED
        second = await waiting(engine, handle.run_id, after=first)
        assert (second.signal_key, second.until_ms) == (None, start + 10_000)
        assert calls == {}
        clock.advance(10)
        assert await result(handle) == "yes"
    assert calls == {"after": 1}


async def test_a_signal_after_the_gathered_sleep_ends(
    make_objects: Factory, clock: MockClock
) -> None:
    async with make_engine(make_objects, clock) as engine:
        start = clock.now_ms()
        handle = await nap_or_signal.start("k-late", 10, 100)
        first = await waiting(engine, handle.run_id)
        clock.advance(10)
        # Woken for the sleep's deadline, not its own: the signal wait goes on.
        second = await waiting(engine, handle.run_id, after=first)
        assert (second.signal_key, second.until_ms) == ("k-late", start + 100_000)
        assert await engine.signal("k-late", "late yes") is SignalOutcome.DELIVERED
        assert await result(handle) == "late yes"
    assert calls == {"after": 1}


async def test_a_signal_wait_times_out_at_its_own_deadline(
    make_objects: Factory, clock: MockClock
) -> None:
    async with make_engine(make_objects, clock) as engine:
        start = clock.now_ms()
        handle = await nap_or_signal.start("k-never", 10, 30)
        first = await waiting(engine, handle.run_id)
        clock.advance(10)  # the sleep's deadline: not a timeout of the signal wait
        second = await waiting(engine, handle.run_id, after=first)
        assert (second.signal_key, second.until_ms) == ("k-never", start + 30_000)
        clock.advance(20)
        assert await result(handle) is None
        entry = (await journal_of(engine, handle.run_id)).get(1)
        assert entry is not None
        assert entry.resolved
        assert engine.codec.loads(entry.ok or b"", what="the timeout") is None


@pytest.mark.parametrize("order", [("s1", "s2"), ("s2", "s1")])
async def test_two_gathered_signal_waits_take_both_signals(
    make_objects: Factory, clock: MockClock, order: tuple[str, str]
) -> None:
    async with make_engine(make_objects, clock) as engine:
        handle = await two_signals.start("s1", "s2")
        first = await waiting(engine, handle.run_id)
        assert first.signal_key == "s1"  # the first by position
        sent = [await engine.signal(key, key.upper()) for key in order]
        # The signal for the key the run does not wait on is buffered, not lost.
        expected = {"s1": SignalOutcome.DELIVERED, "s2": SignalOutcome.BUFFERED}
        assert sent == [expected[key] for key in order]
        assert await result(handle) == ["S1", "S2"]
        for k in ("s1", "s2"):
            assert engine.for_key(k).queue.kv.scan(b"workflow/signal-", limit=10).entries == []


async def test_a_signal_sent_while_a_gathered_step_runs_beats_the_timeout(
    make_objects: Factory, clock: MockClock
) -> None:
    async with make_engine(make_objects, clock) as engine:
        handle = await signal_beside_a_step.start("k-busy", 10)
        await asyncio.wait_for(gate("busy entered").wait(), LIMIT)
        await parked_beside_a_step(engine, handle.run_id, 1)
        # Sent before the wait's deadline, while the delivery runs: buffered.
        assert await engine.signal("k-busy", "in time") is SignalOutcome.BUFFERED
        clock.advance(30)  # the deadline passes before the step finishes
        gate("busy").set()
        assert await result(handle) == ["busy", "in time"]
    assert calls == {"busy": 1}


async def test_gathered_children_and_a_step(make_objects: Factory, clock: MockClock) -> None:
    async with make_engine(make_objects, clock) as engine:
        handle = await children_and_a_step.options(run_id="kids").start()
        first = await waiting(engine, handle.run_id)
        assert first.child_run_id == child_run_id("kids", 0)  # the first by position
        for kid in (child_run_id("kids", 0), child_run_id("kids", 1)):
            await wait_parked(engine, kid)
        assert calls == {"beside": 1}
        clock.advance(10)  # the second child ends first: its signal is buffered
        assert await result(engine.handle(child_run_id("kids", 1))) == 10
        clock.advance(10)
        assert await result(handle) == [20, 10, "beside"]
    assert calls == {"beside": 1}


async def test_cancel_a_run_waiting_on_several_waits(
    make_objects: Factory, clock: MockClock
) -> None:
    async with make_engine(make_objects, clock) as engine:
        handle = await many_waits.start("k-cancel")
        await waiting(engine, handle.run_id)
        assert await handle.cancel()
        with pytest.raises(RunCancelled):
            await result(handle)
    assert calls == {"with the waits": 1}


async def test_cancel_a_delivery_with_parked_waits_and_a_running_step(
    make_objects: Factory, clock: MockClock
) -> None:
    async with make_engine(make_objects, clock) as engine:
        handle = await nap_beside_a_step.start(5)
        await asyncio.wait_for(gate("work entered").wait(), LIMIT)
        await parked_beside_a_step(engine, handle.run_id, 0)
        assert await handle.cancel()
        with pytest.raises(RunCancelled):
            await result(handle)
    assert calls == {"work": 1, "work cancelled": 1}


async def test_a_run_waiting_on_several_waits_survives_a_restart(
    make_objects: Factory, clock: MockClock
) -> None:
    start = clock.now_ms()
    async with make_engine(make_objects, clock) as engine:
        handle = await many_waits.start("k-restart")
        first = await waiting(engine, handle.run_id)
        assert (first.signal_key, first.until_ms) == ("k-restart", start + 100_000)
    async with make_engine(make_objects, clock) as engine:
        again = await waiting(engine, handle.run_id)
        assert again == first
        assert await engine.signal("k-restart", 7) is SignalOutcome.DELIVERED
        second = await waiting(engine, handle.run_id, after=first)
        assert (second.signal_key, second.until_ms) == (None, start + 100_000)
    clock.advance(100)
    async with make_engine(make_objects, clock) as engine:
        assert engine.queue.promote_scheduled_now() == 1
        assert await result(engine.handle(handle.run_id)) == [None, 7, "with the waits"]
    assert calls == {"with the waits": 1}


async def test_a_draining_engine_lets_the_gathered_step_finish(
    make_objects: Factory, clock: MockClock
) -> None:
    engine = make_engine(make_objects, clock)
    await engine.__aenter__()
    try:
        handle = await nap_beside_a_step.start(30)
        await asyncio.wait_for(gate("work entered").wait(), LIMIT)
        await parked_beside_a_step(engine, handle.run_id, 0)
    finally:
        closing = asyncio.ensure_future(engine.__aexit__(None, None, None))
    await asyncio.sleep(0)  # the engine drains: the delivery goes on
    gate("work").set()  # the step finishes, then the run suspends on the sleep
    await asyncio.wait_for(closing, LIMIT)
    clock.advance(30)
    async with make_engine(make_objects, clock) as engine:
        assert engine.queue.promote_scheduled_now() == 1
        assert await result(engine.handle(handle.run_id)) == [None, "work"]
    assert calls == {"work": 1}
