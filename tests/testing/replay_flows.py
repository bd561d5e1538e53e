"""Workflows of the time-skipping and replay tests; `VERSION` switches their code."""

from __future__ import annotations

from durable import sleep, step, wait_for_signal, workflow

#: The "deployed" code: 1 as recorded, 2 with a step inserted, 3 with one removed.
VERSION = 1

DAY = 86400.0


@step(name="flows.charge")
async def charge(amount: int) -> int:
    return amount * 100


@step(name="flows.audit")
async def audit(cents: int) -> int:
    return cents + 1


@step(name="flows.notify")
async def notify(cents: int) -> str:
    return f"charged {cents}"


@workflow(name="flows.billing")
async def billing(amount: int) -> str:
    cents = await charge(amount)
    await sleep(30 * DAY)
    if VERSION == 2:
        cents = await audit(cents)
    if VERSION == 3:
        return "skipped"
    return await notify(cents)


@workflow(name="flows.monthly")
async def monthly(months: int) -> int:
    total = 0
    for month in range(months):
        await sleep(30 * DAY)
        total += await charge(month)
    return total


@workflow(name="flows.child")
async def child() -> str:
    await sleep(7 * DAY)
    return "child done"


@workflow(name="flows.parent")
async def parent() -> str:
    got = await child()
    await sleep(DAY)
    return f"parent saw {got}"


@workflow(name="flows.approval")
async def approval() -> object:
    await sleep(DAY)
    return await wait_for_signal("approve")


@workflow(name="flows.deadline")
async def deadline() -> object:
    return await wait_for_signal("maybe", timeout=3600)
