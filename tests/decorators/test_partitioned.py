"""`Engine(url, partitions=P)`: a lone engine owns every partition at once,
whatever the engine before it did; jobs, @job map, cron schedules and bulk
batches each live in the partition their id routes them to."""

from __future__ import annotations

import asyncio

import pytest
from decorator_helpers import LIMIT, Factory, after_deferral, result

import durable
from durable.cluster.manifest import partition_of
from durable.decorators.jobs import job
from durable.decorators.jobs.mapping import group_id_for_key
from durable.decorators.jobs.service import runner_for
from durable.decorators.partitioned import PartitionedSession
from durable.engine import keys
from durable.engine.bulk import Bulk, BulkContext
from durable.engine.cron import CronScheduler
from durable.engine.groups import member_run_id
from durable.errors import InvalidArgument
from durable.store.clock import MockClock
from durable.store.ids import IdGenerator

P = 8
events: dict[str, asyncio.Event] = {}


@pytest.fixture(autouse=True)
def _fresh() -> None:
    events.clear()


def event(name: str) -> asyncio.Event:
    return events.setdefault(name, asyncio.Event())


@durable.step
async def plus_one(n: int) -> int:
    return n + 1


@durable.step
async def held(n: int) -> int:
    event("held running").set()
    await event("let go").wait()
    return n


@durable.workflow
async def increment(n: int) -> int:
    return await plus_one(n)


@durable.workflow
async def waits_in_a_step(n: int) -> int:
    return await held(n)


@job(name="partitioned.square")
async def square(x: int) -> int:
    return x * x


def partitioned(make_objects: Factory, clock: MockClock) -> durable.Engine:
    return durable.Engine(make_objects(), clock=clock, partitions=P)


async def test_a_lone_engine_owns_every_partition_again_after_another_closed(
    make_objects: Factory, clock: MockClock
) -> None:
    for n in range(3):
        async with partitioned(make_objects, clock) as engine:
            assert engine.owner  # at once: the last engine's release is on the store
            assert engine.partition_count == P
            assert await result(await increment.start(n)) == n + 1


@pytest.mark.parametrize("partitions", [P, None], ids=["partitioned", "unpartitioned"])
async def test_an_engine_whose_close_was_cancelled_lets_the_next_own_at_once(
    make_objects: Factory, clock: MockClock, partitions: int | None
) -> None:
    def partitioned(make_objects: Factory, clock: MockClock) -> durable.Engine:
        return durable.Engine(make_objects(), clock=clock, partitions=partitions)

    engine = partitioned(make_objects, clock)
    await engine.__aenter__()
    handle = await waits_in_a_step.start(7)
    await asyncio.wait_for(event("held running").wait(), LIMIT)
    # The claim is durable (a run's first claim in the process that started
    # it may ride its next write, which this run never makes): the attempt
    # the cancelled close loses is then a crash of the run.
    await engine.for_run(handle.run_id).queue.writer.flush()
    workflows = engine.for_run(handle.run_id).workflows
    closing = asyncio.ensure_future(engine.__aexit__(None, None, None))
    await asyncio.wait_for(workflows.draining.wait(), LIMIT)  # the step holds the drain
    closing.cancel()  # e.g. the caller's timeout
    with pytest.raises(asyncio.CancelledError):
        await closing
    # Its member left all the same (not heartbeating on, owning nothing for ever).
    async with partitioned(make_objects, clock) as engine:
        assert engine.owner
        event("let go").set()
        await after_deferral(engine, handle.run_id, 1)  # the lost attempt was a crash
        assert await result(engine.handle(handle.run_id)) == 7


async def test_a_keyless_job_keeps_an_engine_minted_id_and_runs_in_its_partition(
    make_objects: Factory, clock: MockClock
) -> None:
    async with partitioned(make_objects, clock) as engine:
        handles = [await square.submit(n) for n in range(4)]
        assert [await result(h) for h in handles] == [0, 1, 4, 9]
        for handle in handles:
            # A run id like a workflow's (a ULID), not a digest of a made-up key.
            assert len(handle.job_id) == len(IdGenerator(clock).next())
            runtime = runner_for(engine.for_run(handle.job_id), square.job_type).runtime
            assert runtime.view.terminal_record(handle.job_id) is not None
        assert await result(square.handle(handles[2].job_id)) == 4


async def test_map_spreads_its_members_over_the_partitions_and_gathers_them(
    make_objects: Factory, clock: MockClock
) -> None:
    items = list(range(32))
    async with partitioned(make_objects, clock) as engine:
        assert await asyncio.wait_for(
            square.options(idempotency_key="squares").map(items), LIMIT
        ) == [x * x for x in items]
        group_id = group_id_for_key(square.name, "squares")
        homes = set()
        for i in items:
            member = member_run_id(group_id, f"item-{i}")
            home = partition_of(member, P)
            homes.add(home)
            # The member's run and its member record are in its own partition.
            part = engine.for_run(member)
            runtime = runner_for(part, square.job_type).runtime
            assert runtime.view.terminal_record(member) is not None
            assert part.queue.kv.get(keys.member_key(group_id, f"item-{i}")) is not None
        assert len(homes) > 1  # 32 members in one of 8 partitions: 8**-31
        seen = [pair async for pair in square.map_as_completed([5, 6, 7])]
        assert sorted(seen) == [(0, 25), (1, 36), (2, 49)]


async def test_a_schedule_fires_once_in_its_partition_whatever_the_schedulers(
    make_objects: Factory, clock: MockClock
) -> None:
    cron_clock = MockClock()
    async with partitioned(make_objects, clock) as engine:
        owner = CronScheduler(engine.owned_queue, cron_clock)
        other = CronScheduler(lambda name: None, cron_clock)  # a process owning none
        for scheduler in (owner, other):
            scheduler.schedule("tick", "* * * * *", "ticks", b"t")
        async with owner, other:
            await asyncio.wait_for(cron_clock.wait_for_sleepers(2), LIMIT)
            cron_clock.advance(60)
            await asyncio.wait_for(cron_clock.wait_for_sleepers(2), LIMIT)
        home = partition_of("tick", P)
        pending = [part.queue.stats("ticks").pending for part in engine.every_partition()]
        assert pending == [1 if p == home else 0 for p in range(P)]


async def doubled(ctx: BulkContext) -> int:
    return int(ctx.input) * 2


async def test_a_bulk_batch_runs_in_the_partition_of_its_group(
    make_objects: Factory, clock: MockClock
) -> None:
    async with partitioned(make_objects, clock) as engine:
        bulk = Bulk(engine.owned_queue, doubled)
        report = await asyncio.wait_for(bulk.run(range(10)), LIMIT)
        assert (report.total, report.succeeded) == (10, 10)
        assert bulk.runtime is not None
        assert bulk.runtime.queue is engine.owned_queue(report.group_id)
        status = await bulk.group(report.group_id).status()
        assert status.succeeded == 10
        with pytest.raises(InvalidArgument, match=report.group_id):
            await Bulk(lambda group_id: None, doubled).run(range(10))


async def _owned_partitions(engine: durable.Engine, count: int) -> set[int]:
    """Wait until ``engine`` owns ``count`` partitions (the pool rebalanced); which."""

    def owned() -> set[int]:
        return {p for p, part in enumerate(engine.every_partition()) if part.owner}

    session = engine._session
    assert isinstance(session, PartitionedSession)
    async with asyncio.timeout(LIMIT):  # the pool's heartbeats run on real time
        await session.wait_until(lambda: len(owned()) == count)
    return owned()


async def test_a_pool_member_starts_keyless_runs_in_partitions_it_owns(
    make_objects: Factory, clock: MockClock
) -> None:
    """Run ids minted by a worker that owns some partitions land in those,
    so its own starts commit locally (no hop through the other's inbox)."""
    objects = make_objects()
    timing = {"ttl": 1.0, "heartbeat": 0.2}
    async with durable.Engine(objects, clock=clock, partitions=P, **timing) as first:
        assert first.owner
        async with durable.Engine(objects, clock=clock, partitions=P, **timing) as second:
            mine = await _owned_partitions(second, P // 2)
            handles = [await increment.start(n) for n in range(24)]  # through `second`
            assert {partition_of(h.run_id, P) for h in handles} <= mine
            assert [await result(h) for h in handles] == [n + 1 for n in range(24)]
            # A run id given by the caller still goes where it hashes.
            theirs = next(
                f"given-{n}" for n in range(100) if partition_of(f"given-{n}", P) not in mine
            )
            assert await result(await increment.options(run_id=theirs).start(1)) == 2
