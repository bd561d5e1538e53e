"""A workflow on a schedule: ``python -m examples.scheduled_report``.

``@workflow(schedule="0 9 * * *", schedule_timezone="Europe/Paris")``
starts a report every day at 09:00 Paris time. The engine runs on a
`MockClock`, so three days pass in well under a second: each fire starts
one run (its id says which fire), a restart after two days of downtime
fires once, late, and a backfill asks for the days that were missed.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import sys
import tempfile

import durable
from durable import Engine
from durable.store.clock import MockClock

DAY = 24 * 3600


@durable.step(name="scheduled_report.count_orders")
async def count_orders() -> int:
    return 42


@durable.workflow(
    name="scheduled_report.daily", schedule="0 9 * * *", schedule_timezone="Europe/Paris"
)
async def daily_report() -> str:
    orders = await count_orders()
    return f"{orders} orders"


async def wait_for_fires(engine: Engine, count: int) -> list[str]:
    """The runs the schedule started, once there are ``count`` (each finished)."""
    while True:
        page = await engine.runs(attributes={"schedule": "scheduled_report_daily"})
        if len(page.runs) >= count:
            ids = sorted(r.run_id for r in page.runs)
            for run_id in ids:
                await engine.handle(run_id).result()
            return ids
        await asyncio.sleep(0.01)  # a demo's poll: the runs start in the engine's tasks


async def main(store: str) -> None:
    # 2024-03-01 08:00 in Paris (07:00 UTC).
    clock = MockClock(int(dt.datetime(2024, 3, 1, 7, 0, tzinfo=dt.UTC).timestamp() * 1000))
    async with Engine(store, clock=clock) as engine:
        [info] = await engine.schedules()
        print(f"schedule {info.schedule_id!r}: {info.cron!r} in {info.timezone}")
        print(f"next fire: {info.next_fire:%Y-%m-%d %H:%M} UTC")
        for day in range(1, 3):
            clock.advance(DAY)
            for run_id in await wait_for_fires(engine, day):
                print(f"  run {run_id}: {await engine.handle(run_id).result()}")
            print(f"after day {day}: {day} run(s)")
    clock.advance(2 * DAY)  # two days with no engine running
    async with Engine(store, clock=clock) as engine:
        runs = await wait_for_fires(engine, 3)
        print(f"after two days of downtime: {len(runs)} runs (one late fire, not two)")
        missed = await engine.backfill_schedule(
            "scheduled_report_daily", clock.now_ms() - 3 * DAY * 1000, clock.now_ms()
        )
        print(f"backfill of the last three days asked for {len(missed)} fires")
        runs = await wait_for_fires(engine, 4)
        print(f"runs now: {len(runs)} (fires that ran already started nothing)")
        for run_id in runs:
            print(f"  {run_id}")


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1] if len(sys.argv) > 1 else tempfile.mkdtemp()))
