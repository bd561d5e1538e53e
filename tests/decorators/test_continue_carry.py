"""What crosses a ``durable.continue_as_new`` (issue 19 point 3): a run's
open streams (values written by every incarnation's body, in order, none
skipped as a replay of the previous incarnation's) and pending requests (a
request sent while one incarnation runs is answered by a later one, once).

On a `MockClock`, memory and local stores (``DURABLE_TEST_PARTITIONS=8``:
on 8 partitions)."""

from __future__ import annotations

import asyncio
from typing import Any

from decorator_helpers import Factory, make_engine, result, wait_parked

import durable
from durable.store.clock import MockClock


@durable.workflow(name="carry.chatter")
async def chatter(turn: int, turns: int) -> int:
    """Write two values per incarnation to one stream; continue until ``turns``."""
    await durable.write_stream("out", f"{turn}a")
    await durable.write_stream("out", f"{turn}b")
    if turn + 1 < turns:
        durable.continue_as_new(turn + 1, turns)
    await durable.close_stream("out")
    return turn


async def test_every_incarnations_body_writes_land_in_one_stream_in_order(
    make_objects: Factory, clock: MockClock
) -> None:
    async with make_engine(make_objects, clock) as engine:
        handle = await chatter.options(run_id="carry-s").start(0, 4)
        assert await result(handle) == 3
        items = [v async for v in handle.read_stream("out")]
        assert items == [f"{t}{x}" for t in range(4) for x in "ab"]
        assert await handle.stream_offset("out") == 8
        assert (await engine.handle("carry-s").status()).incarnation == 3  # type: ignore[union-attr]


@durable.workflow(name="carry.session")
async def session(answered: int) -> list[Any]:
    """Answer one ``ask`` request per incarnation (its value doubled); after
    the first, continue as new; the second incarnation ends."""
    req = await durable.receive("ask")
    assert req is not None
    await req.reply(req.value * 2)
    if answered == 0:
        durable.continue_as_new(answered + 1)
    return [answered]


async def test_a_request_sent_before_the_continue_is_answered_by_the_next_incarnation(
    make_objects: Factory, clock: MockClock
) -> None:
    async with make_engine(make_objects, clock) as engine:
        handle = await session.options(run_id="carry-r").start(0)
        await wait_parked(engine, "carry-r")
        # Both sent before the first incarnation answers either: one waits
        # across the continue for the second incarnation.
        answers = await asyncio.gather(
            handle.request("ask", 1, timeout=30), handle.request("ask", 5, timeout=30)
        )
        assert sorted(answers) == [2, 10]
        assert await result(handle) == [1]
