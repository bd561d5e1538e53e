"""The run archive (bounded memory), invocation records and fork of a
terminated run, `RunNotFound`, `NotPublished` and the engine's retention.

The archived runs here are large (their records exceed
`archive.ARCHIVE_MIN_BYTES`); small runs keep their records in the KV
until their retention passes."""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

import pytest
from decorator_helpers import (
    LIMIT,
    PARTITIONS,
    Factory,
    archived,
    make_engine,
    result,
    sweep_memos,
    wait_parked,
)

import durable
from durable.decorators import archive
from durable.decorators.engine import Engine
from durable.decorators.journal import INLINE_MAX, journal_prefix
from durable.decorators.publish import published_prefix
from durable.engine import keys
from durable.errors import NotPublished, RunNotFound
from durable.store.clock import MockClock

calls: Counter[str] = Counter()


@pytest.fixture(autouse=True)
def _fresh() -> None:
    calls.clear()


@durable.step
async def tally(name: str, value: Any) -> Any:
    calls[name] += 1
    return value


@durable.workflow
async def reporter(name: str, blob: bytes) -> int:
    first = await tally("first", len(blob))
    await durable.publish("stage", "one")
    big = await tally("big", blob * 2)  # over the journal's inline limit
    await durable.publish("stage", "two")
    last = await tally("last", first + len(big))
    return int(last)


def _kv_rows(engine: Engine, run_id: str) -> list[bytes]:
    kv = engine.for_run(run_id).queue.kv.internal()
    rows = [k for k, _ in kv.snapshot(journal_prefix(run_id))]
    rows += [k for k, _ in kv.snapshot(published_prefix(run_id))]
    if kv.get(archive.invocation_key(run_id)) is not None:
        rows.append(archive.invocation_key(run_id))
    return rows


async def test_a_terminated_run_leaves_memory_for_its_archive(
    make_objects: Factory, clock: MockClock
) -> None:
    blob = b"x" * (INLINE_MAX // 2 + 1)
    async with make_engine(make_objects, clock) as engine:
        handle = await reporter.start("r1", blob)
        assert await result(handle) == len(blob) * 3
        await archived(engine, handle.run_id)
        assert _kv_rows(engine, handle.run_id) == []
        stored = await archive.read_archive(engine, handle.run_id)
        assert sorted(stored.journal) == [0, 1, 2]  # publishes take no position
        assert sorted(stored.published) == ["stage"]
        assert stored.invocation is not None
        # Everything still reads: the journal, the published value, the result.
        journal = await archive.load_journal(engine, handle.run_id)
        assert [e.name for _, e in journal.entries()] == [tally.name] * 3
        assert await handle.get("stage") == "two"
        with pytest.raises(NotPublished, match=rf"'{handle.run_id}'.*'nothing'"):
            await handle.get("nothing")
        assert await result(handle) == len(blob) * 3
    # A new process reads the archive too.
    async with make_engine(make_objects, clock) as engine:
        assert await engine.handle(handle.run_id).get("stage") == "two"


async def test_memory_keeps_no_large_record_of_a_terminated_run(
    make_objects: Factory, clock: MockClock
) -> None:
    big = b"y" * archive.ARCHIVE_MIN_BYTES
    async with make_engine(make_objects, clock) as engine:
        handles = [await reporter.start(f"m{i}", big) for i in range(10)]
        for h in handles:
            await result(h)
            await archived(engine, h.run_id)
        for part in engine.every_partition():  # every invocation record
            assert part.queue.kv.internal().snapshot(archive.invocation_key("")) == []
        for h in handles:
            assert _kv_rows(engine, h.run_id) == []
            assert await h.get("stage") == "two"


async def test_a_small_run_keeps_its_records_until_its_retention(
    make_objects: Factory, clock: MockClock
) -> None:
    async with make_engine(make_objects, clock, retention=60) as engine:
        small = await reporter.start("small", b"s")
        large = await reporter.start("large", b"L" * archive.ARCHIVE_MIN_BYTES)
        assert await result(small) == 3
        await result(large)
        await archived(engine, large.run_id)
        assert not archive.needs_archive(engine, small.run_id)
        assert len(_kv_rows(engine, small.run_id)) == 5  # 3 entries, 1 value, the invocation
        assert await archive.read_archive(engine, small.run_id) == archive.Archive()
        assert await small.get("stage") == "two"
        assert await sweep_memos(engine) == 0  # not yet
        clock.advance(61)
        swept = await sweep_memos(engine)
        # Partitioned, each partition's maintenance loop (woken by the advance)
        # may sweep its run before this call does: both are gone all the same.
        assert swept == 2 if PARTITIONS is None else swept <= 2
        for handle in (small, large):
            assert _kv_rows(engine, handle.run_id) == []
            assert await archive.read_archive(engine, handle.run_id) == archive.Archive()
            with pytest.raises(RunNotFound):
                await handle.result()
            with pytest.raises(RunNotFound):
                await handle.get("stage")
    with pytest.raises(durable.errors.InvalidArgument, match="retention"):
        Engine(retention=0)


async def test_an_archive_written_after_the_run_was_forgotten_is_removed(
    make_objects: Factory, clock: MockClock
) -> None:
    async with make_engine(make_objects, clock) as engine:
        handle = await reporter.start("late", b"l" * archive.ARCHIVE_MIN_BYTES)
        await result(handle)
        await archived(engine, handle.run_id)
        # The race: the run's retention passes (its terminal record and memo
        # go) while the hook of a redelivered notification still finds keys.
        await engine.for_run(handle.run_id).workflows.default.memos.clear_run(handle.run_id)
        kv = engine.for_run(handle.run_id).queue.kv.internal()
        await kv.delete(keys.outcome_key(handle.run_id))
        await kv.put(archive.invocation_key(handle.run_id), b"left behind")
        assert await archive.archive_run(engine, handle.run_id) is True
        assert _kv_rows(engine, handle.run_id) == []
        assert await archive.read_archive(engine, handle.run_id) == archive.Archive()


async def test_archiving_is_idempotent(make_objects: Factory, clock: MockClock) -> None:
    async with make_engine(make_objects, clock) as engine:
        handle = await reporter.start("idem", b"z" * archive.ARCHIVE_MIN_BYTES)
        await result(handle)
        await archived(engine, handle.run_id)
        before = await archive.read_archive(engine, handle.run_id)
        # A redelivered notification finds nothing left to move and keeps the archive.
        assert await archive.archive_run(engine, handle.run_id) is False
        assert await archive.read_archive(engine, handle.run_id) == before


@durable.workflow
async def gated(start: int) -> list[int]:
    a = await tally("a", start + 1)
    b = await tally("b", a + 1)
    await durable.wait_for_signal(f"gate:{durable.run_id()}")
    c = await tally("c", b + 1)
    return [a, b, c]


async def test_fork_of_an_ordinary_terminated_run(make_objects: Factory, clock: MockClock) -> None:
    async with make_engine(make_objects, clock) as engine:
        source = await gated.start(0)
        await wait_parked(engine, source.run_id)
        await engine.signal(f"gate:{source.run_id}")
        assert await result(source) == [1, 2, 3]  # a small run: its records stay in the KV
    async with make_engine(make_objects, clock) as engine:  # and after a restart
        forked = await engine.fork(source.run_id, from_step=2, new_run_id="from-archive")
        await wait_parked(engine, forked.run_id)
        await engine.signal("gate:from-archive")
        assert await result(forked) == [1, 2, 3]
        assert calls == {"a": 1, "b": 1, "c": 2}


@durable.workflow
async def heavy(blob: bytes) -> int:
    big = await tally("heavy", blob + blob)
    await durable.wait_for_signal(f"heavy:{durable.run_id()}")
    return len(big)


async def test_fork_copies_large_values_and_large_arguments(
    make_objects: Factory, clock: MockClock
) -> None:
    blob = b"q" * (INLINE_MAX + 10)  # the invocation itself goes to the run memo
    async with make_engine(make_objects, clock) as engine:
        source = await heavy.start(blob)
        await wait_parked(engine, source.run_id)
        await engine.signal(f"heavy:{source.run_id}")
        assert await result(source) == len(blob) * 2
        # Its large values are memo objects already: its KV records are small.
        assert not archive.needs_archive(engine, source.run_id)
        forked = await engine.fork(source.run_id, from_step=1, new_run_id="heavy-fork")
        await wait_parked(engine, forked.run_id)
        await engine.signal("heavy:heavy-fork")
        assert await result(forked) == len(blob) * 2
        assert calls == {"heavy": 1}
        # The fork's copy lives in its own memo: it outlives the source's.
        await engine.for_run(source.run_id).workflows.default.memos.clear_run(source.run_id)
        journal = await archive.load_journal(engine, "heavy-fork")
        entry = journal.get(0)
        assert entry is not None
        assert entry.ref
        ok, _ = await journal.values(0, entry)
        assert ok is not None
        assert len(ok) > INLINE_MAX


async def test_a_fork_whose_submission_fails_writes_nothing(
    make_objects: Factory, clock: MockClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with make_engine(make_objects, clock) as engine:
        source = await gated.start(5)
        await wait_parked(engine, source.run_id)
        runtime = engine.for_run("orphan").workflows.default

        async def broken(*args: Any, **kwargs: Any) -> Any:
            raise OSError("the store went away")

        monkeypatch.setattr(type(runtime), "submit", broken)
        with pytest.raises(OSError, match="went away"):
            await engine.fork(source.run_id, from_step=2, new_run_id="orphan")
        monkeypatch.undo()
        assert _kv_rows(engine, "orphan") == []  # no journal entry without its run
        forked = await engine.fork(source.run_id, from_step=2, new_run_id="orphan")
        await wait_parked(engine, forked.run_id)
        await engine.signal("gate:orphan")
        assert await result(forked) == [6, 7, 8]


async def test_unknown_runs_raise_run_not_found(make_objects: Factory, clock: MockClock) -> None:
    async with make_engine(make_objects, clock) as engine:
        ghost = engine.handle("ghost")
        for call in (ghost.result(), ghost.get("k"), engine.fork("ghost", from_step=0)):
            with pytest.raises(RunNotFound, match="'ghost'") as info:
                await call
            assert isinstance(info.value, LookupError)
            assert info.value.run_id == "ghost"


@durable.workflow
async def silent() -> None:
    await durable.wait_for_signal(f"silent:{durable.run_id()}")


async def test_get_wakes_when_the_run_ends_without_publishing(
    make_objects: Factory, clock: MockClock
) -> None:
    async with make_engine(make_objects, clock) as engine:
        handle = await silent.start()
        await wait_parked(engine, handle.run_id)
        waiter = asyncio.create_task(handle.get("never"))
        await asyncio.sleep(0)
        assert not waiter.done()
        await engine.signal(f"silent:{handle.run_id}")
        with pytest.raises(NotPublished, match="never"):
            await asyncio.wait_for(waiter, LIMIT)
