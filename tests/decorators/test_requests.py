"""Requests into a running workflow (issue 19 point 2): ``durable.receive``,
``Request.reply/reject``, ``handle.request`` and ``start_with_signal``, from
the owner and from a client engine (``DURABLE_TEST_PARTITIONS=8``: on 8
partitions). The kill -9 test is tests/crash/test_requests_kill.py."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest
from decorator_helpers import LIMIT, Factory, make_engine, promote_due, result, wait_parked

import durable
from durable.decorators.engine import Engine
from durable.decorators.request_keys import ring_key
from durable.engine import keys
from durable.errors import (
    InvalidArgument,
    NotInWorkflow,
    RequestAlreadyAnswered,
    RequestRejected,
    RequestUnanswered,
    RunNotFound,
    WrongRunState,
)
from durable.store.clock import MockClock


@durable.workflow(name="requests.adder")
async def adder(count: int) -> int:
    total = 0
    for _ in range(count):
        req = await durable.receive("add")
        assert req is not None
        if req.value < 0:
            await req.reject(f"{req.value} is negative")
            continue
        total += req.value
        await req.reply(total)
    return total


@durable.workflow(name="requests.gated")
async def gated(count: int) -> list[int]:
    await durable.wait_for_signal(f"go:{durable.run_id()}")
    seen = []
    for _ in range(count):
        req = await durable.receive("x")
        assert req is not None
        seen.append(req.value)
        await req.reply(req.value * 10)
    return seen


@durable.workflow(name="requests.patient")
async def patient(limit: float) -> str:
    req = await durable.receive("ask", timeout=limit)
    if req is None:
        return "nobody asked"
    await req.reply("yes")
    return "answered"


@durable.workflow(name="requests.rude")
async def rude() -> str:
    req = await durable.receive("ask")
    assert req is not None
    return f"ignored {req.value}"


@durable.workflow(name="requests.twice")
async def twice() -> str:
    req = await durable.receive("ask")
    assert req is not None
    await req.reply("first")
    try:
        await req.reply("second")
    except RequestAlreadyAnswered as e:
        return type(e).__name__
    return "answered twice"


@durable.workflow(name="requests.later")
async def later() -> str:
    req = await durable.receive("ask")
    assert req is not None
    await req.reply("noted")
    await durable.sleep(10)  # a later delivery replays the receive: its body is gone
    return f"{req.value} ({req.id == durable.run_id()})"


@durable.workflow(name="requests.chat")
async def chat(greeting: str) -> list[str]:
    said = [greeting]
    while said[-1] != "bye":
        said.append(await durable.wait_for_signal(f"chat:{durable.run_id()}"))
    return said


@asynccontextmanager
async def engines(make_objects: Factory, clock: MockClock, client: bool) -> AsyncIterator[Engine]:
    """A worker owning the store; yields it, or a client engine of the store."""
    async with make_engine(make_objects, clock) as owner:
        if not client:
            yield owner
            return
        async with make_engine(make_objects, clock, role="client") as other:
            yield other


@pytest.mark.parametrize("client", [False, True], ids=["owner", "client"])
async def test_requests_are_answered_in_order_and_rejected_with_a_reason(
    make_objects: Factory, clock: MockClock, client: bool
) -> None:
    async with engines(make_objects, clock, client) as engine:
        handle = await adder.start(3)
        ask = handle.request
        assert await asyncio.wait_for(ask("add", 2), LIMIT) == 2
        with pytest.raises(RequestRejected, match="-1 is negative") as rejected:
            await asyncio.wait_for(ask("add", -1), LIMIT)
        assert rejected.value.run_id == handle.run_id
        assert rejected.value.reason == "-1 is negative"
        assert await asyncio.wait_for(ask("add", 5), LIMIT) == 7
        assert await result(handle) == 7
        # Each answer discarded its request's body: nothing is left buffered.
        ring = ring_key(handle.run_id, "add")
        kv = engine.for_key(ring).queue.kv.internal()
        assert kv.count(keys.signal_buffer_key(ring + "/")) == 0
        with pytest.raises(WrongRunState, match=handle.run_id):  # ended: nothing is sent
            await handle.request("add", 1)


async def test_requests_sent_before_the_run_receives_are_all_kept(
    make_objects: Factory, clock: MockClock
) -> None:
    async with make_engine(make_objects, clock) as engine:
        handle = await gated.start(3)
        await wait_parked(engine, handle.run_id)  # waiting for "go", not receiving
        ring = ring_key(handle.run_id, "x")
        kv = engine.for_key(ring).queue.kv
        asks = []
        for value in (1, 2, 3):
            rung = kv.watch(keys.signal_buffer_key(ring))  # each request rings once
            asks.append(asyncio.ensure_future(handle.request("x", value)))
            await asyncio.wait_for(rung, LIMIT)
        # One ring is buffered (each replaced the last), but three requests.
        await engine.signal(f"go:{handle.run_id}", True)
        assert await asyncio.wait_for(asyncio.gather(*asks), LIMIT) == [10, 20, 30]
        assert await result(handle) == [1, 2, 3]


async def test_a_receive_times_out_with_none(make_objects: Factory, clock: MockClock) -> None:
    async with make_engine(make_objects, clock) as engine:
        handle = await patient.start(300)
        await wait_parked(engine, handle.run_id)
        clock.advance(299)
        assert promote_due(engine) == 0
        clock.advance(1)
        assert await result(handle) == "nobody asked"


async def test_a_request_before_the_timeout_is_answered(
    make_objects: Factory, clock: MockClock
) -> None:
    async with make_engine(make_objects, clock) as engine:
        handle = await patient.start(300)
        await wait_parked(engine, handle.run_id)
        assert await asyncio.wait_for(handle.request("ask"), LIMIT) == "yes"
        assert await result(handle) == "answered"


@pytest.mark.parametrize("client", [False, True], ids=["owner", "client"])
async def test_a_run_that_ends_without_answering_raises_unanswered(
    make_objects: Factory, clock: MockClock, client: bool
) -> None:
    async with engines(make_objects, clock, client):
        handle = await rude.start()
        with pytest.raises(RequestUnanswered, match=handle.run_id) as unanswered:
            await asyncio.wait_for(handle.request("ask", "please"), LIMIT)
        assert unanswered.value.name == "ask"
        assert await result(handle) == "ignored please"


async def test_a_replay_receives_the_journaled_request(
    make_objects: Factory, clock: MockClock
) -> None:
    async with make_engine(make_objects, clock):
        handle = await later.start()
        assert await asyncio.wait_for(handle.request("ask", "tea"), LIMIT) == "noted"
        waiting = await asyncio.wait_for(handle.waiting(), LIMIT)
        while waiting is not None and waiting.signal_key is not None:  # until in the sleep
            waiting = await asyncio.wait_for(handle.waiting(after=waiting), LIMIT)
        clock.advance(10)
        assert await result(handle) == "tea (False)"


async def test_a_request_is_answered_at_most_once(make_objects: Factory, clock: MockClock) -> None:
    async with make_engine(make_objects, clock):
        handle = await twice.start()
        assert await asyncio.wait_for(handle.request("ask"), LIMIT) == "first"
        assert await result(handle) == "RequestAlreadyAnswered"


async def test_a_request_times_out_at_the_caller(make_objects: Factory, clock: MockClock) -> None:
    async with make_engine(make_objects, clock) as engine:
        handle = await gated.start(1)  # never receives: it waits for "go"
        await wait_parked(engine, handle.run_id)
        sleeping = clock.sleepers
        asked = asyncio.ensure_future(handle.request("x", 1, timeout=30))
        await asyncio.wait_for(clock.wait_for_sleepers(sleeping + 1), LIMIT)  # the caller waits
        clock.advance(30)
        with pytest.raises(TimeoutError, match="withdrawn"):
            await asyncio.wait_for(asked, LIMIT)
        await handle.cancel()


async def test_bad_requests_are_typed_errors(make_objects: Factory, clock: MockClock) -> None:
    async with make_engine(make_objects, clock) as engine:
        with pytest.raises(RunNotFound, match="no-such-run"):
            await engine.handle("no-such-run").request("ask", 1)
        with pytest.raises(InvalidArgument, match="request name"):
            await engine.handle("no-such-run").request("a/b", 1)
        with pytest.raises(NotInWorkflow):
            await durable.receive("ask")


async def test_start_with_signal_starts_once_and_delivers_every_message(
    make_objects: Factory, clock: MockClock
) -> None:
    async with make_engine(make_objects, clock) as engine:
        starter = chat.options(run_id="chat-1")
        handle = await starter.start_with_signal("hello", key="chat:chat-1", value="hi")
        waiting = await asyncio.wait_for(handle.waiting(), LIMIT)
        assert waiting is not None
        # The first wait took "hi" (the signal rode the start); it waits again.
        while (status := await handle.status()) is not None and status.steps < 2:
            waiting = await asyncio.wait_for(handle.waiting(after=waiting), LIMIT)
            assert waiting is not None
        same = await starter.start_with_signal("hello", key="chat:chat-1", value="bye")
        assert same.run_id == "chat-1"
        assert await result(handle) == ["hello", "hi", "bye"]
        with pytest.raises(WrongRunState, match="chat-1"):
            await starter.start_with_signal("hello", key="chat:chat-1", value="again")
        assert (
            engine.for_key("chat:chat-1").queue.kv.get(keys.signal_buffer_key("chat:chat-1"))
            is None
        )
        with pytest.raises(InvalidArgument, match="run_id"):
            await chat.options().start_with_signal("x", key="k", value=1)


async def test_start_with_signal_commits_the_signal_with_the_run(
    make_objects: Factory, clock: MockClock
) -> None:
    # No worker runs it: the buffered signal appears in the commit that
    # creates the run (sent first, it would appear while the run is unknown).
    async with make_engine(make_objects, clock, concurrency={"default": 0}) as engine:
        key = ring_key("chat-2", "x")  # a key homed with the run on every store
        kv = engine.for_key(key).queue.kv
        runtime = engine.for_run("chat-2").workflows.default
        with_run: list[bool] = []
        written = kv.watch(keys.signal_buffer_key(key))
        written.add_done_callback(lambda _: with_run.append(runtime.status("chat-2") is not None))
        await chat.options(run_id="chat-2").start_with_signal("hello", key=key, value="hi")
        await asyncio.wait_for(written, LIMIT)
        assert with_run == [True]
        buffered = kv.get(keys.signal_buffer_key(key))
        assert buffered is not None
        assert engine.codec.loads(buffered, what="the signal") == "hi"
