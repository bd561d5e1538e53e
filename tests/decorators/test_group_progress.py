"""Progress of run groups and job maps (issue 17 point 6): counts by state as
members move (pending, running, waiting on a signal, failed, cancelled,
succeeded), rate and time remaining on the mock clock, updates woken by the
store's commits, from a client engine, and across partitions
(``DURABLE_TEST_PARTITIONS=8``: each member in its own partition)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import pytest
from decorator_helpers import LIMIT, Factory, make_engine, promote_due, result, wait_parked

import durable
from durable.decorators.engine import Engine
from durable.decorators.invocation import encode_invocation
from durable.engine.groups import GroupMember, RunGroup
from durable.engine.progress import Progress, compute_progress
from durable.engine.runs import RunOptions
from durable.errors import GroupNotFound, InvalidArgument
from durable.store.clock import MockClock

gates: dict[str, asyncio.Event] = {}
started: dict[str, asyncio.Event] = {}


@pytest.fixture(autouse=True)
def _fresh() -> None:
    gates.clear()
    started.clear()


@contextlib.asynccontextmanager
async def opened_at_exit() -> AsyncIterator[None]:
    """Open every gate when the block exits (a failed check must not leave
    held jobs for the engine's exit to wait on)."""
    try:
        yield
    finally:
        for g in gates.values():
            g.set()


def gate(key: str) -> asyncio.Event:
    return gates.setdefault(key, asyncio.Event())


def began(key: str) -> asyncio.Event:
    return started.setdefault(key, asyncio.Event())


class Boom(Exception):
    pass


@durable.step(name="progress.hold")
async def hold(key: str) -> str:
    began(key).set()
    await gate(key).wait()
    return key


@durable.workflow(name="progress.member")
async def member(kind: str, key: str) -> str:
    if kind == "wait":
        await durable.wait_for_signal(key)
    elif kind == "fail":
        raise Boom(key)
    elif kind == "hold":
        await hold(key)
    return key


@durable.job(name="progress.job", max_attempts=1)
async def held_job(key: str) -> str:
    began(key).set()
    await gate(key).wait()
    if key.startswith("fail"):
        raise Boom(key)
    return key


def workflow_group(engine: Engine, group_id: str) -> RunGroup:
    """A run group of ``progress.member`` runs; on a partitioned store each
    member runs (and keeps its member record) in its own partition."""
    runtime = engine.for_run(group_id).workflows.default
    return RunGroup(runtime, group_id, route=lambda rid: engine.for_run(rid).workflows.default)


def members(engine: Engine, spec: dict[str, str]) -> list[GroupMember]:
    return [
        GroupMember(key, encode_invocation(engine.codec, "progress.member", [kind, key], {}))
        for key, kind in spec.items()
    ]


def counts(p: Progress) -> dict[str, int]:
    return {state: n for state, n in p.counts().items() if n}


async def wait_for(measure: AsyncIterator[Progress], want: dict[str, int]) -> Progress:
    """The first progress of ``measure`` (an updates iterator) whose counts are ``want``."""

    async def find() -> Progress:
        async for p in measure:
            if counts(p) == want:
                return p
        raise AssertionError(f"the updates ended before {want}")

    return await asyncio.wait_for(find(), LIMIT)


# ----------------------------------------------------------------- pure


def test_rate_and_eta_are_computed_over_the_recent_window() -> None:
    now = 1_000_000
    # Started 20 s ago: 2 terminations over 20 s (shorter than the window).
    p = compute_progress(
        {"succeeded": 1, "failed": 1, "running": 1},
        4,
        [now - 10_000, now - 1],
        now,
        started_ms=now - 20_000,
    )
    assert (p.pending, p.running, p.done, p.total) == (1, 1, 2, 4)
    assert p.rate_per_s == pytest.approx(0.1)
    assert p.eta_s == pytest.approx(20.0)
    assert p.fraction == 0.5
    assert not p.finished
    # Terminations older than the window do not count; the window is the span.
    old = compute_progress({"succeeded": 2}, 3, [now - 90_000, now - 30_000], now, window=60)
    assert old.rate_per_s == pytest.approx(1 / 60)
    assert old.eta_s == pytest.approx(60.0)
    # Nothing recent: the rate is unknown, so is the estimate.
    assert compute_progress({"succeeded": 1}, 2, [now - 61_000], now).eta_s is None
    done = compute_progress({"cancelled": 2}, 2, [now, now], now, started_ms=now)
    assert (done.eta_s, done.fraction, done.finished, done.rate_per_s) == (0.0, 1.0, True, 0.0)
    assert done.as_dict()["cancelled"] == 2
    assert done.as_dict()["done"] == 2
    for bad in ({"window": 0}, {"window": -1.0}):
        with pytest.raises(InvalidArgument):
            compute_progress({}, 1, [], now, **bad)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgument, match="exploded"):
        compute_progress({"exploded": 1}, 1, [], now)


# ----------------------------------------------------------- run groups


async def test_counts_follow_members_through_every_state(
    make_objects: Factory, clock: MockClock
) -> None:
    async with make_engine(make_objects, clock) as engine, opened_at_exit():
        group = workflow_group(engine, "states")
        spec = {"w": "wait", "f": "fail", "c": "wait", "s": "quick", "r": "hold"}
        later = clock.now_ms() + 3_600_000
        await group.submit(members(engine, spec), RunOptions(run_at=later))
        if engine.partitioned:  # the members spread over the partitions
            assert len({id(engine.for_run(group.run_id(k))) for k in spec}) > 1
        p = await group.progress()
        assert counts(p) == {"pending": 5}
        assert (p.total, p.started_ms, p.eta_s) == (5, clock.now_ms(), None)
        assert counts(await engine.group_progress("states")) == {"pending": 5}

        clock.advance(3600)
        promote_due(engine)
        for key in ("w", "c"):
            await wait_parked(engine, group.run_id(key))
        with pytest.raises(Boom):
            await result(engine.handle(group.run_id("f")))
        assert await result(engine.handle(group.run_id("s"))) == "s"
        await asyncio.wait_for(began("r").wait(), LIMIT)
        assert await engine.handle(group.run_id("c")).cancel()
        with pytest.raises(durable.RunCancelled):
            await result(engine.handle(group.run_id("c")))
        want = {"waiting": 1, "running": 1, "succeeded": 1, "failed": 1, "cancelled": 1}
        p = await group.progress()
        assert counts(p) == want
        # 3 terminations at one instant, 3600 s after the start: 3 per 60 s.
        assert p.rate_per_s == pytest.approx(3 / 60)
        assert p.eta_s == pytest.approx(2 / (3 / 60))
        by_id = await engine.group_progress("states")
        assert counts(by_id) == want
        assert (by_id.total, by_id.rate_per_s) == (5, p.rate_per_s)

        gate("r").set()
        assert await result(engine.handle(group.run_id("r"))) == "r"
        await engine.signal("w")
        assert await result(engine.handle(group.run_id("w"))) == "w"
        p = await group.progress()
        assert counts(p) == {"succeeded": 3, "failed": 1, "cancelled": 1}
        assert (p.finished, p.fraction, p.eta_s) == (True, 1.0, 0.0)
        with pytest.raises(GroupNotFound):
            await engine.group_progress("no-such-group")
        with pytest.raises(GroupNotFound):
            await workflow_group(engine, "no-such-group").progress()


async def test_updates_wake_on_the_stores_commits_not_the_clock(
    make_objects: Factory, clock: MockClock
) -> None:
    async with make_engine(make_objects, clock) as engine:
        group = workflow_group(engine, "woken")
        await group.submit(members(engine, {"a": "wait", "b": "wait"}))
        for key in ("a", "b"):
            await wait_parked(engine, group.run_id(key))
        # The clock never moves: only the commits wake the iterator.
        updates = engine.group_progress_updates("woken", interval=3600)
        assert counts(await wait_for(updates, {"waiting": 2})) == {"waiting": 2}
        await engine.signal("a")
        p = await wait_for(updates, {"waiting": 1, "succeeded": 1})
        assert not p.finished
        await engine.signal("b")
        last = await wait_for(updates, {"succeeded": 2})
        assert last.finished
        with pytest.raises(StopAsyncIteration):
            await anext(updates)  # the finished progress was the last


# ------------------------------------------------------------- job map


async def test_a_map_handle_reports_progress_then_results(
    make_objects: Factory, clock: MockClock
) -> None:
    async with make_engine(make_objects, clock) as engine, opened_at_exit():
        t0 = clock.now_ms()
        keys = ["ok-0", "ok-1", "fail-2", "ok-3"]
        mapped = await held_job.submit_map(keys)
        assert len(mapped) == 4
        assert mapped.group_id in repr(mapped)
        for key in keys:
            await asyncio.wait_for(began(key).wait(), LIMIT)
        p = await mapped.progress()
        assert counts(p) == {"running": 4}
        assert p.started_ms == t0
        updates = mapped.progress_updates(interval=3600)
        assert counts(await wait_for(updates, {"running": 4})) == {"running": 4}
        completed = mapped.as_completed(return_exceptions=True)

        clock.advance(10)
        gate("ok-0").set()
        assert await asyncio.wait_for(anext(completed), LIMIT) == (0, "ok-0")
        await wait_for(updates, {"running": 3, "succeeded": 1})
        clock.advance(10)
        gate("fail-2").set()
        index, error = await asyncio.wait_for(anext(completed), LIMIT)
        assert index == 2
        assert isinstance(error, Boom)
        p = await wait_for(updates, {"running": 2, "succeeded": 1, "failed": 1})
        # t0 + 20 s: 2 terminations over the 20 s since the start; 2 remain.
        assert p.rate_per_s == pytest.approx(0.1)
        assert p.eta_s == pytest.approx(20.0)
        # Over the last 5 s only the termination at t0 + 20 s counts.
        p = await mapped.progress(window=5)
        assert p.rate_per_s == pytest.approx(0.2)
        assert p.eta_s == pytest.approx(10.0)
        by_id = await engine.group_progress(mapped.group_id, window=5)
        assert (by_id.total, by_id.eta_s) == (4, pytest.approx(10.0))

        gate("ok-1").set()
        gate("ok-3").set()
        last = await wait_for(updates, {"succeeded": 3, "failed": 1})
        assert last.finished
        results = await asyncio.wait_for(mapped.results(return_exceptions=True), LIMIT)
        assert results[:2] == ["ok-0", "ok-1"]
        assert results[3] == "ok-3"
        assert isinstance(results[2], Boom)
        with pytest.raises(InvalidArgument, match="at least one item"):
            await held_job.submit_map([])


# --------------------------------------------------------------- client


async def test_a_client_engine_reads_the_progress_an_owner_makes(
    make_objects: Factory, clock: MockClock
) -> None:
    async with make_engine(make_objects, clock) as owner:
        group = workflow_group(owner, "seen")
        await group.submit(members(owner, {"w": "wait", "f": "fail", "s": "quick"}))
        await wait_parked(owner, group.run_id("w"))
        with pytest.raises(Boom):
            await result(owner.handle(group.run_id("f")))
        await result(owner.handle(group.run_id("s")))
        async with make_engine(make_objects, clock, role="client") as client:
            assert not client.owner
            want = {"waiting": 1, "succeeded": 1, "failed": 1}
            assert counts(await client.group_progress("seen")) == want
            await client.signal("w")  # through the owner's inbox
            await result(owner.handle(group.run_id("w")))
            p = await client.group_progress("seen")
            assert counts(p) == {"succeeded": 2, "failed": 1}
            assert p.finished
            with pytest.raises(GroupNotFound):
                await client.group_progress("no-such-group")
        assert owner.owner  # the client never fenced it
