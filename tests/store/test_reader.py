"""Read-only views that follow a store across writer restarts."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest

from durable.errors import ObjectNotFound, StoreClosed
from durable.store.log import Follower, LogOptions, LogReader, LogWriter, State, WriteBatch
from durable.store.log.format import CKPT_PREFIX, LOG_PREFIX, log_name
from durable.store.objects import FaultyObjectStore, MemoryObjectStore, open_object_store
from durable.store.objects.base import ObjectStore
from durable.store.queue import Queue, QueueReader
from durable.testing.cloud import StoreLocation

Factory = Callable[[], ObjectStore]


async def test_queue_reader_sees_a_restarted_writers_commits_in_one_refresh(
    make_objects: Factory,
) -> None:
    # Issue 13 point 9, as reported: the second writer's open marker survives
    # its close-time trim and continued the reader's seq without a gap.
    first = await Queue.open(make_objects())
    await first.kv.put(b"a", b"1")
    reader = await QueueReader.open(make_objects())
    assert reader.kv.get(b"a") == b"1"
    await first.close()
    second = await Queue.open(make_objects())
    await second.kv.put(b"b", b"2")
    await second.close()
    await reader.refresh()
    assert reader.kv.get(b"b") == b"2"
    assert reader.kv.get(b"a") == b"1"


async def test_log_reader_reloads_when_a_checkpoint_covers_more_than_its_tail(
    make_objects: Factory,
) -> None:
    objects = make_objects()
    w1 = await LogWriter.open(make_objects())
    await w1.commit(WriteBatch().put(b"a", b"1"))
    reader = await LogReader.open(make_objects())
    await w1.close()  # checkpoint at close; its own marker stays
    w2 = await LogWriter.open(make_objects())
    await w2.commit(WriteBatch().put(b"b", b"2"))
    await w2.commit(WriteBatch().put(b"c", b"3"))
    await w2.close()
    logs = await objects.list(LOG_PREFIX)
    ckpts = await objects.list(CKPT_PREFIX)
    assert len(ckpts) == 1
    assert len(logs) == 2  # only the two open markers are left
    seq = await reader.refresh()
    assert seq == w2.seq
    assert dict(reader.state.scan()) == {b"a": b"1", b"b": b"2", b"c": b"3"}
    assert await reader.refresh() == seq  # nothing new: nothing changes


async def test_log_reader_tails_a_restarted_writer_that_has_not_checkpointed(
    make_objects: Factory,
) -> None:
    w1 = await LogWriter.open(make_objects())
    await w1.commit(WriteBatch().put(b"a", b"1"))
    reader = await LogReader.open(make_objects())
    await w1.close()
    w2 = await LogWriter.open(make_objects())
    await w2.commit(WriteBatch().put(b"b", b"2"))  # no close: the log is live
    assert await reader.refresh() == w2.seq
    assert reader.state.get(b"b") == b"2"
    await w2.close()


# ---------------------------------------------------------------- watchers


async def test_a_reader_watch_fires_when_a_refresh_applies_a_write_of_the_key(
    make_objects: Factory,
) -> None:
    w = await LogWriter.open(make_objects())
    reader = await LogReader.open(make_objects())
    fut = reader.watchers.watch(b"k")
    other = reader.watchers.watch(b"other")
    await w.commit(WriteBatch().put(b"k", b"1"))
    assert not fut.done()  # durable, but this reader has not read it yet
    await reader.poll()
    assert fut.done()
    assert reader.state.get(b"k") == b"1"  # the state holds the write when the watch fires
    assert not other.done()
    deleted = reader.watchers.watch(b"k")
    await w.commit(WriteBatch().delete(b"k"))
    await reader.refresh()
    assert deleted.done()
    assert not other.done()
    await w.close()
    reader.close()
    assert other.done()
    with pytest.raises(StoreClosed):
        other.result()


async def test_kv_watch_works_over_a_queue_reader(make_objects: Factory) -> None:
    q = await Queue.open(make_objects())
    reader = await QueueReader.open(make_objects())
    assert reader.kv.read_only
    fut = reader.kv.watch(b"result")
    withdrawn = reader.kv.watch(b"result")
    reader.kv.unwatch(b"result", withdrawn)
    await q.kv.put(b"result", b"42")
    await reader.refresh()
    assert fut.done()
    assert reader.kv.get(b"result") == b"42"
    assert not withdrawn.done()
    pending = reader.kv.watch(b"never")
    await reader.close()
    assert pending.done()
    with pytest.raises(StoreClosed):
        pending.result()
    with pytest.raises(StoreClosed):
        reader.kv.watch(b"later").result()  # a watch after close fails at once
    with pytest.raises(StoreClosed):
        await reader.refresh()
    await q.close()


async def test_a_checkpoint_reload_fires_every_watcher(make_objects: Factory) -> None:
    """The trimmed log may have written a key and restored it (``born``: put,
    then deleted, as a run's step pointer is when the run ends), which the
    reader cannot tell from a key nobody wrote: every watcher fires, and
    each re-reads what it waits for."""
    w1 = await LogWriter.open(make_objects())
    await w1.commit(WriteBatch().put(b"same", b"1").put(b"changed", b"1").put(b"gone", b"1"))
    reader = await LogReader.open(make_objects())
    same, changed = reader.watchers.watch(b"same"), reader.watchers.watch(b"changed")
    gone, born = reader.watchers.watch(b"gone"), reader.watchers.watch(b"born")
    await w1.close()
    w2 = await LogWriter.open(make_objects())
    await w2.commit(WriteBatch().put(b"changed", b"2").delete(b"gone").put(b"born", b"1"))
    await w2.commit(WriteBatch().delete(b"born"))
    await w2.close()  # checkpoint and trim: only open markers are left of the log
    assert await reader.refresh() == w2.seq
    assert changed.done()
    assert gone.done()
    assert born.done()  # born and gone again within the trimmed log
    assert same.done()
    assert reader.state.get(b"born") is None
    reader.close()


# ---------------------------------------------------------------- the tail


def calls_since(objects: FaultyObjectStore, before: dict[str, int]) -> dict[str, int]:
    return {op: n - before.get(op, 0) for op, n in objects.calls.items() if n != before.get(op)}


async def test_a_poll_tails_the_log_with_gets_and_lists_only_every_list_every_empty_polls(
    make_objects: Factory,
) -> None:
    w = await LogWriter.open(make_objects())
    objects = FaultyObjectStore(make_objects())
    reader = await LogReader.open(objects, list_every=3)
    for i in range(3):
        await w.commit(WriteBatch().put(b"k%d" % i, b"v"))
    before = dict(objects.calls)
    assert await reader.poll() == w.seq
    # seq+1 alone, then seq+2 and seq+3 at once, then a window of 4 that finds nothing
    assert calls_since(objects, before) == {"get": 1 + 2 + 4}
    for _ in range(2):  # idle: one GET per poll, no LIST
        before = dict(objects.calls)
        await reader.poll()
        assert calls_since(objects, before) == {"get": 1}
    before = dict(objects.calls)
    await reader.poll()  # the third empty poll in a row: one LIST of ckpt/
    assert calls_since(objects, before) == {"get": 1, "list": 1}
    before = dict(objects.calls)
    await reader.refresh()  # a refresh always LISTs ckpt/ once
    assert calls_since(objects, before) == {"get": 1, "list": 1}
    await w.close()


async def test_a_poll_behind_a_trimmed_log_catches_up_within_list_every_polls(
    make_objects: Factory,
) -> None:
    w = await LogWriter.open(make_objects(), LogOptions(checkpoint_max_objects=1))
    await w.commit(WriteBatch().put(b"k", b"0"))
    await w.wait_idle()
    reader = await LogReader.open(make_objects(), list_every=3)
    for i in range(1, 5):
        await w.commit(WriteBatch().put(b"k", b"%d" % i))
        await w.wait_idle()  # each commit checkpoints and trims the log before it
    await w.close()
    seen = [await reader.poll() for _ in range(3)]
    assert seen[:2] == [seen[0]] * 2  # the GETs find nothing: the log was trimmed
    assert reader.state.get(b"k") == b"4"  # the third empty poll LISTed and reloaded
    assert seen[2] == w.seq


async def test_a_poll_lists_at_once_after_an_open_marker(make_objects: Factory) -> None:
    # Issue 13 point 9 through the cheap tail: the second writer's open marker
    # continues the reader's seq; the commits after it are only in its checkpoint.
    w1 = await LogWriter.open(make_objects())
    await w1.commit(WriteBatch().put(b"a", b"1"))
    reader = await LogReader.open(make_objects(), list_every=1000)
    await w1.close()
    w2 = await LogWriter.open(make_objects())
    await w2.commit(WriteBatch().put(b"b", b"2"))
    await w2.close()
    assert await reader.poll() == w2.seq
    assert reader.state.get(b"b") == b"2"


async def test_a_gap_in_the_tail_makes_a_poll_list(make_objects: Factory) -> None:
    w = await LogWriter.open(make_objects())
    objects = FaultyObjectStore(make_objects())
    reader = await LogReader.open(objects, list_every=1000)
    start = reader.seq
    for i in range(3):
        await w.commit(WriteBatch().put(b"k%d" % i, b"v"))
    # the second GET (seq + 2) finds nothing, the third (seq + 3) an object: a
    # checkpoint's trim raced the window
    objects.fail_next("get", ObjectNotFound(log_name(start + 2)), skip=1)
    before = dict(objects.calls)
    assert await reader.poll() == start + 1  # applies what it read in sequence
    assert calls_since(objects, before) == {"get": 3, "list": 1}
    assert await reader.poll() == w.seq  # and reads on from there
    await w.close()


async def test_refreshes_and_polls_run_one_at_a_time(make_objects: Factory) -> None:
    w = await LogWriter.open(make_objects())
    gate, first = asyncio.Event(), True

    async def first_call_waits(_seconds: float) -> None:
        nonlocal first
        if first:
            first = False
            await gate.wait()

    objects = FaultyObjectStore(make_objects(), clock_sleep=first_call_waits)
    reader = await LogReader.open(make_objects())
    reader.objects = objects  # every GET of the tail goes through the gate
    objects.latency = 1.0
    start = reader.seq
    for i in range(20):
        await w.commit(WriteBatch().put(b"k", b"%d" % i))
    slow = asyncio.create_task(reader.poll())  # its first GET waits at the gate
    await asyncio.sleep(0)
    fast = asyncio.create_task(reader.refresh())
    for _ in range(50):  # let the refresh run as far as it can
        await asyncio.sleep(0)
    assert reader.seq == start  # it waits for the poll in progress
    gate.set()
    assert await slow == w.seq
    assert await fast == w.seq
    assert reader.state.get(b"k") == b"19"
    await w.close()


def test_list_every_must_be_a_positive_int() -> None:
    for bad in (0, -1, True, 1.5):
        with pytest.raises(ValueError, match="list_every"):
            LogReader(MemoryObjectStore(), State(), 0, list_every=bad)  # type: ignore[arg-type]


async def test_the_tail_and_a_follower_on_every_backend(location: StoreLocation) -> None:
    objects = await open_object_store(location.url, location.options)
    w = await LogWriter.open(objects, LogOptions(checkpoint_max_objects=3))
    view = await open_object_store(location.url, location.options)
    reader = await LogReader.open(view, list_every=2)
    follower = Follower(reader, busy=0.01, idle=0.05)
    try:
        follower.start()
        watch = reader.watchers.watch(b"k")
        for i in range(8):  # checkpoints trim the log behind the reader now and then
            await w.commit(WriteBatch().put(b"k", b"%d" % i))
        await asyncio.wait_for(watch, 30)
        while reader.state.get(b"k") != b"7":
            await asyncio.wait_for(follower.refreshed(), 30)
        await w.close()  # a final checkpoint trims every log object
        w = await LogWriter.open(objects)  # an open marker after the trim
        await w.commit(WriteBatch().put(b"k", b"8"))
        await w.close()
        assert await reader.refresh() == w.seq
        assert reader.state.get(b"k") == b"8"
    finally:
        await follower.stop()
        reader.close()
        await w.close()
        await view.close()
        await objects.close()
