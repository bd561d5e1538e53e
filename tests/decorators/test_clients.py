"""The decorator API from an engine that does not own the store (issue 14 point 1).

A worker `Engine` owns the test's store; a ``role="client"`` `Engine` on the
same store (another handle on it) does what a web server or a script does:
starts runs, waits for them, reads their status and published values,
signals, cancels, forks, submits and maps jobs. Everything the client asks
goes through the store's inbox; everything it reads, through its own view of
the log. (Real processes: tests/cluster and tests/scaleout.)
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
from decorator_helpers import LIMIT, PARTITIONS, Factory, applier_of, make_engine, wait_started

import durable
from durable.decorators.engine import Engine
from durable.engine import Terminated
from durable.errors import InputMismatch, RunCancelled, RunNotFound, StoreNotInitialized
from durable.store.clock import MockClock

gates: dict[str, asyncio.Event] = {}


def gate(name: str) -> asyncio.Event:
    return gates.setdefault(name, asyncio.Event())


@pytest.fixture(autouse=True)
def _fresh() -> None:
    gates.clear()


@durable.step(name="clients.double")
async def double(x: int) -> int:
    return 2 * x


@durable.workflow(name="clients.pipeline")
async def pipeline(x: int) -> int:
    await durable.publish("seen", x)
    return await double(x) + 1


@durable.workflow(name="clients.approval")
async def approval(order: str) -> str:
    return f"{order}: {await durable.wait_for_signal(f'approve:{durable.run_id()}')}"


@durable.step(name="clients.slow")
async def slow(name: str) -> str:
    await gate(name).wait()
    return name


@durable.workflow(name="clients.blocked")
async def blocked(name: str) -> str:
    return await slow(name)


@durable.job(name="clients.square")
async def square(x: int) -> int:
    return x * x


@asynccontextmanager
async def owner_and_client(make_objects: Factory, clock: MockClock) -> AsyncIterator[Engine]:
    """A worker that owns the store, and (yielded, current) a client of it."""
    async with make_engine(make_objects, clock) as owner:
        assert owner.owner
        try:
            async with make_engine(make_objects, clock, role="client") as client:
                assert not client.owner
                yield client
        finally:
            for g in gates.values():
                g.set()


async def test_a_client_starts_runs_and_reads_them(make_objects: Factory, clock: MockClock) -> None:
    async with owner_and_client(make_objects, clock) as client:
        handle = await pipeline.start(20)
        assert await asyncio.wait_for(handle.result(), LIMIT) == 41
        assert await handle.get("seen") == 20
        status = await handle.status()
        assert status is not None
        assert (status.state, status.workflow, status.steps) == ("succeeded", "clients.pipeline", 1)
        # A known run id is the same run; `await wf(x)` waits for it.
        assert await asyncio.wait_for(pipeline(5), LIMIT) == 11
        same = await pipeline.options(run_id=handle.run_id).start(20)
        assert await same.result() == 41
        with pytest.raises(InputMismatch):  # the clash is visible at start
            await pipeline.options(run_id=handle.run_id).start(21)
        with pytest.raises(RunNotFound, match="'no-such-run'"):
            await client.handle("no-such-run").result(timeout=1)


async def test_a_client_signals_and_cancels(make_objects: Factory, clock: MockClock) -> None:
    async with owner_and_client(make_objects, clock) as client:
        waiting = await approval.start("o-1")
        where = await asyncio.wait_for(waiting.waiting(), LIMIT)
        assert where is not None
        assert where.signal_key == f"approve:{waiting.run_id}"
        assert await client.signal(where.signal_key, "yes") is durable.SignalOutcome.SENT
        assert await asyncio.wait_for(waiting.result(), LIMIT) == "o-1: yes"

        running = await blocked.start("stuck")
        assert await running.cancel() is True
        with pytest.raises(RunCancelled):
            await asyncio.wait_for(running.result(), LIMIT)
        assert await running.cancel() is False  # ended: nothing sent


async def test_a_client_forks_a_run(make_objects: Factory, clock: MockClock) -> None:
    async with owner_and_client(make_objects, clock) as client:
        source = await pipeline.start(3)
        assert await asyncio.wait_for(source.result(), LIMIT) == 7
        fork = await client.fork(source.run_id, 1)  # reuses position 0 (double)
        assert fork.run_id != source.run_id
        assert await asyncio.wait_for(fork.result(), LIMIT) == 7


async def test_a_client_submits_and_maps_jobs(make_objects: Factory, clock: MockClock) -> None:
    async with owner_and_client(make_objects, clock):
        job = await square.submit(9)
        assert await asyncio.wait_for(job.result(), LIMIT) == 81
        assert await asyncio.wait_for(square.map([1, 2, 3]), LIMIT) == [1, 4, 9]
        seen = [pair async for pair in square.map_as_completed([4, 5])]
        assert sorted(seen) == [(0, 16), (1, 25)]


async def test_a_clash_the_client_could_not_see_surfaces_at_result(
    make_objects: Factory, clock: MockClock
) -> None:
    """Another process ran the id first, with other arguments, while this
    client's view lagged (its follower stopped): its start returns, and its
    ``result()`` raises `InputMismatch` (not the other run's value)."""
    async with (
        make_engine(make_objects, clock) as owner,
        make_engine(make_objects, clock, role="client") as client,
    ):
        follower = client.for_run("clash").queue.follower  # type: ignore[attr-defined]
        await follower.stop()  # the view lags from here on
        first = await pipeline.options(run_id="clash").start(1)
        await asyncio.wait_for(wait_started(owner, "clash"), LIMIT)  # applied
        assert await asyncio.wait_for(owner.handle("clash").result(), LIMIT) == 3
        second = await pipeline.options(run_id="clash").start(2)  # not visible: written
        follower.start()
        with pytest.raises(InputMismatch):
            await asyncio.wait_for(second.result(), LIMIT)
        assert await asyncio.wait_for(first.result(), LIMIT) == 3


runs: list[int] = []


@durable.step(name="clients.counted")
async def counted(x: int) -> int:
    runs.append(x)
    return x


@durable.workflow(name="clients.once")
async def once(x: int) -> int:
    return await counted(x)


async def test_a_run_id_started_again_after_its_run_ended_is_that_run(
    make_objects: Factory, clock: MockClock
) -> None:
    """The owner applies a client's start of an id whose run already ended
    (the client's view lagged) as the decorators define it: the same
    arguments are that run, nothing runs again."""
    runs.clear()
    async with (
        make_engine(make_objects, clock) as owner,
        make_engine(make_objects, clock, role="client") as client,
    ):
        follower = client.for_run("twice").queue.follower  # type: ignore[attr-defined]
        await follower.stop()
        await once.options(run_id="twice").start(7)
        await asyncio.wait_for(wait_started(owner, "twice"), LIMIT)
        assert await asyncio.wait_for(owner.handle("twice").result(), LIMIT) == 7
        again = await once.options(run_id="twice").start(7)  # not visible: written
        applier = applier_of(owner, "twice")
        assert applier is not None
        await applier.apply_now()  # the owner has applied it now: no new incarnation
        status = owner.for_run("twice").workflows.default.status("twice")
        assert status is not None
        assert isinstance(status.state, Terminated)
        follower.start()
        assert await asyncio.wait_for(again.result(), LIMIT) == 7
    assert runs == [7]


async def test_a_client_of_a_store_no_worker_opened_says_to_start_one(tmp_path: Path) -> None:
    """A client never creates a store: it names the store and what to do,
    and leaves nothing behind."""
    store = tmp_path / "store"
    with pytest.raises(StoreNotInitialized, match="start a worker on it first") as info:
        async with Engine(store, role="client"):
            pass
    assert str(store) in str(info.value)
    assert not store.exists() or not any(store.rglob("*"))


@pytest.mark.skipif(PARTITIONS is not None, reason="one store, one owner (a pool: tests/scaleout)")
async def test_a_standby_that_takes_over_waits_for_the_runs_it_asked_for(
    make_objects: Factory, clock: MockClock
) -> None:
    """A standby starts a run through the inbox; the owner leaves before it
    applied the request; the standby takes over: ``result()`` waits while
    its own applier applies the request (the run is not "not found")."""
    owner = make_engine(make_objects, clock)
    await owner.__aenter__()
    try:
        async with make_engine(make_objects, clock) as standby:
            assert not standby.owner
            applier = applier_of(owner, "asked")
            assert applier is not None
            await applier.stop()  # the request waits in the inbox
            handle = await pipeline.options(run_id="asked").start(4)
            status = await handle.status()
            assert status is not None
            assert status.state == "pending"
            await owner.__aexit__(None, None, None)
            await standby.wait_owner(True, timeout=LIMIT)
            assert await asyncio.wait_for(handle.result(), LIMIT) == 9
    finally:
        if owner.running:
            await owner.__aexit__(None, None, None)
