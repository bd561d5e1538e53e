"""`LogWriter.check_fenced`: an idle writer learns it was fenced (issue 13 point 10)."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from durable.errors import Fenced, ObjectStoreError
from durable.store.log import LogOptions, LogWriter, WriteBatch
from durable.store.log.format import log_name
from durable.store.objects import FaultyObjectStore
from durable.store.objects.base import ObjectStore

Factory = Callable[[], ObjectStore]


def put(key: bytes, value: bytes) -> WriteBatch:
    return WriteBatch().put(key, value)


async def test_an_idle_fenced_writer_stops_at_its_next_check(make_objects: Factory) -> None:
    a = await LogWriter.open(make_objects())
    await a.commit(put(b"a", b"1"))
    assert not await a.check_fenced()  # still the owner
    watcher = a.watchers.watch(b"never-written")
    lazy = a.commit(put(b"lazy", b"1"), lazy=True)  # waits for a flush that never comes
    stopped: list[BaseException] = []
    a.add_stop_callback(stopped.append)
    b = await LogWriter.open(make_objects())
    assert a.failure is None  # nothing told it yet
    assert await a.check_fenced()
    assert isinstance(a.failure, Fenced)
    assert a.failure.seq == a.seq + 1  # b's open marker
    with pytest.raises(Fenced):
        await watcher
    with pytest.raises(Fenced):
        await lazy
    with pytest.raises(Fenced):
        a.commit(put(b"z", b"z"))
    with pytest.raises(Fenced):
        await a.watchers.watch(b"later")  # a watch after the stop fails at once
    assert stopped == [a.failure]
    assert await a.check_fenced()  # asked again: still fenced, no I/O needed
    await a.close()  # writes nothing: no checkpoint of a stale state
    await b.commit(put(b"b", b"2"))
    assert b.state.get(b"lazy") is None
    await b.close()


async def test_a_writer_fenced_long_ago_finds_the_kept_open_marker(make_objects: Factory) -> None:
    a = await LogWriter.open(make_objects(), LogOptions(checkpoint_on_close=False))
    await a.commit(put(b"a", b"1"))
    b = await LogWriter.open(make_objects(), LogOptions(checkpoint_max_objects=2))
    for i in range(10):
        await b.commit(put(b"b%d" % i, b"x"))
        await b.wait_idle()
    await b.close()  # checkpoints and trims all of b's log but its open marker
    assert await a.check_fenced()
    await a.close()


async def test_the_check_is_one_read_and_a_failed_read_is_not_fencing(
    make_objects: Factory,
) -> None:
    objects = FaultyObjectStore(make_objects())
    w = await LogWriter.open(objects)
    before = dict(objects.calls)
    assert not await w.check_fenced()
    assert {
        op: n - before.get(op, 0) for op, n in objects.calls.items() if n != before.get(op)
    } == {"get": 1}
    objects.fail_next("get")
    assert not await w.check_fenced()  # transient: try again at the next interval
    objects.fail_next("get", ObjectStoreError("denied"))
    assert not await w.check_fenced()
    assert w.failure is None
    await w.commit(put(b"k", b"v"))
    await w.close()


async def test_bytes_that_are_not_this_writers_at_its_next_name_are_fencing(
    make_objects: Factory,
) -> None:
    objects = make_objects()
    w = await LogWriter.open(objects)
    await objects.create(log_name(w.seq + 1), b"not a log object")
    assert await w.check_fenced()
    assert isinstance(w.failure, Fenced)
    await w.close()
