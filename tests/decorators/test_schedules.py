"""Schedules for workflows (issue 18 point 3): fires on the engine's clock,
one run per fire instant, one late fire after downtime, pause, resume,
trigger, backfill, time zones, clients and partitioned stores
(``DURABLE_TEST_PARTITIONS=8`` runs these on 8 partitions)."""

from __future__ import annotations

import asyncio
import datetime as dt
from zoneinfo import ZoneInfo

import pytest
from decorator_helpers import LIMIT, Factory, make_engine, wait_started

import durable
from durable.decorators.engine import Engine
from durable.decorators.schedules import decorator_schedule_id
from durable.engine.schedules import fire_run_id, fires_between, next_fire
from durable.errors import (
    ArgumentMismatch,
    DecoratorError,
    InvalidCronExpression,
    InvalidSchedule,
    ScheduleNotFound,
)
from durable.store.clock import MockClock

T0 = 1_704_067_230_000  # 2024-01-01 00:00:30 UTC
MINUTE = 60_000
ran: list[str] = []


@pytest.fixture
def clock() -> MockClock:
    return MockClock(T0)


@pytest.fixture(autouse=True)
def _fresh() -> None:
    ran.clear()


@durable.workflow(name="schedules.report")
async def report(kind: str, copies: int = 1) -> str:
    ran.append(durable.run_id())
    return f"{kind} x{copies}"


@durable.workflow(name="schedules.heartbeat", schedule="*/2 * * * *")
async def heartbeat() -> str:
    return "beat"


def at(minute: int) -> int:
    """Epoch ms of 2024-01-01 00:<minute>:00 UTC."""
    return T0 - 30_000 + minute * MINUTE


def fired(engine: Engine, schedule_id: str, fire_ms: int) -> str:
    return engine.co_located(fire_run_id(schedule_id, fire_ms), schedule_id)


async def result_of(engine: Engine, run_id: str) -> object:
    await asyncio.wait_for(wait_started(engine, run_id), LIMIT)
    return await asyncio.wait_for(engine.handle(run_id).result(), LIMIT)


async def runs_of(engine: Engine, schedule_id: str) -> list[str]:
    page = await engine.runs(attributes={"schedule": schedule_id}, limit=500)
    return sorted(r.run_id for r in page.runs)


async def test_a_schedule_starts_a_run_per_fire_on_the_engine_clock(
    make_objects: Factory, clock: MockClock
) -> None:
    async with make_engine(make_objects, clock) as engine:
        info = await engine.schedule(report, "* * * * *", "daily", copies=2, schedule_id="tick")
        assert (info.schedule_id, info.workflow, info.cron, info.timezone) == (
            "tick",
            "schedules.report",
            "* * * * *",
            "UTC",
        )
        assert info.next_fire == dt.datetime(2024, 1, 1, 0, 1, tzinfo=dt.UTC)
        assert info.last_fire is None
        assert not info.paused
        clock.advance(30)
        first = fired(engine, "tick", at(1))
        assert first.startswith("tick-20240101T000100Z")
        assert await result_of(engine, first) == "daily x2"
        clock.advance(60)
        assert await result_of(engine, fired(engine, "tick", at(2))) == "daily x2"
        [listed] = [s for s in await engine.schedules() if s.schedule_id == "tick"]
        assert listed.last_fire == dt.datetime(2024, 1, 1, 0, 2, tzinfo=dt.UTC)
        assert listed.next_fire == dt.datetime(2024, 1, 1, 0, 3, tzinfo=dt.UTC)
        assert await runs_of(engine, "tick") == sorted([first, fired(engine, "tick", at(2))])


async def test_after_downtime_a_schedule_fires_once_not_once_per_missed_instant(
    make_objects: Factory, clock: MockClock
) -> None:
    async with make_engine(make_objects, clock) as engine:
        await engine.schedule(report, "* * * * *", "m", schedule_id="late")
        clock.advance(30)
        await result_of(engine, fired(engine, "late", at(1)))
    clock.advance(10 * 60)  # ten fires missed while no engine ran
    async with make_engine(make_objects, clock) as engine:
        # One late fire: the latest instant missed (00:11), then on from now.
        await result_of(engine, fired(engine, "late", at(11)))
        runs = await runs_of(engine, "late")
        assert runs == sorted([fired(engine, "late", at(1)), fired(engine, "late", at(11))])
        [info] = [s for s in await engine.schedules() if s.schedule_id == "late"]
        assert info.next_fire == dt.datetime(2024, 1, 1, 0, 12, tzinfo=dt.UTC)


async def test_pause_resume_trigger_and_unschedule(make_objects: Factory, clock: MockClock) -> None:
    async with make_engine(make_objects, clock) as engine:
        await engine.schedule(report, "* * * * *", "p", schedule_id="ctl")
        await engine.pause_schedule("ctl")
        [info] = [s for s in await engine.schedules() if s.schedule_id == "ctl"]
        assert info.paused
        clock.advance(5 * 60)  # fires while paused: none runs
        triggered = await engine.trigger_schedule("ctl")  # paused or not
        assert "-now-" in triggered.run_id
        assert await asyncio.wait_for(triggered.result(), LIMIT) == "p x1"
        assert await runs_of(engine, "ctl") == [triggered.run_id]
        await engine.resume_schedule("ctl")  # from now: 00:05:30 -> 00:06
        [info] = [s for s in await engine.schedules() if s.schedule_id == "ctl"]
        assert not info.paused
        assert info.next_fire == dt.datetime(2024, 1, 1, 0, 6, tzinfo=dt.UTC)
        clock.advance(30)
        await result_of(engine, fired(engine, "ctl", at(6)))
        assert len(await runs_of(engine, "ctl")) == 2  # nothing of the paused minutes
        assert await engine.unschedule("ctl") is True
        assert await engine.unschedule("ctl") is False
        assert "ctl" not in [s.schedule_id for s in await engine.schedules()]
        with pytest.raises(ScheduleNotFound, match="'ctl'"):
            await engine.pause_schedule("ctl")
        with pytest.raises(ScheduleNotFound, match="'ctl'"):
            await engine.trigger_schedule("ctl")


async def test_backfill_starts_one_run_per_fire_in_the_window_deduplicated(
    make_objects: Factory, clock: MockClock
) -> None:
    async with make_engine(make_objects, clock) as engine:
        await engine.schedule(report, "*/2 * * * *", "b", schedule_id="back")
        clock.advance(90)  # 00:02: fires on its own
        await result_of(engine, fired(engine, "back", at(2)))
        clock.advance(8 * 60)  # 00:10
        await result_of(engine, fired(engine, "back", at(10)))
        # Asked for: every fire of [23:50, 00:07): 23:50 ... 00:06, 00:02 ran already.
        start = dt.datetime(2023, 12, 31, 23, 50, tzinfo=dt.UTC)
        handles = await engine.backfill_schedule("back", start, at(7))
        expected = [at(m) for m in range(-10, 7, 2)]
        assert [h.run_id for h in handles] == [fired(engine, "back", f) for f in expected]
        for h in handles:
            assert await asyncio.wait_for(h.result(), LIMIT) == "b x1"
        runs = await runs_of(engine, "back")
        assert len(runs) == len(expected) + 1  # + 00:10; 00:02 is one run, not two
        assert len(ran) == len(runs)
        with pytest.raises(InvalidSchedule, match="by now"):
            await engine.backfill_schedule("back", at(0), at(60))
        with pytest.raises(InvalidSchedule, match="start < end"):
            await engine.backfill_schedule("back", at(5), at(5))


async def test_a_decorator_schedule_registers_when_an_owner_opens(
    make_objects: Factory, clock: MockClock
) -> None:
    sid = decorator_schedule_id("schedules.heartbeat")
    assert sid == "schedules_heartbeat"
    async with make_engine(make_objects, clock) as engine:
        [info] = [s for s in await engine.schedules() if s.schedule_id == sid]
        assert (info.cron, info.origin) == ("*/2 * * * *", "decorator")
        clock.advance(90)
        assert await result_of(engine, fired(engine, sid, at(2))) == "beat"
        await engine.pause_schedule(sid)
    async with make_engine(make_objects, clock) as engine:  # a restart keeps the pause
        [info] = [s for s in await engine.schedules() if s.schedule_id == sid]
        assert info.paused
        assert info.last_fire == dt.datetime(2024, 1, 1, 0, 2, tzinfo=dt.UTC)


async def test_a_client_manages_schedules_through_the_inbox(
    make_objects: Factory, clock: MockClock
) -> None:
    async with (
        make_engine(make_objects, clock) as owner,
        make_engine(make_objects, clock, role="client") as client,
    ):
        info = await client.schedule(report, "* * * * *", "c", schedule_id="remote")
        assert info.schedule_id == "remote"
        assert "remote" in [s.schedule_id for s in await owner.schedules()]
        clock.advance(30)
        await result_of(owner, fired(owner, "remote", at(1)))
        await client.pause_schedule("remote")
        assert [s.paused for s in await client.schedules() if s.schedule_id == "remote"] == [True]
        triggered = await client.trigger_schedule("remote")
        assert await asyncio.wait_for(triggered.result(), LIMIT) == "c x1"
        # Another process asks for fires that ran already: nothing new starts.
        handles = await client.backfill_schedule("remote", at(1), at(1) + 1)
        assert [h.run_id for h in handles] == [fired(owner, "remote", at(1))]
        assert len(await runs_of(owner, "remote")) == 2
        await client.resume_schedule("remote")
        assert await client.unschedule("remote") is True
        assert "remote" not in [s.schedule_id for s in await owner.schedules()]
        with pytest.raises(ScheduleNotFound):
            await client.resume_schedule("remote")


async def test_bad_input_is_refused_with_typed_errors_naming_it(
    make_objects: Factory, clock: MockClock
) -> None:
    async with make_engine(make_objects, clock) as engine:
        with pytest.raises(InvalidCronExpression, match="'bad'"):
            await engine.schedule(report, "61 * * * *", "x", schedule_id="bad")
        with pytest.raises(InvalidCronExpression, match="6 fields"):
            await engine.schedule(report, "* * * * * *", "x", schedule_id="bad")
        with pytest.raises(InvalidSchedule, match=r"'tz'.*'Mars/Olympus'"):
            await engine.schedule(
                report, "* * * * *", "x", schedule_id="tz", timezone="Mars/Olympus"
            )
        with pytest.raises(ArgumentMismatch, match=r"schedules\.report"):
            await engine.schedule(report, "* * * * *", schedule_id="noargs")
        with pytest.raises(InvalidSchedule, match="A-Za-z0-9"):
            await engine.schedule(report, "* * * * *", "x", schedule_id="no spaces")
        assert await engine.schedules() == [
            s for s in await engine.schedules() if s.origin == "decorator"
        ]
    with pytest.raises(DecoratorError, match=r"schedules\.needs_args.*engine\.schedule"):

        @durable.workflow(name="schedules.needs_args", schedule="* * * * *")
        async def needs_args(x: int) -> int:
            return x

    with pytest.raises(InvalidCronExpression, match="schedules_bad_cron"):

        @durable.workflow(name="schedules.bad_cron", schedule="every minute")
        async def bad_cron() -> None:
            return None


def test_daylight_saving_skipped_and_repeated_hours() -> None:
    ny = ZoneInfo("America/New_York")

    def utc(ms: int) -> dt.datetime:
        return dt.datetime.fromtimestamp(ms / 1000, tz=dt.UTC)

    # 2024-03-10: 02:00 EST jumps to 03:00 EDT; 02:30 does not exist that day.
    start = dt.datetime(2024, 3, 9, tzinfo=ny)
    fires = fires_between(
        "30 2 * * *",
        ny,
        int(start.timestamp() * 1000),
        int(dt.datetime(2024, 3, 12, tzinfo=ny).timestamp() * 1000),
    )
    assert [utc(f).astimezone(ny).strftime("%d %H:%M %Z") for f in fires] == [
        "09 02:30 EST",
        "10 03:00 EDT",  # once, at the end of the gap
        "11 02:30 EDT",
    ]
    # 2024-11-03: 02:00 EDT falls back to 01:00 EST; 01:30 happens twice.
    start = dt.datetime(2024, 11, 2, tzinfo=ny)
    fires = fires_between(
        "30 1 * * *",
        ny,
        int(start.timestamp() * 1000),
        int(dt.datetime(2024, 11, 5, tzinfo=ny).timestamp() * 1000),
    )
    assert [utc(f).strftime("%d %H:%M") for f in fires] == [
        "02 05:30",
        "03 05:30",  # the first 01:30 (EDT) only, not 06:30 (EST)
        "04 06:30",
    ]
    # Read in UTC, the same expression ignores the change.
    after = int(dt.datetime(2024, 3, 10, 6, 31, tzinfo=dt.UTC).timestamp() * 1000)
    assert utc(next_fire("30 2 * * *", ZoneInfo("UTC"), after)).hour == 2


async def test_a_schedule_fires_in_its_time_zone_across_a_dst_change(
    make_objects: Factory,
) -> None:
    # 2024-03-10 01:00 EST; the 02:30 fire that day comes at 03:00 EDT (07:00 UTC).
    clock = MockClock(int(dt.datetime(2024, 3, 10, 6, 0, tzinfo=dt.UTC).timestamp() * 1000))
    async with make_engine(make_objects, clock) as engine:
        info = await engine.schedule(
            report, "30 2 * * *", "ny", schedule_id="ny", timezone="America/New_York"
        )
        assert info.next_fire == dt.datetime(2024, 3, 10, 7, 0, tzinfo=dt.UTC)
        clock.advance(3600)
        fire = int(dt.datetime(2024, 3, 10, 7, 0, tzinfo=dt.UTC).timestamp() * 1000)
        assert await result_of(engine, fired(engine, "ny", fire)) == "ny x1"
        [info] = [s for s in await engine.schedules() if s.schedule_id == "ny"]
        assert info.next_fire == dt.datetime(2024, 3, 11, 6, 30, tzinfo=dt.UTC)  # 02:30 EDT
