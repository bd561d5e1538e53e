"""`LogWriter.flush_inline` and `ObjectStore.create_now`: a waiter with
nothing else to do flushes its group on the loop's thread, only when that
is safe, and nothing is lost or reordered when it declines or fails."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

from durable.errors import ObjectStoreError
from durable.store.log import LogOptions, LogReader, LogWriter, WriteBatch
from durable.store.objects import MemoryObjectStore, SegmentObjectStore, segments
from durable.store.objects.prefixed import PrefixedObjectStore
from durable.store.queue import OpenOptions, Queue

OPTIONS = LogOptions(checkpoint_on_close=False)


@pytest.fixture(autouse=True)
def quick_disk(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every disk counts as quick (appends on the loop's thread from the
    first, not after the moving average of `INLINE_APPEND_MAX` settled)."""
    monkeypatch.setattr(segments, "INLINE_APPEND_MAX", 10.0)


def put(key: bytes, value: bytes = b"v") -> WriteBatch:
    return WriteBatch().put(key, value)


async def settled() -> None:
    """Let what opening started run (loop turns, no clock) until nothing is ready."""
    for _ in range(50):
        await asyncio.sleep(0)
        if not asyncio.get_running_loop()._ready:  # type: ignore[attr-defined]
            return


async def test_a_lazy_commit_is_flushed_inline_and_is_durable(tmp_path: Path) -> None:
    w = await LogWriter.open(SegmentObjectStore(tmp_path), OPTIONS)
    await settled()
    before = w.stats.log_objects
    d = w.commit(put(b"a"), lazy=True)
    assert not d.done()
    assert w.flush_inline(d)
    assert d.done()
    assert w.stats.log_objects == before + 1
    assert not w.flush_inline(d)  # its group is gone: nothing to flush
    e = w.commit(put(b"b"), lazy=True)  # the next group takes the next slot
    await settled()
    assert w.flush_inline(e)
    assert await e == await d + 1
    await w.close()
    reader = await LogReader.open(SegmentObjectStore(tmp_path))
    assert reader.state.get(b"a") == b"v"
    assert reader.state.get(b"b") == b"v"


async def test_it_declines_while_other_work_is_ready_or_a_flush_is_in_flight(
    tmp_path: Path,
) -> None:
    w = await LogWriter.open(SegmentObjectStore(tmp_path), OPTIONS)
    d = w.commit(put(b"a"), lazy=True)
    await settled()
    asyncio.get_running_loop().call_soon(lambda: None)  # a plain callback cannot join it
    other = asyncio.ensure_future(asyncio.sleep(0))  # a ready task could join the group
    assert not w.flush_inline(d)
    assert not d.done()
    await other
    flushing = w.commit(put(b"b"))  # an awaited commit: the flusher takes it
    assert flushing is d  # one group
    await asyncio.sleep(0)  # the flusher runs: that group is in flight or done
    later = w.commit(put(b"c"), lazy=True)
    if not d.done():
        assert not w.flush_inline(later)  # never two flushes at once
    await d
    await settled()
    assert w.flush_inline(later)
    await w.close()


async def test_a_store_that_cannot_create_now_leaves_it_to_the_flusher() -> None:
    w = await LogWriter.open(MemoryObjectStore(), OPTIONS)
    d = w.commit(put(b"a"), lazy=True)
    assert not w.flush_inline(d)
    assert not d.done()
    w.flush_within(0)
    await d
    await w.close()


async def test_a_failed_inline_create_changes_nothing_and_the_flusher_makes_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = SegmentObjectStore(tmp_path)
    w = await LogWriter.open(store, OPTIONS)
    seq = w.stats.log_objects

    def failing(name: str, data: bytes) -> bool:
        raise ObjectStoreError("disk hiccup", name=name)

    monkeypatch.setattr(store, "create_now", failing)
    d = w.commit(put(b"a"), lazy=True)
    await settled()
    assert not w.flush_inline(d)
    assert not d.done()
    monkeypatch.delattr(store, "create_now")
    w.flush_within(0)
    await d
    assert w.stats.log_objects == seq + 1
    await w.close()
    reader = await LogReader.open(SegmentObjectStore(tmp_path))
    assert reader.state.get(b"a") == b"v"


async def test_create_now_appends_log_names_only_and_passes_through_a_prefix(
    tmp_path: Path,
) -> None:
    store = SegmentObjectStore(tmp_path)
    part = PrefixedObjectStore(store, "p001/")
    await part.claim_log()
    await part.create("log/00000000000000000001", b"first")  # makes the segment
    assert part.create_now("log/00000000000000000002", b"second")
    assert await part.get("log/00000000000000000002") == b"second"
    assert (tmp_path / "p001" / "segments").is_dir()
    assert not part.create_now("blob/x", b"a blob")  # not a log name: an ordinary create
    assert not (tmp_path / "p001" / "blob").exists()
    assert not PrefixedObjectStore(MemoryObjectStore(), "p001/").create_now(
        "log/00000000000000000001", b"x"
    )
    await part.close()
    await store.close()


async def _flushes(q: Queue, op: Callable[[], Awaitable[object]]) -> tuple[int, int]:
    """(inline creates, flusher creates) made while ``op`` runs."""
    writer = q.writer
    counts = [0, 0]
    create_now, create = writer.objects.create_now, writer._create

    def inline(name: str, data: bytes) -> bool:
        made = create_now(name, data)
        counts[0] += made
        return made

    async def flusher(seq: int, data: bytes) -> object:
        counts[1] += 1
        return await create(seq, data)

    writer.objects.create_now = inline  # type: ignore[method-assign]
    writer._create = flusher  # type: ignore[method-assign]
    try:
        await op()
    finally:
        del writer.objects.create_now, writer._create
    return counts[0], counts[1]


async def test_an_awaited_queue_transaction_on_an_idle_loop_is_flushed_by_its_caller(
    tmp_path: Path,
) -> None:
    """Nothing else could join its group: the caller writes it, no task
    switch to the flusher; with a task ready, the flusher groups as before."""
    q = await Queue.open(SegmentObjectStore(tmp_path), OpenOptions(reaper_interval=3600))
    await settled()
    assert await _flushes(q, lambda: q.enqueue("jobs", b"a")) == (1, 0)

    async def with_a_task_ready() -> None:
        other = asyncio.ensure_future(asyncio.sleep(0))
        await q.enqueue("jobs", b"b")
        await other

    await settled()
    assert await _flushes(q, with_a_task_ready) == (0, 1)
    claim = await q.claim("jobs")
    assert claim is not None
    await settled()
    assert await _flushes(q, lambda: q.ack(claim)) == (1, 0)  # a settlement too
    await q.close()
    reopened = await Queue.open(SegmentObjectStore(tmp_path), OpenOptions(reaper_interval=3600))
    stats = reopened.stats("jobs")
    assert (stats.pending, stats.done) == (1, 1)  # "a" acked, "b" pending: both durable
    await reopened.close()
