"""The workflows and jobs of the run view's tests, and the store they read."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

import durable
from durable import Engine

#: The error of run ``r-xss``: markup an HTML page must show as text.
XSS = "<script>window.__pwned = 1</script><b>bold</b>"


@durable.step(name="ui.double")
async def double(x: int) -> int:
    return 2 * x


@durable.step(name="ui.boom", max_attempts=2, backoff=durable.Backoff(initial=0.0))
async def boom(message: str) -> int:
    raise ValueError(message)


@durable.workflow(name="ui.ok")
async def ok(x: int) -> int:
    first = await double(x)
    await durable.publish("progress", {"done": 1})
    return first + await child(first)


@durable.workflow(name="ui.child")
async def child(x: int) -> int:
    return await double(x)


@durable.workflow(name="ui.fails")
async def fails(message: str) -> int:
    await double(1)
    return await boom(message)


@durable.workflow(name="ui.waits")
async def waits(key: str) -> str:
    await double(1)
    value = await durable.wait_for_signal(key)
    return f"got {value}"


@durable.job(name="ui.square")
async def square(x: int) -> int:
    return x * x


@dataclass(frozen=True)
class Built:
    """What `build` made: the store's URL."""

    url: str


async def build(url: str) -> Built:
    """Runs ``r-ok`` (succeeded, a child, a published key, attribute
    ``customer=c-17``), ``r-fails`` (failed: ``ValueError: disk full``),
    ``r-waits`` (waiting on signal ``approval/r-waits``), ``r-xss`` (failed
    with `XSS` as its error), and a job group of three squares."""
    async with Engine(url):
        run_ok = await ok.options(run_id="r-ok", attributes={"customer": "c-17"}).start(3)
        run_fails = await fails.options(run_id="r-fails").start("disk full")
        run_waits = await waits.options(run_id="r-waits", attributes={"order": "o-9"}).start(
            "approval/r-waits"
        )
        run_xss = await fails.options(run_id="r-xss").start(XSS)
        assert await run_ok.result() == 18
        with pytest.raises(ValueError, match="disk full"):
            await run_fails.result()
        with pytest.raises(ValueError, match="<script>"):
            await run_xss.result()
        await run_waits.waiting()
        assert await square.map([1, 2, 3]) == [1, 4, 9]
    return Built(url)


async def start_late(url: str, run_id: str) -> None:
    """Start and finish run ``run_id`` of ``ui.ok`` (while a view follows the store)."""
    async with Engine(url):
        handle = await ok.options(run_id=run_id).start(1)
        assert await handle.result() == 6
