"""``engine.runs(...)``: the run index, its filters, pages and cursor (issue 17 point 1)."""

from __future__ import annotations

import asyncio
import datetime as dt

import pytest
from decorator_helpers import LIMIT, Factory, kv_count, make_engine, result, wait_parked

import durable
from durable.decorators.index import INDEX_PREFIX, ORDER_PREFIX
from durable.errors import InvalidArgument
from durable.store.clock import MockClock


@durable.workflow(name="listing.quick")
async def quick(x: int) -> int:
    return x + 1


@durable.workflow(name="listing.parked")
async def parked(key: str) -> str:
    await durable.wait_for_signal(key)
    return key


class Boom(Exception):
    pass


@durable.workflow(name="listing.broken")
async def broken(x: int) -> int:
    raise Boom(f"no {x}")


async def _all(engine: durable.Engine, **filters: object) -> list[durable.RunSummary]:
    """Every page of ``engine.runs(**filters)``, concatenated."""
    runs: list[durable.RunSummary] = []
    cursor = None
    while True:
        page = await engine.runs(limit=3, cursor=cursor, **filters)  # type: ignore[arg-type]
        runs += page.runs
        if page.cursor is None:
            return runs
        cursor = page.cursor


async def test_runs_lists_newest_first_with_states(make_objects: Factory, clock: MockClock) -> None:
    async with make_engine(make_objects, clock) as engine:
        done = await quick.start(1)
        await result(done)
        clock.advance(1)
        failed = await broken.start(2)
        with pytest.raises(Exception, match="no 2"):
            await result(failed)
        clock.advance(1)
        waiting = await parked.start("k1")
        await wait_parked(engine, waiting.run_id)
        page = await engine.runs()
        assert [r.run_id for r in page.runs] == [waiting.run_id, failed.run_id, done.run_id]
        assert page.cursor is None
        w, f, d = page.runs
        assert (w.state, w.workflow, w.current_step) == (
            "waiting",
            "listing.parked",
            "durable.wait_for_signal",
        )
        assert w.waiting is not None
        assert w.waiting.signal_key == "k1"
        assert w.ended is None
        assert (f.state, f.error_type, f.error) == ("failed", "Boom", "no 2")
        assert (d.state, d.steps, d.error) == ("succeeded", 0, None)
        assert d.ended is not None
        assert d.started == dt.datetime.fromtimestamp((clock.now_ms() - 2000) / 1000, dt.UTC)
        assert w.as_dict()["state"] == "waiting"
        assert d.as_dict()["ended"] is not None
        # The transition is reflected: the waiting run ends.
        await engine.signal("k1")
        await result(waiting)
        assert (await engine.runs(limit=1)).runs[0].state == "succeeded"


async def test_every_filter_and_their_combination(make_objects: Factory, clock: MockClock) -> None:
    async with make_engine(make_objects, clock) as engine:
        t0 = clock.now_ms()
        a = await quick.options(attributes={"customer": "c-1", "tier": "gold"}).start(1)
        clock.advance(1)
        b = await quick.options(attributes={"customer": "c-2"}).start(2)
        clock.advance(1)
        c = await broken.options(attributes={"customer": "c-1"}).start(3)
        for h in (a, b):
            await result(h)
        with pytest.raises(Exception, match="no 3"):
            await result(c)

        async def ids(**filters: object) -> list[str]:
            return [r.run_id for r in await _all(engine, **filters)]

        assert await ids() == [c.run_id, b.run_id, a.run_id]
        assert await ids(state="failed") == [c.run_id]
        assert await ids(state=["succeeded", durable.WorkflowState.FAILED]) == [
            c.run_id,
            b.run_id,
            a.run_id,
        ]
        assert await ids(state="running") == []
        assert await ids(workflow="listing.quick") == [b.run_id, a.run_id]
        assert await ids(workflow={"listing.broken", "nope"}) == [c.run_id]
        assert await ids(attributes={"customer": "c-1"}) == [c.run_id, a.run_id]
        assert await ids(attributes={"customer": "c-1", "tier": "gold"}) == [a.run_id]
        assert await ids(attributes={"customer": "c-1"}, state="succeeded") == [a.run_id]
        assert await ids(started_after=t0 + 1000) == [c.run_id, b.run_id]
        assert await ids(started_before=t0 + 1000) == [a.run_id]
        after = dt.datetime.fromtimestamp((t0 + 1000) / 1000, dt.UTC)
        assert await ids(started_after=after, started_before=t0 + 2000) == [b.run_id]
        assert await ids(workflow="listing.quick", started_after=t0 + 1000) == [b.run_id]
        for bad in (
            {"state": "exploded"},
            {"started_after": dt.datetime(2024, 1, 1)},  # naive: refused
            {"attributes": {"k": 1}},
            {"limit": 0},
            {"cursor": "not hex"},
        ):
            with pytest.raises(InvalidArgument):
                await engine.runs(**bad)  # type: ignore[arg-type]


async def test_pages_are_stable_while_runs_are_added(
    make_objects: Factory, clock: MockClock
) -> None:
    async with make_engine(make_objects, clock) as engine:
        started = []
        for i in range(7):
            started.append((await quick.start(i)).run_id)
            clock.advance(0.001 * (i % 2))  # ties too: ordered by run id then
        expected = [r.run_id for r in (await engine.runs(limit=100)).runs]
        assert sorted(expected) == sorted(started)
        seen: list[str] = []
        page = await engine.runs(limit=3)
        while True:
            seen += [r.run_id for r in page.runs]
            clock.advance(1)
            await quick.start(100)  # newer: sorts before the cursor, never seen here
            if page.cursor is None:
                break
            page = await engine.runs(limit=3, cursor=page.cursor)
        assert seen == expected
        assert len((await engine.runs(limit=1000)).runs) == 7 + 3


async def test_cost_two_index_keys_per_run_no_object(
    make_objects: Factory, clock: MockClock
) -> None:
    async with make_engine(make_objects, clock) as engine:
        handles = [await quick.start(i) for i in range(5)]
        for h in handles:
            await result(h)
        assert kv_count(engine, ORDER_PREFIX) == 5
        assert kv_count(engine, INDEX_PREFIX) == 10


async def test_a_client_reads_the_index_an_owner_writes(
    make_objects: Factory, clock: MockClock
) -> None:
    async with make_engine(make_objects, clock) as owner:
        done = await quick.options(attributes={"order": "o-1"}).start(1)
        await result(done)
        clock.advance(1)
        waiting = await parked.start("c1")
        await wait_parked(owner, waiting.run_id)
        async with make_engine(make_objects, clock, role="client") as client:
            assert not client.owner
            page = await client.runs()
            assert [(r.run_id, r.state) for r in page.runs] == [
                (waiting.run_id, "waiting"),
                (done.run_id, "succeeded"),
            ]
            assert (await client.runs(attributes={"order": "o-1"})).runs[0].run_id == done.run_id
            clock.advance(1)
            started = await quick.start(5)  # through the inbox
            await asyncio.wait_for(started.result(), LIMIT)
            assert (await client.runs(limit=1)).runs[0].run_id == started.run_id
        assert owner.owner  # the client never fenced it
        await owner.signal("c1")
        await result(waiting)
