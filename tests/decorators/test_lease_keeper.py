"""`LeaseKeeper`: a workflow delivery's lease renewed on a timer of the
run's clock (no task), until stopped, lost or cancelled."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any, cast

from decorator_helpers import LIMIT, Factory, make_engine

import durable
from durable.decorators.context import RunContext
from durable.decorators.lease_keeper import LEASE, LeaseKeeper
from durable.errors import CancelRequested, ClaimLost
from durable.store.clock import MockClock


@dataclass
class Lease:
    clock: MockClock
    fail: BaseException | None = None
    renewed_at: list[int] = field(default_factory=list)

    def ensure_at_least(self, remaining: float) -> int:
        assert remaining == LEASE
        if self.fail is not None:
            raise self.fail
        self.renewed_at.append(self.clock.now_ms())
        return self.clock.now_ms() + round(remaining * 1000)


@dataclass
class Delivery:
    lease: Lease


@dataclass
class Run:
    clock: MockClock
    delivery: Delivery
    run_id: str = "r1"


def keeper_of(lease: Lease, lost: list[str]) -> LeaseKeeper:
    run: Any = Run(lease.clock, Delivery(lease))
    return LeaseKeeper(cast(RunContext, run), lambda: lost.append("lost"))


async def turns(n: int = 3) -> None:
    for _ in range(n):
        await asyncio.sleep(0)


async def test_it_renews_at_once_then_every_third_of_the_lease_until_stopped() -> None:
    clock = MockClock()
    start = clock.now_ms()
    lease, lost = Lease(clock), []
    tasks = len(asyncio.all_tasks())
    keeper = keeper_of(lease, lost)
    assert lease.renewed_at == [start]  # at once, not a turn later
    assert len(asyncio.all_tasks()) == tasks  # a timer, not a task
    assert clock.sleepers == 1
    for _ in range(3):
        clock.advance(LEASE / 3)
        await turns()
    third = round(LEASE / 3 * 1000)
    assert lease.renewed_at == [start + i * third for i in range(4)]
    keeper.stop()
    keeper.stop()  # idempotent
    assert clock.sleepers == 0
    clock.advance(LEASE)
    await turns()
    assert len(lease.renewed_at) == 4
    assert lost == []


async def test_a_stop_between_the_timer_and_its_call_renews_no_more() -> None:
    """A `MockClock` timer fires in two steps (its future, then the call):
    a delivery that ends in between neither renews nor reports a loss."""
    clock = MockClock()
    lease, lost = Lease(clock), []
    keeper = keeper_of(lease, lost)
    clock.advance(LEASE / 3)  # the timer's future resolves; the call is scheduled
    keeper.stop()
    lease.fail = ClaimLost("job-1")  # a settled claim, were it renewed
    await turns()
    assert len(lease.renewed_at) == 1
    assert lost == []
    assert clock.sleepers == 0


async def test_a_lost_lease_is_reported_once_and_renewal_ends() -> None:
    clock = MockClock()
    lease, lost = Lease(clock), []
    keeper_of(lease, lost)
    lease.fail = ClaimLost("job-1")
    clock.advance(LEASE / 3)
    await turns()
    assert lost == ["lost"]
    assert clock.sleepers == 0


async def test_a_run_asked_to_cancel_is_not_renewed_nor_reported_lost() -> None:
    """Its cancellation token ends the delivery."""
    clock = MockClock()
    lease, lost = Lease(clock, fail=CancelRequested("job-1")), []
    keeper_of(lease, lost)
    assert lost == []
    assert clock.sleepers == 0


async def test_an_unexpected_renewal_error_ends_the_delivery_as_lost() -> None:
    clock = MockClock()
    lease, lost = Lease(clock, fail=RuntimeError("registry broke")), []
    keeper_of(lease, lost)
    assert lost == ["lost"]
    assert clock.sleepers == 0


GATE: dict[str, asyncio.Event] = {}
RAN: list[str] = []


@durable.step
async def long_step(name: str) -> str:
    RAN.append(name)
    GATE[name + ":in"].set()
    await GATE[name].wait()
    return name.upper()


@durable.workflow(name="lease.long")
async def long_run(name: str) -> str:
    return await long_step(name)


async def test_a_delivery_longer_than_its_lease_keeps_it_and_runs_once(
    make_objects: Factory, clock: MockClock
) -> None:
    """Five minutes of the clock in one delivery (`LEASE` is 60 s): the
    reaper never takes the run back, its step runs once."""
    GATE["long"], GATE["long:in"] = asyncio.Event(), asyncio.Event()
    RAN.clear()
    async with make_engine(make_objects, clock):
        handle = await long_run.start("long")
        await asyncio.wait_for(GATE["long:in"].wait(), LIMIT)
        idle = clock.sleepers
        for _ in range(30):
            clock.advance(10.0)
            await asyncio.wait_for(clock.wait_for_sleepers(idle), LIMIT)
        GATE["long"].set()
        assert await asyncio.wait_for(handle.result(), LIMIT) == "LONG"
    assert RAN == ["long"]
