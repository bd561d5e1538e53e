"""The cron scheduler on a mock clock: fires, dedup, oversleep, cold start, bad input."""

from __future__ import annotations

import asyncio
import datetime as dt
from collections.abc import AsyncIterator
from typing import Any

import pytest

from durable._logging import capture_logs
from durable.engine.cron import CronScheduler, next_fire_ms
from durable.errors import DuplicateScheduleName, InvalidArgument, InvalidCronExpression
from durable.store.clock import MockClock, SystemClock
from durable.store.objects import MemoryObjectStore
from durable.store.queue import JobRecord, JobStatus, OpenOptions, Queue

TARGET = "reports"
#: 2024-01-01T00:00:30Z: half a minute before a `* * * * *` fire.
T0 = 1_704_067_230_000


def at(hh: int, mm: int, ss: int = 0) -> int:
    """Epoch ms of 2024-01-01 hh:mm:ss UTC."""
    return round(dt.datetime(2024, 1, 1, hh, mm, ss, tzinfo=dt.UTC).timestamp() * 1000)


def pending(q: Queue) -> list[JobRecord]:
    return sorted(q.list_jobs(TARGET, JobStatus.PENDING).jobs, key=lambda r: r.id)


def fired(q: Queue) -> list[str | None]:
    """Dedup keys of the jobs the scheduler enqueued, oldest first."""
    return [r.dedup_key for r in pending(q)]


async def sleeping(clock: MockClock, sleepers: int = 1) -> None:
    """Wait until ``sleepers`` schedulers sleep on ``clock`` (10 s of waiting is a failure)."""
    await asyncio.wait_for(clock.wait_for_sleepers(sleepers), timeout=10)


async def advance(clock: MockClock, seconds: float, sleepers: int = 1) -> None:
    """Move the scheduler's clock, then wait until its schedulers sleep again."""
    clock.advance(seconds)
    await sleeping(clock, sleepers)


@pytest.fixture
def cron_clock() -> MockClock:
    """The schedulers' clock, separate from the queue's."""
    return MockClock(T0)


@pytest.fixture
async def memory_queue() -> AsyncIterator[Queue]:
    """A queue in memory, for tests that only register schedules."""
    q = await Queue.open(MemoryObjectStore(), OpenOptions(clock=MockClock()))
    yield q
    await q.close()


async def test_every_minute_fires_once_a_minute_with_the_schedule_options(
    open_queue: Any, cron_clock: MockClock
) -> None:
    q = await open_queue()
    cron = CronScheduler(q, clock=cron_clock)
    cron.schedule(
        "tick", "* * * * *", TARGET, b"payload", headers={"k": "v"}, priority=7, max_attempts=4
    )
    async with cron:
        await sleeping(cron_clock)
        assert cron.planned("tick") == at(0, 1)
        assert fired(q) == []
        await advance(cron_clock, 29.999)
        assert fired(q) == []  # not yet
        await advance(cron_clock, 0.001)
        assert fired(q) == [f"cron:tick:{at(0, 1)}"]
        await advance(cron_clock, 60)
        await advance(cron_clock, 30)  # half a minute: nothing more
        assert cron.planned("tick") == at(0, 3)
    assert not cron.running
    assert fired(q) == [f"cron:tick:{at(0, 1)}", f"cron:tick:{at(0, 2)}"]
    for job in pending(q):
        assert job.payload == b"payload"
        assert job.headers == {"k": "v"}
        assert job.priority == 7
        assert job.max_attempts == 4


async def test_two_schedulers_at_the_same_instant_enqueue_once(
    open_queue: Any, cron_clock: MockClock
) -> None:
    q = await open_queue()
    a, b = CronScheduler(q, clock=cron_clock), CronScheduler(q, clock=cron_clock)
    for cron in (a, b):
        cron.schedule("tick", "* * * * *", TARGET, b"x")
    async with a, b:
        await sleeping(cron_clock, 2)
        await advance(cron_clock, 30, sleepers=2)
    assert fired(q) == [f"cron:tick:{at(0, 1)}"]


async def test_a_restarted_scheduler_with_a_lagging_clock_does_not_fire_twice(
    open_queue: Any, cron_clock: MockClock
) -> None:
    q = await open_queue()
    first = CronScheduler(q, clock=cron_clock)
    first.schedule("tick", "* * * * *", TARGET, b"x")
    async with first:
        await sleeping(cron_clock)
        await advance(cron_clock, 30)
    await q.close()
    # Another process on the same store, whose clock is 10 s behind.
    q = await open_queue()
    assert fired(q) == [f"cron:tick:{at(0, 1)}"]
    lagging = MockClock(at(0, 0, 50))
    second = CronScheduler(q, clock=lagging)
    second.schedule("tick", "* * * * *", TARGET, b"x")
    async with second:
        await sleeping(lagging)
        assert second.planned("tick") == at(0, 1)
        await advance(lagging, 10)
    assert fired(q) == [f"cron:tick:{at(0, 1)}"]


async def test_an_oversleep_fires_the_planned_instant_once_and_drops_the_skipped(
    open_queue: Any, cron_clock: MockClock
) -> None:
    q = await open_queue()
    cron = CronScheduler(q, clock=cron_clock)
    cron.schedule("tick", "* * * * *", TARGET, b"x")
    async with cron:
        await sleeping(cron_clock)
        await advance(cron_clock, 5 * 60)  # to 00:05:30: slept through 00:01 .. 00:05
        assert fired(q) == [f"cron:tick:{at(0, 1)}"]
        assert cron.planned("tick") == at(0, 6)
        await advance(cron_clock, 30)
    assert fired(q) == [f"cron:tick:{at(0, 1)}", f"cron:tick:{at(0, 6)}"]


async def test_a_cold_start_does_not_backfill(open_queue: Any, cron_clock: MockClock) -> None:
    q = await open_queue()
    cron = CronScheduler(q, clock=cron_clock)
    cron.schedule("tick", "* * * * *", TARGET, b"x")
    cron.schedule("daily", "0 0 * * *", TARGET, b"d")  # fired 30 s before the start
    async with cron:
        await sleeping(cron_clock)
        assert cron.planned("daily") == at(0, 0) + 24 * 3600 * 1000
    assert fired(q) == []
    # Down from 00:00:30 to 00:03:30 with 00:01 planned: started again, it
    # plans 00:04 and enqueues nothing for what it missed while stopped.
    cron_clock.advance(3 * 60)
    async with cron:
        await sleeping(cron_clock)
        assert cron.planned("tick") == at(0, 4)
        assert fired(q) == []
        await advance(cron_clock, 30)
    assert fired(q) == [f"cron:tick:{at(0, 4)}"]


async def test_the_soonest_of_several_schedules_wakes_the_scheduler(
    open_queue: Any, cron_clock: MockClock
) -> None:
    q = await open_queue()
    cron = CronScheduler(q, clock=cron_clock)
    cron.schedule("hourly", "0 * * * *", TARGET, b"h")
    cron.schedule("every-5", "*/5 * * * *", TARGET, b"5")
    async with cron:
        await sleeping(cron_clock)
        for _ in range(12):
            await advance(cron_clock, 5 * 60)
    keys = fired(q)
    assert keys.count(f"cron:hourly:{at(1, 0)}") == 1
    assert [k for k in keys if k is not None and k.startswith("cron:every-5:")] == [
        f"cron:every-5:{at(0, m)}" for m in range(5, 60, 5)
    ] + [f"cron:every-5:{at(1, 0)}"]


@pytest.mark.parametrize(
    "expression",
    [
        "* * * *",  # 4 fields
        "* * * * * *",  # 6 fields (seconds)
        "0 0 1 1 * 2024",  # 6 fields (year)
        "0 0 0 1 1 * 2024",  # 7 fields
        "garbage",
        "",
        "61 * * * *",  # out of range
        "* 24 * * *",
        "* * 32 * *",
        "* * * 13 *",
        "@hourly",
        "0 0 L * *",  # croniter extensions
        "0 0 * * 5#3",
        "H * * * *",
        "0 0 ? * *",
        "* * * jan-foo *",
    ],
)
def test_an_invalid_expression_is_refused_naming_the_schedule(
    expression: str, memory_queue: Queue
) -> None:
    cron = CronScheduler(memory_queue)
    with pytest.raises(InvalidCronExpression) as err:
        cron.schedule("nightly", expression, TARGET, b"x")
    assert err.value.name == "nightly"
    assert err.value.expression == expression
    assert "'nightly'" in str(err.value)
    assert cron.schedules == []


def test_valid_posix_forms_are_accepted(memory_queue: Queue) -> None:
    cron = CronScheduler(memory_queue)
    for i, expression in enumerate(
        ["0 9 * * 1-5", "*/15 0-6 1,15 * *", "0 12 * jan,JUL mon-fri", "5 4 * * sun", "0 0 29 2 *"]
    ):
        cron.schedule(f"s{i}", expression, TARGET, b"x")
    assert len(cron.schedules) == 5


def test_a_duplicate_name_is_refused_and_the_first_schedule_kept(memory_queue: Queue) -> None:
    cron = CronScheduler(memory_queue)
    cron.schedule("report", "0 9 * * *", TARGET, b"first")
    with pytest.raises(DuplicateScheduleName) as err:
        cron.schedule("report", "0 10 * * *", "other", b"second")
    assert err.value.name == "report"
    assert [(s.name, s.payload) for s in cron.schedules] == [("report", b"first")]


def test_bad_schedule_options_are_refused(memory_queue: Queue) -> None:
    cron = CronScheduler(memory_queue)
    with pytest.raises(InvalidArgument):
        cron.schedule("p", "* * * * *", TARGET, b"x", priority=-1)
    with pytest.raises(InvalidArgument):
        cron.schedule("m", "* * * * *", TARGET, b"x", max_attempts=2**32)
    with pytest.raises(InvalidArgument):
        cron.schedule("b", "* * * * *", TARGET, "not bytes")  # type: ignore[arg-type]
    with pytest.raises(InvalidArgument):
        cron.schedule("", "* * * * *", TARGET, b"x")
    assert cron.schedules == []


def test_the_scheduler_runs_on_the_wall_clock_by_default(memory_queue: Queue) -> None:
    cron = CronScheduler(memory_queue)
    assert isinstance(cron.clock, SystemClock)
    assert cron.clock is not memory_queue.clock


def test_next_fire_is_strictly_after_now_in_utc() -> None:
    assert next_fire_ms("* * * * *", at(0, 1)) == at(0, 2)
    assert next_fire_ms("* * * * *", at(0, 1) - 1) == at(0, 1)
    assert next_fire_ms("30 14 * * *", at(0, 0)) == at(14, 30)
    assert next_fire_ms("0 0 30 2 *", at(0, 0)) is None


async def test_unsatisfiable_expressions_warn_and_wait_for_stop(
    open_queue: Any, cron_clock: MockClock
) -> None:
    q = await open_queue()
    cron = CronScheduler(q, clock=cron_clock)
    cron.schedule("feb-30", "0 0 30 2 *", TARGET, b"x")
    cron.schedule("apr-31", "0 0 31 4 *", TARGET, b"x")
    with capture_logs() as logs:
        cron.start()
        for _ in range(100):  # event-loop turns, not time: the task runs to its wait
            if logs:
                break
            await asyncio.sleep(0)
        assert cron.running
        await asyncio.wait_for(cron.stop(), timeout=5)
    warnings = [e for e in logs if e["log_level"] == "warning"]
    assert len(warnings) == 1
    assert warnings[0]["schedules"] == ["feb-30", "apr-31"]
    assert cron_clock.sleepers == 0
    assert fired(q) == []


async def test_an_unsatisfiable_schedule_does_not_stop_the_others(
    open_queue: Any, cron_clock: MockClock
) -> None:
    q = await open_queue()
    cron = CronScheduler(q, clock=cron_clock)
    cron.schedule("feb-30", "0 0 30 2 *", TARGET, b"x")
    cron.schedule("tick", "* * * * *", TARGET, b"x")
    async with cron:
        await sleeping(cron_clock)
        await advance(cron_clock, 30)
        assert cron.planned("feb-30") is None
    assert fired(q) == [f"cron:tick:{at(0, 1)}"]


async def test_stop_while_sleeping_returns_at_once(open_queue: Any, cron_clock: MockClock) -> None:
    q = await open_queue()
    cron = CronScheduler(q, clock=cron_clock)
    cron.schedule("yearly", "0 0 1 1 *", TARGET, b"x")
    cron.start()
    await sleeping(cron_clock)
    await asyncio.wait_for(cron.stop(), timeout=5)  # the clock never moves
    assert not cron.running
    assert cron_clock.sleepers == 0
    await cron.stop()  # idempotent


async def test_no_schedules_waits_for_stop(open_queue: Any, cron_clock: MockClock) -> None:
    q = await open_queue()
    cron = CronScheduler(q, clock=cron_clock)
    shutdown = asyncio.Event()
    task = asyncio.create_task(cron.run(shutdown))
    await asyncio.sleep(0)
    assert cron.running
    assert not task.done()
    shutdown.set()
    await asyncio.wait_for(task, timeout=5)
    assert not cron.running


async def test_schedules_are_registered_before_running(
    open_queue: Any, cron_clock: MockClock
) -> None:
    q = await open_queue()
    cron = CronScheduler(q, clock=cron_clock)
    cron.schedule("tick", "* * * * *", TARGET, b"x")
    async with cron:
        await sleeping(cron_clock)
        with pytest.raises(InvalidArgument):
            cron.schedule("late", "* * * * *", TARGET, b"x")
        with pytest.raises(InvalidArgument):
            cron.start()


async def test_a_failed_enqueue_is_logged_and_the_schedule_goes_on(
    open_queue: Any, cron_clock: MockClock
) -> None:
    q = await open_queue()
    cron = CronScheduler(q, clock=cron_clock)
    cron.schedule("tick", "* * * * *", TARGET, b"x")
    async with cron:
        await sleeping(cron_clock)
        await q.close()  # every enqueue now fails
        with capture_logs() as logs:
            await advance(cron_clock, 30)
        assert cron.planned("tick") == at(0, 2)
        assert cron.running
    errors = [e for e in logs if e["log_level"] == "error"]
    assert [(e["event"], e["schedule"], e["fire_ms"]) for e in errors] == [
        ("cron enqueue failed", "tick", at(0, 1))
    ]
