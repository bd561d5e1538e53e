"""The workflows of the CLI tests (pinned names: a CLI process imports this
module with ``--import cli_flows`` to fork their runs)."""

from __future__ import annotations

import asyncio

import durable


@durable.step(name="cli.double")
async def double(x: int) -> int:
    return 2 * x


@durable.step(name="cli.flaky", max_attempts=2, backoff=durable.Backoff(initial=0.0))
async def flaky(x: int) -> int:
    raise ValueError(f"bad input {x}")


@durable.workflow(name="cli.child")
async def child(x: int) -> int:
    return await double(x)


@durable.workflow(name="cli.ok")
async def ok(x: int) -> int:
    first = await double(x)
    await durable.publish("progress", {"done": 1})
    return first + await child(first)


@durable.workflow(name="cli.fails")
async def fails(x: int) -> int:
    await double(x)
    return await flaky(x)


@durable.workflow(name="cli.waits")
async def waits(key: str) -> str:
    await double(1)
    value = await durable.wait_for_signal(key)
    return f"got {value}"


GATES: dict[str, asyncio.Event] = {}


@durable.job(name="cli.gated", max_attempts=1)
async def gated(key: str) -> str:
    """A job that ends when ``GATES[key]`` is set (at once for a key without one);
    a key starting with ``fail`` raises."""
    gate = GATES.get(key)
    if gate is not None:
        await gate.wait()
    if key.startswith("fail"):
        raise ValueError(f"bad item {key}")
    return key.upper()
