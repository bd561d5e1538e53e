"""Plain ``def`` steps and jobs (issue 18 point 4): run in the engine's
thread pool with the journal, retries, timeouts and at_most_once of any
step; the pool's size is honoured and a blocking body never blocks the
event loop; a ``def`` workflow is refused naming it."""

from __future__ import annotations

import asyncio
import threading
from collections import Counter

import pytest
from decorator_helpers import (
    LIMIT,
    Factory,
    abort_workflows,
    journal_names,
    journal_of,
    make_engine,
    result,
    wait_parked,
)

import durable
from durable.decorators.journal import START, STEP
from durable.errors import DecoratorError, InvalidArgument, StepMaybeExecutedError
from durable.store.clock import MockClock

calls: Counter[str] = Counter()
threads: list[str] = []
lock = threading.Lock()
release = threading.Event()
started = threading.Semaphore(0)
finished: list[str] = []
ended = threading.Event()
gates = [threading.Event() for _ in range(3)]
log: list[tuple[str, int]] = []


@pytest.fixture(autouse=True)
def _fresh() -> None:
    calls.clear()
    threads.clear()
    release.clear()
    while started.acquire(blocking=False):
        pass
    finished.clear()
    ended.clear()
    log.clear()
    for gate in gates:
        gate.clear()


async def waited(event: threading.Event) -> None:
    """Wait, off the event loop, for ``event`` (set by a body's thread)."""
    assert await asyncio.to_thread(event.wait, LIMIT), "never set"


async def body_started() -> None:
    """Wait, off the event loop, for a blocking body to have started."""
    assert await asyncio.to_thread(started.acquire, True, LIMIT), "no body started"


# ---------------------------------------------------------------- steps


@durable.step
def double(x: int) -> int:
    calls["double"] += 1
    threads.append(threading.current_thread().name)
    return x * 2


@durable.workflow
async def doubling_nap(x: int) -> int:
    first = await double(x)
    await durable.sleep(60)
    return first + await double(first)


async def test_a_sync_step_is_journaled_and_not_run_again_on_replay(
    make_objects: Factory, clock: MockClock
) -> None:
    async with make_engine(make_objects, clock) as engine:
        handle = await doubling_nap.start(5)
        await wait_parked(engine, handle.run_id)
        assert calls["double"] == 1
        clock.advance(60)
        # The run replays from its start: the first call returns the journaled 10.
        assert await result(handle) == 30
        names = await journal_names(engine, handle.run_id)
    assert calls["double"] == 2
    assert [(kind, name) for _, kind, name in names if kind == STEP] == [
        (STEP, double.name),
        (STEP, double.name),
    ]
    assert len(threads) == 2
    assert all(t.startswith("durable-sync") for t in threads)


@durable.step(max_attempts=3, backoff=durable.Backoff(initial=0.0), retry_on=ConnectionError)
def flaky() -> str:
    calls["flaky"] += 1
    started.release()
    if calls["flaky"] < 3:
        raise ConnectionError(f"attempt {calls['flaky']}")
    return f"ok after {calls['flaky']} in {threading.current_thread().name}"


@durable.workflow
async def retrying() -> str:
    return await flaky()


async def test_a_sync_step_is_retried_per_its_policy(
    make_objects: Factory, clock: MockClock
) -> None:
    async with make_engine(make_objects, clock):
        handle = await retrying.start()
        for _ in range(3):
            await body_started()
        out = await result(handle)
    assert out.startswith("ok after 3 in durable-sync")
    assert calls["flaky"] == 3


@durable.step(timeout=30.0)
def blocks() -> str:
    calls["blocks"] += 1
    started.release()
    released = release.wait(LIMIT)
    finished.append(f"released={released}")
    ended.set()
    return "late"


@durable.workflow
async def timing_out() -> str:
    try:
        return await blocks()
    except TimeoutError as e:
        return f"timed out: {e}"


async def test_a_sync_step_over_its_timeout_is_abandoned_and_its_result_discarded(
    make_objects: Factory, clock: MockClock
) -> None:
    async with make_engine(make_objects, clock) as engine:
        handle = await timing_out.start()
        await body_started()
        clock.advance(30)
        out = await result(handle)
        assert out.startswith("timed out: ")
        assert "within 30.0 s" in out
        assert finished == []  # the body still runs in its thread
        release.set()
        await waited(ended)
        journal = await journal_of(engine, handle.run_id)
    assert finished == ["released=True"]
    assert calls["blocks"] == 1
    entry = journal.get(0)  # the timeout, not "late"
    assert entry is not None
    assert (entry.kind, entry.ok) == (STEP, None)
    assert entry.err


@durable.step(at_most_once=True)
def charge(amount: int) -> str:
    calls["charge"] += 1
    started.release()
    release.wait(LIMIT)  # the process dies meanwhile
    return f"charged {amount}"


@durable.workflow
async def checkout(amount: int) -> str:
    try:
        return await charge(amount)
    except StepMaybeExecutedError as e:
        return f"check the card: {e.position} {e.name}"


async def test_an_at_most_once_sync_step_never_runs_again_after_a_crash(
    make_objects: Factory, clock: MockClock
) -> None:
    async with make_engine(make_objects, clock) as engine:
        handle = await checkout.start(100)
        await body_started()
        assert await journal_names(engine, handle.run_id) == [(0, START, charge.name)]
        await abort_workflows(engine)  # the process dies mid-step
    release.set()
    async with make_engine(make_objects, clock) as engine:
        out = await result(engine.handle(handle.run_id))
    assert out == f"check the card: 0 {charge.name}"
    assert calls["charge"] == 1


@durable.step
def gated(i: int) -> int:
    with lock:
        log.append(("start", i))
    started.release()
    gates[i].wait(LIMIT)
    with lock:
        log.append(("end", i))
    return i


@durable.workflow
async def fan_out(n: int) -> list[int]:
    return list(await asyncio.gather(*(gated(i) for i in range(n))))


async def test_the_pool_size_is_honoured(make_objects: Factory, clock: MockClock) -> None:
    async with make_engine(make_objects, clock, sync_threads=2) as engine:
        handle = await fan_out.start(3)
        await body_started()
        await body_started()
        # All three were handed to the pool in one turn of the loop: the
        # third waits for a thread.
        assert (engine.threads.running, engine.threads.waiting) == (2, 1)
        first = log[0][1]
        gates[first].set()
        await body_started()  # the third, once the first ended
        third = log[-1][1]
        assert log[:2] == [("start", first), ("start", 3 - first - third)]
        assert log[2:] == [("end", first), ("start", third)]
        for gate in gates:
            gate.set()
        assert await result(handle) == [0, 1, 2]
        assert (engine.threads.running, engine.threads.waiting) == (0, 0)


@durable.step
def blocking() -> str:
    threads.append(durable.run_id())  # the run's context reaches the thread
    started.release()
    return "released" if release.wait(LIMIT) else "never released"


@durable.workflow
async def blocked() -> str:
    return await blocking()


@durable.step
async def quick() -> str:
    return "quick"


@durable.workflow
async def quick_run() -> str:
    return await quick()


async def test_a_blocking_sync_body_does_not_block_the_event_loop(
    make_objects: Factory, clock: MockClock
) -> None:
    async with make_engine(make_objects, clock):
        slow = await blocked.start()
        await body_started()
        # While the body blocks its thread, the loop runs another run to its end.
        assert await result(await quick_run.start()) == "quick"
        release.set()
        assert await result(slow) == "released"
    assert threads == [slow.run_id]


async def test_a_sync_step_outside_a_workflow_is_awaited_in_a_thread(
    make_objects: Factory, clock: MockClock
) -> None:
    assert await double(4) == 8  # no engine: asyncio's default pool
    async with make_engine(make_objects, clock):
        assert await double(5) == 10
    assert threads[0] != threading.current_thread().name
    assert threads[1].startswith("durable-sync")


# ----------------------------------------------------------------- jobs


@durable.job(timeout=30.0)
def add(a: int, b: int) -> str:
    return f"{a + b} in {threading.current_thread().name}"


@durable.job(timeout=30.0, max_attempts=1)
def stuck() -> str:
    started.release()
    release.wait(LIMIT)
    finished.append("stuck ended")
    ended.set()
    return "late"


async def test_a_job_with_a_sync_body_runs_in_the_pool(
    make_objects: Factory, clock: MockClock
) -> None:
    async with make_engine(make_objects, clock):
        out = await asyncio.wait_for(add(2, 3), LIMIT)
        assert out.startswith("5 in durable-sync")
        handle = await stuck.submit()
        await body_started()
        clock.advance(30)
        with pytest.raises(TimeoutError):
            await result(handle)
        release.set()
        await waited(ended)


# ----------------------------------------------------------- misuse


def test_a_def_workflow_is_refused_naming_it() -> None:
    def report(day: str) -> str:
        return day

    with pytest.raises(DecoratorError) as info:
        durable.workflow(report)  # type: ignore[arg-type]
    message = str(info.value)
    assert "test_sync_bodies.test_a_def_workflow_is_refused_naming_it.<locals>.report" in message
    assert "async def report(...)" in message


@pytest.mark.parametrize("size", [0, -1, 1.5, True, "4"])
def test_a_bad_pool_size_is_refused(size: object) -> None:
    with pytest.raises(InvalidArgument, match="sync_threads"):
        durable.Engine("memory://x", sync_threads=size)  # type: ignore[arg-type]
