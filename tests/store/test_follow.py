"""`Follower`: a background task that keeps a `LogReader` caught up (issue 14)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest

from durable._logging import capture_logs
from durable.errors import CorruptObject, ObjectStoreError, StoreClosed
from durable.store.clock import MockClock
from durable.store.log import Follower, LogReader, LogWriter, State, WriteBatch
from durable.store.log.format import log_name
from durable.store.objects import FaultyObjectStore, LocalObjectStore, MemoryObjectStore
from durable.store.objects.base import ObjectStore
from durable.store.pacing import LOCAL_PACING, OBJECT_STORE_PACING, Pacing

Factory = Callable[[], ObjectStore]

#: Guards every wait that a working follower ends in milliseconds.
SOON = 10.0


def put(key: bytes, value: bytes) -> WriteBatch:
    return WriteBatch().put(key, value)


async def open_pair(make_objects: Factory) -> tuple[LogWriter, LogReader]:
    return await LogWriter.open(make_objects()), await LogReader.open(make_objects())


async def test_defaults_by_backend_and_bad_options() -> None:
    reader = LogReader(MemoryObjectStore(), State(), 0)
    f = Follower(reader)
    assert f.pacing == LOCAL_PACING
    assert (f.busy, f.idle, f.backoff, f.linger) == (0.002, 0.05, 2.0, 1.0)
    local = LogReader(LocalObjectStore("/nonexistent"), f.reader.state, 0)
    assert Follower(local).pacing == LOCAL_PACING
    slow = LogReader(FaultyObjectStore(MemoryObjectStore(), latency=1), f.reader.state, 0)
    assert Follower(slow).pacing == OBJECT_STORE_PACING
    assert Follower(slow, busy=10).idle == 10  # the default idle never undercuts busy
    assert Follower(slow, busy=0.1, idle=1, linger=0.5).pacing == Pacing(0.1, 1, 2.0, 0.5)
    for kwargs in (
        {"busy": 0},
        {"busy": -1},
        {"busy": True},
        {"idle": float("inf")},
        {"busy": 1, "idle": 0.5},
        {"backoff": 0.5},
        {"busy": "1"},
        {"linger": -1},
        {"linger": float("nan")},
    ):
        with pytest.raises(ValueError, match="Follower"):
            Follower(reader, **kwargs)  # type: ignore[arg-type]


async def test_a_started_follower_applies_commits_and_fires_watchers(
    make_objects: Factory,
) -> None:
    w, reader = await open_pair(make_objects)
    clock = MockClock(start_ms=1_000)  # never advanced: the follower runs anyway
    follower = Follower(reader, clock)
    follower.start()
    follower.start()  # idempotent
    watch = reader.watchers.watch(b"k")
    await w.commit(put(b"k", b"1"))
    await asyncio.wait_for(watch, SOON)
    assert reader.state.get(b"k") == b"1"
    await asyncio.wait_for(follower.refreshed(), SOON)
    assert follower.last_refresh_ms == 1_000
    await follower.stop()
    await follower.stop()  # idempotent
    assert not follower.running
    await w.close()


async def test_refreshed_waits_for_a_poll_that_begins_after_the_call(
    make_objects: Factory,
) -> None:
    w, reader = await open_pair(make_objects)
    follower = Follower(reader)
    follower.start()
    for i in range(5):
        await w.commit(put(b"k", b"%d" % i))
        await asyncio.wait_for(follower.refreshed(), SOON)
        assert reader.state.get(b"k") == b"%d" % i
    await follower.stop()
    await w.close()


async def test_empty_polls_back_off_to_idle_and_news_alone_does_not_bring_back_the_busy_pace(
    make_objects: Factory,
) -> None:
    """A view nobody waits on trails the log by up to ``idle``: following a
    busy log at the busy pace cost every idle client and standby more CPU
    than the owner spent running the work (issue 14, bench_clients)."""
    w, reader = await open_pair(make_objects)
    follower = Follower(reader, busy=0.001, idle=0.008, backoff=2, linger=0)
    follower.start()
    seen = []
    for _ in range(5):
        await asyncio.wait_for(follower.refreshed(), SOON)
        seen.append(follower.interval)
    assert seen == sorted(seen)  # growing, by the factor, to idle
    assert set(seen) <= {0.002, 0.004, 0.008}
    assert seen[-1] == 0.008
    await w.commit(put(b"k", b"1"))
    while reader.state.get(b"k") is None:
        await asyncio.wait_for(follower.refreshed(), SOON)
    assert follower.interval == 0.008  # news, but nobody waits: still idle
    watch = reader.watchers.watch(b"k")  # a caller waits: busy at once
    assert follower.interval == 0.001
    await w.commit(put(b"k", b"2"))
    await asyncio.wait_for(watch, SOON)
    await follower.stop()
    await w.close()


async def test_an_idle_follower_backs_off_to_20_polls_a_second(make_objects: Factory) -> None:
    """Issue 14 point 3: polling a local directory every 2 ms for ever cost
    14-20% of a core per idle client; once quiet for the linger, it polls
    every 50 ms (the default pacing)."""
    w = await LogWriter.open(make_objects())
    objects = FaultyObjectStore(make_objects())  # counts calls; no latency: still local
    reader = await LogReader.open(objects)
    follower = Follower(reader)
    assert follower.pacing == LOCAL_PACING
    follower.start()
    await w.commit(put(b"k", b"1"))
    while reader.state.get(b"k") is None:
        await asyncio.wait_for(follower.refreshed(), SOON)
    await asyncio.sleep(LOCAL_PACING.linger + 0.2)  # quiet: backed off to idle by now
    gets = objects.calls["get"]
    await asyncio.sleep(0.5)
    gets = objects.calls["get"] - gets
    assert 3 <= gets <= 15  # 0.5 s / 50 ms = 10 (at 2 ms: 250)
    await w.commit(put(b"k", b"2"))
    with follower.keep_busy():  # a caller waits: busy again at once
        assert follower.interval == LOCAL_PACING.busy
        while reader.state.get(b"k") != b"2":
            await asyncio.wait_for(follower.refreshed(), SOON)
    await follower.stop()
    await w.close()


async def test_a_pending_watch_holds_the_busy_pace(make_objects: Factory) -> None:
    """A caller waiting on a key (a client's ``handle.result()``) is served
    at the busy pace however long the run takes, not at the idle one."""
    w, reader = await open_pair(make_objects)
    follower = Follower(reader, busy=0.001, idle=60, linger=0)
    follower.start()
    await asyncio.wait_for(follower.refreshed(), SOON)
    await asyncio.wait_for(follower.refreshed(), SOON)
    assert follower.interval > 0.001  # nothing new, nobody waits: backing off
    watch = reader.watchers.watch(b"k")  # wakes the follower
    for _ in range(5):
        await asyncio.wait_for(follower.refreshed(), SOON)
        assert follower.interval == 0.001
    await w.commit(put(b"k", b"1"))
    await asyncio.wait_for(watch, SOON)
    await asyncio.wait_for(follower.refreshed(), SOON)
    await asyncio.wait_for(follower.refreshed(), SOON)
    assert follower.interval > 0.001  # the wait ended: backing off again
    await follower.stop()
    await w.close()


async def test_wake_polls_at_once(make_objects: Factory) -> None:
    w, reader = await open_pair(make_objects)
    follower = Follower(reader, busy=60, idle=60)  # left alone, it would not poll again
    first = asyncio.ensure_future(follower.refreshed())
    follower.start()
    await asyncio.wait_for(first, SOON)  # the first poll runs at start
    await w.commit(put(b"k", b"1"))
    waiting = asyncio.ensure_future(follower.refreshed())
    follower.wake()
    await asyncio.wait_for(waiting, SOON)
    assert reader.state.get(b"k") == b"1"
    await follower.stop()
    await w.close()


async def test_keep_busy_holds_the_busy_pace(make_objects: Factory) -> None:
    w, reader = await open_pair(make_objects)
    follower = Follower(reader, busy=0.001, idle=60, linger=0)
    follower.start()
    await asyncio.wait_for(follower.refreshed(), SOON)
    assert follower.interval > 0.001  # nothing new: backing off
    with follower.keep_busy():
        for _ in range(4):
            await asyncio.wait_for(follower.refreshed(), SOON)
            assert follower.interval == 0.001
    await asyncio.wait_for(follower.refreshed(), SOON)
    assert follower.interval > 0.001  # released: backing off again
    await follower.stop()
    await w.close()


async def test_failed_polls_are_logged_and_retried_and_never_end_the_loop(
    make_objects: Factory,
) -> None:
    w = await LogWriter.open(make_objects())
    objects = FaultyObjectStore(make_objects())
    reader = await LogReader.open(objects)
    follower = Follower(reader, busy=0.001, idle=0.001)
    denied = ObjectStoreError("denied")
    denied.transient = False  # the reader does not retry it: the poll fails
    objects.fail_next("get", denied, count=3)
    await w.commit(put(b"k", b"1"))
    with capture_logs() as logs:
        follower.start()
        await asyncio.wait_for(follower.refreshed(), SOON)
    assert follower.errors == 3
    assert reader.state.get(b"k") == b"1"
    failed = [e for e in logs if e["event"] == "view poll failed"]
    assert len(failed) == 3
    assert [e["retry_in"] for e in failed] == [0.002, 0.004, 0.008]  # backing off
    assert follower.running
    await follower.stop()
    await w.close()


async def test_a_corrupt_log_object_does_not_kill_the_loop(make_objects: Factory) -> None:
    w = await LogWriter.open(make_objects())
    gets, third = 0, asyncio.Event()

    async def count(_seconds: float) -> None:
        nonlocal gets
        gets += 1
        if gets == 3:  # the third poll's GET: two polls have failed
            third.set()

    objects = FaultyObjectStore(make_objects(), clock_sleep=count)
    reader = await LogReader.open(objects)
    objects.latency = 1e-9  # every call from now on is counted
    follower = Follower(reader, busy=0.001, idle=0.001)
    await make_objects().put(log_name(reader.seq + 1), b"garbage")
    with capture_logs() as logs:
        follower.start()
        await asyncio.wait_for(third.wait(), SOON)
    assert follower.running
    assert follower.errors >= 2
    assert any("is corrupt" in e.get("error", "") for e in logs)
    with pytest.raises(CorruptObject):
        await reader.refresh()
    await follower.stop()
    await w.close()


async def test_stop_fails_nothing_and_a_wait_completes_after_a_restart(
    make_objects: Factory,
) -> None:
    w, reader = await open_pair(make_objects)
    follower = Follower(reader, busy=60, idle=60)  # polls at start, then sleeps
    first = asyncio.ensure_future(follower.refreshed())
    follower.start()
    await asyncio.wait_for(first, SOON)
    watch = reader.watchers.watch(b"k")
    waiting = asyncio.ensure_future(follower.refreshed())
    await asyncio.sleep(0)  # registered while the follower sleeps
    await follower.stop()
    await w.commit(put(b"k", b"1"))
    for _ in range(20):
        await asyncio.sleep(0)
    assert not watch.done()  # nothing polls, and nothing failed
    assert not waiting.done()
    follower.start()  # the first poll runs at once
    await asyncio.wait_for(waiting, SOON)
    assert watch.done()
    assert watch.exception() is None
    await follower.stop()
    await w.close()


async def test_a_closed_reader_ends_the_loop_and_fails_the_waits(make_objects: Factory) -> None:
    w, reader = await open_pair(make_objects)
    follower = Follower(reader, busy=0.001, idle=0.001)
    follower.start()
    await asyncio.wait_for(follower.refreshed(), SOON)
    waiting = asyncio.ensure_future(follower.refreshed())
    await asyncio.sleep(0)
    reader.close()
    with pytest.raises(StoreClosed):
        await asyncio.wait_for(waiting, SOON)
    assert not follower.running
    with pytest.raises(StoreClosed):
        await follower.refreshed()
    await follower.stop()
    await w.close()
