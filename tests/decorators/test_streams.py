"""Durable streams (issue 19 point 1): ``durable.write_stream`` /
``close_stream`` and ``handle.read_stream`` / ``stream_offset``, in this
process, on memory and local stores (``DURABLE_TEST_PARTITIONS=8``: each
run in its partition). Client processes: test_streams_clients.py; kill -9
mid-step: tests/crash/test_streams_kill.py."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest
from decorator_helpers import LIMIT, Factory, archived, kv_count, make_engine, result, sweep_memos

import durable
from durable.decorators.streams import continue_records, decode_meta, meta_key, stream_prefix
from durable.errors import CodecError, InvalidArgument, NotInWorkflow, RunNotFound, StreamClosed
from durable.store.clock import MockClock

gates: dict[str, asyncio.Event] = {}


def gate(name: str) -> asyncio.Event:
    return gates.setdefault(name, asyncio.Event())


@pytest.fixture(autouse=True)
def _fresh() -> None:
    gates.clear()


async def read_all(handle: Any, key: str, offset: int = 0) -> list[Any]:
    """Every item of the stream, until it ends (bounded by `LIMIT`)."""

    async def read() -> list[Any]:
        return [item async for item in handle.read_stream(key, offset)]

    return await asyncio.wait_for(read(), LIMIT)


@durable.workflow(name="streams.body")
async def body(name: str) -> int:
    for i in range(3):
        await durable.write_stream("out", i)
    await durable.wait_for_signal(f"{name}:go")  # the next delivery replays the writes
    for i in range(3, 6):
        await durable.write_stream("out", i)
    return 6


@durable.step(name="streams.tokens")
async def tokens(name: str, n: int) -> str:
    for i in range(n):
        await durable.write_stream("tokens", f"t{i}")
    await gate(name).wait()
    return "done"


@durable.workflow(name="streams.chat")
async def chat(name: str) -> str:
    reply = await tokens(name, 3)
    await durable.close_stream("tokens")
    await durable.wait_for_signal(f"{name}:end")
    return reply


flaky_calls: dict[str, int] = {}


@durable.step(name="streams.flaky", max_attempts=3, backoff=durable.Backoff(initial=0))
async def flaky(name: str) -> int:
    flaky_calls[name] = attempt = flaky_calls.get(name, 0) + 1
    for i in range(2):
        await durable.write_stream("out", f"a{attempt}.{i}")
    if attempt < 3:
        raise RuntimeError(f"attempt {attempt} fails")
    return attempt


@durable.workflow(name="streams.retried")
async def retried(name: str) -> int:
    return await flaky(name)


@durable.step(name="streams.doomed")
async def doomed() -> None:
    await durable.write_stream("out", "partial")
    raise ValueError("no")


@durable.workflow(name="streams.failing")
async def failing() -> None:
    await doomed()


@durable.step(name="streams.many")
async def many(n: int) -> None:
    for i in range(n):
        await durable.write_stream("out", i)


@durable.workflow(name="streams.bulk")
async def bulk(n: int) -> int:
    await many(n)
    return n


@durable.workflow(name="streams.misuse")
async def misuse(what: str) -> str:
    if what == "lock":
        await durable.write_stream("out", threading.Lock())
    elif what == "closed":
        await durable.close_stream("out")
        await durable.write_stream("out", 1)
    elif what == "key":
        await durable.write_stream("", 1)
    return what


async def test_body_writes_appear_once_in_order(make_objects: Factory, clock: MockClock) -> None:
    async with make_engine(make_objects, clock) as engine:
        handle = await body.start("b1")
        reader = asyncio.create_task(read_all(handle, "out"))
        await asyncio.wait_for(handle.waiting(), LIMIT)
        assert await handle.stream_offset("out") == 3
        await engine.signal("b1:go")
        assert await result(handle) == 6
        assert await reader == [0, 1, 2, 3, 4, 5]  # the replayed writes wrote nothing
        assert await handle.stream_offset("out") == 6
        assert await read_all(handle, "out", 4) == [4, 5]
        assert await read_all(handle, "none") == []  # a run that ended ends its streams


async def test_step_writes_reach_readers_while_the_step_runs(
    make_objects: Factory, clock: MockClock
) -> None:
    async with make_engine(make_objects, clock) as engine:
        handle = await chat.start("c1")
        stream = handle.read_stream("tokens")
        seen = [await asyncio.wait_for(anext(stream), LIMIT) for _ in range(3)]
        assert seen == ["t0", "t1", "t2"]
        status = await handle.status()
        assert status is not None
        assert status.state == "running"  # the step still runs
        gate("c1").set()
        # The body closes the stream: the reader ends while the run waits.
        with pytest.raises(StopAsyncIteration):
            await asyncio.wait_for(anext(stream), LIMIT)
        status = await handle.status()
        assert status is not None
        assert not status.terminated  # it waits for c1:end
        await engine.signal("c1:end")
        assert await result(handle) == "done"


async def test_a_failed_attempt_is_announced_by_a_marker(
    make_objects: Factory, clock: MockClock
) -> None:
    flaky_calls.clear()
    async with make_engine(make_objects, clock):
        handle = await retried.start("r1")
        assert await result(handle) == 3
        items = await read_all(handle, "out")
    rid = handle.run_id
    assert items == [
        "a1.0",
        "a1.1",
        durable.StreamDiscarded(rid, "out", "streams.flaky", 1, 0, 2),
        "a2.0",
        "a2.1",
        durable.StreamDiscarded(rid, "out", "streams.flaky", 2, 3, 2),
        "a3.0",
        "a3.1",
    ]


async def test_a_failed_step_discards_its_last_attempt(
    make_objects: Factory, clock: MockClock
) -> None:
    async with make_engine(make_objects, clock):
        handle = await failing.start()
        with pytest.raises(ValueError, match="no"):
            await result(handle)
        rid = handle.run_id
        assert await read_all(handle, "out") == [
            "partial",
            durable.StreamDiscarded(rid, "out", "streams.doomed", 1, 0, 1),
        ]


async def test_step_writes_share_group_commits(make_objects: Factory, clock: MockClock) -> None:
    async with make_engine(make_objects, clock) as engine:
        handle = await bulk.start(500)
        writer = engine.for_run(handle.run_id).queue.writer
        before = writer.stats.log_objects
        assert await result(handle) == 500
        assert await read_all(handle, "out") == list(range(500))
        # 500 values, and the run's own records: a few log objects, not 500.
        assert writer.stats.log_objects - before < 20


async def test_streams_leave_memory_with_the_archive_and_go_with_the_run(
    make_objects: Factory, clock: MockClock
) -> None:
    async with make_engine(make_objects, clock, retention=60) as engine:
        handle = await bulk.start(300)  # over ARCHIVE_MIN_BYTES: archived
        await result(handle)
        await archived(engine, handle.run_id)
        assert kv_count(engine, stream_prefix(handle.run_id)) == 0
        assert await read_all(handle, "out") == list(range(300))  # from the archive
        assert await read_all(handle, "out", 298) == [298, 299]
        assert await handle.stream_offset("out") == 300
        clock.advance(61)
        await sweep_memos(engine)
        with pytest.raises(RunNotFound):
            await read_all(handle, "out")
        with pytest.raises(RunNotFound):
            await handle.stream_offset("out")


async def test_bad_input_raises_typed_errors(make_objects: Factory, clock: MockClock) -> None:
    with pytest.raises(NotInWorkflow, match="write_stream"):
        await durable.write_stream("out", 1)
    with pytest.raises(NotInWorkflow, match="close_stream"):
        await durable.close_stream("out")
    async with make_engine(make_objects, clock) as engine:
        handle = await misuse.start("lock")
        with pytest.raises(CodecError, match=f"stream 'out' of run '{handle.run_id}'"):
            await result(handle)
        handle = await misuse.start("closed")
        with pytest.raises(StreamClosed, match=f"stream 'out' of run '{handle.run_id}'"):
            await result(handle)
        assert await read_all(handle, "out") == []  # nothing was written
        with pytest.raises(InvalidArgument, match="stream key"):
            await result(await misuse.start("key"))
        with pytest.raises(RunNotFound, match="no-such-run"):
            await read_all(engine.handle("no-such-run"), "out")
        with pytest.raises(InvalidArgument, match="offset"):
            await read_all(handle, "out", -1)


# ------------------------------------------------------------------ from a client


async def test_a_client_reads_streams_as_they_are_written(
    make_objects: Factory, clock: MockClock
) -> None:
    """A ``role="client"`` engine (what a web server runs) reads through its
    own view of the log: the step's values while it runs, the end at close."""
    flaky_calls.clear()
    async with (
        make_engine(make_objects, clock) as owner,
        make_engine(make_objects, clock, role="client") as client,
    ):
        assert not client.owner
        handle = await chat.start("cl1")  # started by the client
        stream = handle.read_stream("tokens")
        seen = [await asyncio.wait_for(anext(stream), LIMIT) for _ in range(3)]
        assert seen == ["t0", "t1", "t2"]
        assert await handle.stream_offset("tokens") == 3
        gate("cl1").set()
        with pytest.raises(StopAsyncIteration):
            await asyncio.wait_for(anext(stream), LIMIT)
        await owner.signal("cl1:end")
        assert await result(handle) == "done"
        retry = await retried.start("cl2")
        assert await result(retry) == 3
        items = await read_all(retry, "out")
        marker = durable.StreamDiscarded(retry.run_id, "out", "streams.flaky", 1, 0, 2)
        assert items[2] == marker
        assert len(items) == 8
        big = await bulk.start(300)
        await result(big)
        await archived(owner, big.run_id)
        assert await read_all(big, "out", 290) == list(range(290, 300))
        with pytest.raises(RunNotFound, match="no-such-run"):
            await read_all(client.handle("no-such-run"), "out")


async def test_streams_on_a_partitioned_store(make_objects: Factory, clock: MockClock) -> None:
    """Eight partitions whatever ``DURABLE_TEST_PARTITIONS`` says: runs in
    several partitions, read by the owner and by a client."""
    async with (
        make_engine(make_objects, clock, partitions=8) as owner,
        make_engine(make_objects, clock, role="client", partitions=8) as client,
    ):
        handles = [await bulk.start(20 + i) for i in range(6)]
        partitions = {owner.for_run(h.run_id) for h in handles}
        assert len(partitions) > 1
        for i, handle in enumerate(handles):
            assert await result(handle) == 20 + i
            assert await read_all(handle, "out") == list(range(20 + i))
            again = client.handle(handle.run_id)
            assert await read_all(again, "out") == list(range(20 + i))
            assert await again.stream_offset("out") == 20 + i


async def test_continue_records_let_a_new_incarnation_write_from_its_body(
    make_objects: Factory, clock: MockClock
) -> None:
    """The hook for ``continue_as_new``: committed with the new incarnation,
    `continue_records` makes its body writes (ordinals from 0 again) land."""
    async with make_engine(make_objects, clock) as engine:
        handle = await body.start("k1")
        await asyncio.wait_for(handle.waiting(), LIMIT)
        kv = engine.for_run(handle.run_id).queue.kv.internal()
        puts = continue_records(kv, handle.run_id)
        assert list(puts) == [meta_key(handle.run_id, "out")]
        assert decode_meta(puts[meta_key(handle.run_id, "out")], handle.run_id, "out").body == 0
        assert continue_records(kv, "no-such-run") == {}
