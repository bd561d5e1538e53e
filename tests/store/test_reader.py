"""Read-only views that follow a store across writer restarts."""

from __future__ import annotations

from collections.abc import Callable

from durable.store.log import LogReader, LogWriter, WriteBatch
from durable.store.log.format import CKPT_PREFIX, LOG_PREFIX
from durable.store.objects.base import ObjectStore
from durable.store.queue import Queue, QueueReader

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
