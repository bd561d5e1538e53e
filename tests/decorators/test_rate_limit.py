"""Rate limits (issue 18 point 6): ``@workflow(rate_limit=(n, period_s))``.

On a `MockClock`, memory and local stores (``DURABLE_TEST_PARTITIONS=8``:
on 8 partitions, where the runs live in the workflow's home partition)."""

from __future__ import annotations

import asyncio

import pytest
from decorator_helpers import LIMIT, Factory, make_engine, wait_started
from deferral_helpers import drive, due_at, settled

import durable
from durable import WorkflowState
from durable.decorators.ratelimit import RateLimit, Window, decide
from durable.errors import DecoratorError
from durable.store.clock import MockClock

#: (run argument, ms since the test's start on its clock) of each start of `ping`'s body.
starts: list[tuple[int, int]] = []
clocks: list[MockClock] = []
T0 = MockClock().now_ms()


@pytest.fixture(autouse=True)
def _fresh(clock: MockClock) -> None:
    starts.clear()
    clocks[:] = [clock]


@durable.step(name="rate.stamp")
async def stamp(i: int) -> int:
    return i


@durable.workflow(name="rate.ping", rate_limit=(2, 10))
async def ping(i: int) -> int:
    starts.append((i, clocks[0].now_ms() - T0))
    return await stamp(i)


def assert_within_limit(times: list[int], n: int, period_ms: int) -> None:
    times = sorted(times)
    for a, b in zip(times, times[n:], strict=False):
        assert b - a >= period_ms, f"more than {n} starts within {period_ms} ms: {times}"


async def test_at_most_n_runs_start_per_period_and_the_rest_wait(
    make_objects: Factory, clock: MockClock
) -> None:
    async with make_engine(make_objects, clock) as engine:
        handles = [await ping.start(i) for i in range(7)]
        await settled(engine, handles)
        # Two ran at once; five wait, pending, each with its own wake-up time.
        assert len(starts) == 2
        waiting = [h for h in handles if due_at(engine, h.run_id) is not None]
        assert len(waiting) == 5
        for h in waiting:
            status = await h.status()
            assert status is not None
            assert status.state is WorkflowState.PENDING
        assert len({due_at(engine, h.run_id) for h in waiting}) == 5
        await drive(engine, clock, handles)
        results = [await asyncio.wait_for(h.result(), LIMIT) for h in handles]
        assert results == list(range(7))  # none failed
        assert_within_limit([t for _, t in starts], 2, 10_000)
        assert len(starts) == 7  # each ran once
        # The backlog drained at the limit: 7 runs, 2 per 10 s.
        assert max(t for _, t in starts) <= 35_000


async def test_a_second_engine_is_held_by_the_same_window(
    make_objects: Factory, clock: MockClock
) -> None:
    """The window is on the store: a restarted owner keeps counting."""
    async with make_engine(make_objects, clock) as engine:
        first = [await ping.start(i) for i in range(2)]
        for h in first:
            await asyncio.wait_for(h.result(), LIMIT)
    async with make_engine(make_objects, clock) as engine:
        later = await ping.start(2)
        await settled(engine, [later])
        assert due_at(engine, later.run_id) == T0 + 10_000  # not before the window has room
        await drive(engine, clock, [later])
        assert await later.result() == 2
    assert [t for _, t in starts] == [0, 0, 10_000]


async def test_runs_started_by_clients_share_the_window(
    make_objects: Factory, clock: MockClock
) -> None:
    """Starts from a client (another process's role) are counted by the owner."""
    async with (
        make_engine(make_objects, clock) as owner,
        make_engine(make_objects, clock, role="client") as client,
    ):
        assert not client.owner
        handles = [await ping.start(i) for i in range(3)]  # the client is current
        for h in handles:
            await asyncio.wait_for(h.status(), LIMIT)
        mine = [owner.handle(h.run_id) for h in handles]
        for h in mine:
            await asyncio.wait_for(wait_started(owner, h.run_id), LIMIT)
        await settled(owner, mine)
        assert len(starts) == 2
        await drive(owner, clock, mine)
        assert sorted(t for _, t in starts) == [0, 0, 10_000]


@pytest.mark.parametrize(
    "bad",
    [(0, 10), (-1, 10), (1.5, 10), (True, 10), (2, 0), (2, -1), (2, float("inf")), (2,), "2/s"],
)
def test_a_bad_rate_limit_is_refused_at_decoration(bad: object) -> None:
    with pytest.raises(DecoratorError, match=r"'rate\.bad'.*rate_limit"):

        @durable.workflow(name="rate.bad", rate_limit=bad)  # type: ignore[arg-type]
        async def bad_limit() -> None:
            pass


def test_decide_admits_n_per_window_and_books_spaced_wake_ups() -> None:
    rate = RateLimit(2, 10_000)
    w, wake = decide(Window(), rate, 0, woken=False)
    assert wake is None
    w, wake = decide(w, rate, 1, woken=False)
    assert wake is None
    assert w.starts == (0, 1)
    w, wake = decide(w, rate, 2, woken=False)
    assert wake == 10_000  # the oldest start leaves the window then
    w, wake = decide(w, rate, 3, woken=False)
    assert wake == 15_000  # booked period/n after the previous booking
    w, wake = decide(w, rate, 10_000, woken=True)
    assert wake is None
    assert w.starts == (1, 10_000)
    # A woken run that finds the window full books nothing and waits for room.
    w2, wake = decide(w, rate, 10_000, woken=True)
    assert wake == 10_001
    assert w2.booked == w.booked
