"""The transactional log: group commit, fencing, checkpoints, recovery, corruption."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from durable.errors import (
    CorruptObject,
    Fenced,
    MissingGuarantee,
    ObjectStoreError,
    StoreClosed,
    StoreNotInitialized,
    UnsupportedFormat,
)
from durable.store.framing import Kind, frame
from durable.store.log import LogOptions, LogReader, LogWriter, WriteBatch
from durable.store.log.blobs import BlobStore
from durable.store.log.format import CKPT_PREFIX, LOG_PREFIX, log_name
from durable.store.objects import FaultyObjectStore, MemoryObjectStore
from durable.store.objects.base import Guarantee, ObjectStore

Factory = Callable[[], ObjectStore]


def put(key: bytes, value: bytes) -> WriteBatch:
    return WriteBatch().put(key, value)


async def test_commit_is_visible_at_once_and_survives_reopen(make_objects: Factory) -> None:
    w = await LogWriter.open(make_objects())
    d = w.commit(put(b"a", b"1").put(b"b", b"2").delete(b"a"))
    assert w.state.get(b"b") == b"2"  # applied before durable
    assert w.state.get(b"a") is None
    seq = await d
    assert seq == w.seq
    await w.close()
    w2 = await LogWriter.open(make_objects())
    assert list(w2.state.scan()) == [(b"b", b"2")]
    await w2.close()


async def test_crash_without_close_keeps_every_awaited_commit(make_objects: Factory) -> None:
    w = await LogWriter.open(make_objects(), LogOptions(checkpoint_on_close=False))
    for i in range(50):
        await w.commit(put(b"k%03d" % i, b"v%d" % i))
    # no close: a crash. A new writer fences the old one and sees everything.
    w2 = await LogWriter.open(make_objects())
    assert len(w2.state) == 50
    assert w2.state.get(b"k049") == b"v49"
    await w2.close()
    with pytest.raises(Fenced):
        await w.commit(put(b"x", b"y"))
    assert w.failure is not None


async def test_group_commit_one_put_for_many_committers(make_objects: Factory) -> None:
    objects = FaultyObjectStore(make_objects())
    w = await LogWriter.open(objects)
    creates_before = objects.calls["create"]
    await asyncio.gather(*(w.commit(put(b"k%d" % i, b"v")) for i in range(128)))
    log_writes = objects.calls["create"] - creates_before
    # All 128 commits were made before the flusher ran: one log object.
    assert log_writes == 1
    assert w.stats.commits == 128
    await w.close()


async def test_next_group_fills_while_a_flush_is_in_flight(make_objects: Factory) -> None:
    objects = FaultyObjectStore(make_objects(), latency=0.02)
    w = await LogWriter.open(objects)
    before = objects.calls["create"]

    async def committer(i: int) -> None:
        for j in range(10):
            await w.commit(put(b"k%d-%d" % (i, j), b"v"))

    await asyncio.gather(*(committer(i) for i in range(32)))
    writes = objects.calls["create"] - before
    # 320 awaited commits; each committer waits for its previous commit, so
    # groups hold ~32 commits: about 10-11 log objects, far fewer than 320.
    assert writes <= 22
    await w.close()


async def test_fire_and_forget_commit_becomes_durable_at_next_flush(make_objects: Factory) -> None:
    w = await LogWriter.open(make_objects(), LogOptions(checkpoint_on_close=False))
    w.commit(put(b"ff", b"1"))  # not awaited
    await w.flush()
    w2 = await LogWriter.open(make_objects())
    assert w2.state.get(b"ff") == b"1"
    await w2.close()


async def test_cancelled_waiter_does_not_cancel_the_write(make_objects: Factory) -> None:
    objects = FaultyObjectStore(make_objects(), latency=0.01)
    w = await LogWriter.open(objects)
    d = w.commit(put(b"c", b"1"))

    async def wait() -> int:
        return await d

    t = asyncio.create_task(wait())
    await asyncio.sleep(0)
    t.cancel()
    with pytest.raises(asyncio.CancelledError):
        await t
    assert await d == w.seq
    await w.close()
    r = await LogReader.open(make_objects())
    assert r.state.get(b"c") == b"1"


async def test_second_writer_fences_first_and_overwrites_nothing(make_objects: Factory) -> None:
    objects = make_objects()
    a = await LogWriter.open(objects)
    await a.commit(put(b"a", b"1"))
    b = await LogWriter.open(make_objects())
    assert b.state.get(b"a") == b"1"
    names_before = await objects.list(LOG_PREFIX)
    contents_before = [await objects.get(n) for n in names_before]
    with pytest.raises(Fenced) as exc:
        await a.commit(put(b"a", b"stale"))
    assert str(b.seq) in str(exc.value) or "fenced" in str(exc.value)
    # The fenced writer refuses further commits at once and nothing changed.
    with pytest.raises(Fenced):
        a.commit(put(b"z", b"z"))
    assert [await objects.get(n) for n in names_before] == contents_before
    await b.commit(put(b"b", b"2"))
    await b.close()
    c = await LogWriter.open(make_objects())
    assert c.state.get(b"a") == b"1"
    assert c.state.get(b"b") == b"2"
    await c.close()
    await a.close()


async def test_fenced_writer_is_still_fenced_after_the_log_was_trimmed(
    make_objects: Factory,
) -> None:
    a = await LogWriter.open(make_objects(), LogOptions(checkpoint_on_close=False))
    await a.commit(put(b"a", b"1"))
    opts = LogOptions(checkpoint_max_objects=3, checkpoint_min_bytes=1)
    b = await LogWriter.open(make_objects(), opts)
    for i in range(20):
        await b.commit(put(b"b%d" % i, b"x"))
        await b.wait_idle()
    await b.close()  # checkpoints, trims every covered log object but markers
    objects = make_objects()
    remaining = await objects.list(LOG_PREFIX)
    assert log_name(a.seq + 1) in remaining  # b's open marker is kept
    assert len(remaining) <= 3
    with pytest.raises(Fenced):
        await a.commit(put(b"a", b"late"))
    c = await LogWriter.open(make_objects())
    assert c.state.get(b"a") == b"1"
    await c.close()


async def test_checkpoints_bound_the_log_and_reopen_is_exact(make_objects: Factory) -> None:
    objects = make_objects()
    opts = LogOptions(checkpoint_max_objects=10, checkpoint_min_bytes=1, checkpoint_on_close=False)
    w = await LogWriter.open(objects, opts)
    model: dict[bytes, bytes] = {}
    for i in range(100):
        k = b"k%02d" % (i % 37)
        if i % 5 == 4:
            await w.commit(WriteBatch().delete(k))
            model.pop(k, None)
        else:
            await w.commit(put(k, b"%d" % i))
            model[k] = b"%d" % i
        await w.wait_idle()
    assert w.stats.checkpoints >= 5
    ckpts = await objects.list(CKPT_PREFIX)
    logs = await objects.list(LOG_PREFIX)
    assert 1 <= len(ckpts) <= 2
    assert len(logs) <= 12  # the tail since the last checkpoint, plus the open marker
    w2 = await LogWriter.open(make_objects())
    assert dict(w2.state.scan()) == model
    await w2.close()


async def test_transient_write_errors_are_retried(make_objects: Factory) -> None:
    objects = FaultyObjectStore(make_objects())
    w = await LogWriter.open(objects)
    objects.fail_next("create", count=3)
    assert await w.commit(put(b"a", b"1")) == w.seq
    assert w.stats.write_retries == 3
    await w.close()


async def test_timeout_after_a_landed_write_is_not_taken_for_fencing(
    make_objects: Factory,
) -> None:
    objects = FaultyObjectStore(make_objects())
    w = await LogWriter.open(objects)
    objects.timeout_next("create", after=True)
    await w.commit(put(b"a", b"1"))  # the retry finds our own bytes: success
    assert w.failure is None
    await w.commit(put(b"b", b"2"))
    await w.close()
    r = await LogReader.open(make_objects())
    assert r.state.get(b"a") == b"1"
    assert r.state.get(b"b") == b"2"


async def test_a_write_that_keeps_failing_stops_the_writer(make_objects: Factory) -> None:
    objects = FaultyObjectStore(make_objects())
    w = await LogWriter.open(objects, LogOptions(write_retry_seconds=0.05))
    await w.commit(put(b"ok", b"1"))
    objects.fail_next("create", count=1000)
    with pytest.raises(StoreClosed) as exc:
        await w.commit(put(b"lost", b"1"))
    assert isinstance(exc.value.__cause__, ObjectStoreError)
    with pytest.raises(StoreClosed):
        w.commit(put(b"after", b"1"))
    await w.close()
    # What was acknowledged is there; the failed commit is not.
    w2 = await LogWriter.open(make_objects())
    assert w2.state.get(b"ok") == b"1"
    assert w2.state.get(b"lost") is None
    await w2.close()


async def test_permanent_error_stops_the_writer_without_retry() -> None:
    objects = FaultyObjectStore(MemoryObjectStore())
    w = await LogWriter.open(objects)

    class Denied(ObjectStoreError):
        transient = False

    objects.fail_next("create", Denied("access denied"))
    with pytest.raises(StoreClosed):
        await w.commit(put(b"a", b"1"))
    assert w.stats.write_retries == 0
    await w.close()


@pytest.mark.parametrize("damage", ["flip", "truncate", "garbage"])
async def test_corrupt_log_object_is_reported_by_name(make_objects: Factory, damage: str) -> None:
    objects = make_objects()
    w = await LogWriter.open(objects, LogOptions(checkpoint_on_close=False))
    await w.commit(put(b"a", b"1"))
    await w.commit(put(b"b", b"2"))
    name = log_name(w.seq)
    await w.close()
    data = bytearray(await objects.get(name))
    if damage == "flip":
        data[-3] ^= 0xFF
    elif damage == "truncate":
        del data[-5:]
    else:
        data = bytearray(b"not a durable object at all")
    await objects.put(name, bytes(data))
    with pytest.raises(CorruptObject) as exc:
        await LogWriter.open(make_objects())
    assert exc.value.name == name
    with pytest.raises(CorruptObject):
        await LogReader.open(make_objects())


async def test_corrupt_checkpoint_is_reported_by_name(make_objects: Factory) -> None:
    objects = make_objects()
    w = await LogWriter.open(objects)
    await w.commit(put(b"a", b"1"))
    await w.close()  # writes a checkpoint
    [ck] = await objects.list(CKPT_PREFIX)
    data = bytearray(await objects.get(ck))
    data[-1] ^= 0x01
    await objects.put(ck, bytes(data))
    with pytest.raises(CorruptObject) as exc:
        await LogWriter.open(make_objects())
    assert exc.value.name == ck


async def test_newer_format_version_is_refused(make_objects: Factory) -> None:
    objects = make_objects()
    w = await LogWriter.open(objects, LogOptions(checkpoint_on_close=False))
    await w.close()
    await objects.create(log_name(w.seq + 1), frame(Kind.LOG, b"\x80", version=9))
    with pytest.raises(UnsupportedFormat):
        await LogWriter.open(make_objects())


async def test_reader_refreshes_by_tailing_and_survives_trimming(make_objects: Factory) -> None:
    opts = LogOptions(checkpoint_max_objects=4, checkpoint_min_bytes=1)
    w = await LogWriter.open(make_objects(), opts)
    await w.commit(put(b"a", b"1"))
    r = await LogReader.open(make_objects())
    assert r.state.get(b"a") == b"1"
    await w.commit(put(b"b", b"2"))
    await r.refresh()
    assert r.state.get(b"b") == b"2"
    for i in range(30):  # several checkpoints trim what the reader would tail
        await w.commit(put(b"c%d" % i, b"3"))
        await w.wait_idle()
    await r.refresh()
    assert r.state.get(b"c29") == b"3"
    assert dict(r.state.scan()) == dict(w.state.scan())
    await w.close()


async def test_reader_never_fences_the_writer(make_objects: Factory) -> None:
    w = await LogWriter.open(make_objects())
    await w.commit(put(b"a", b"1"))
    r = await LogReader.open(make_objects())
    await r.refresh()
    await w.commit(put(b"b", b"2"))  # still the writer
    assert w.failure is None
    await w.close()


async def test_reader_on_an_empty_location_is_not_initialized(make_objects: Factory) -> None:
    with pytest.raises(StoreNotInitialized):
        await LogReader.open(make_objects())


async def test_writer_refused_on_backend_without_atomic_create() -> None:
    class NoAtomicCreate(MemoryObjectStore):
        guarantees = frozenset({Guarantee.DURABLE_WRITE})

    objects = NoAtomicCreate()
    with pytest.raises(MissingGuarantee) as exc:
        await LogWriter.open(objects)
    assert "atomic create-if-absent" in str(exc.value)
    assert await objects.list("") == []  # nothing written
    # Readers may still open a store written elsewhere.
    shared = MemoryObjectStore()
    w = await LogWriter.open(shared)
    await w.commit(put(b"a", b"1"))
    await w.close()
    view = NoAtomicCreate()
    for name in await shared.list(""):
        await view.put(name, await shared.get(name))
    r = await LogReader.open(view)
    assert r.state.get(b"a") == b"1"


async def test_released_blobs_are_deleted_only_after_the_batch_is_durable(
    make_objects: Factory,
) -> None:
    objects = FaultyObjectStore(make_objects(), latency=0.01)
    w = await LogWriter.open(objects)
    blobs = BlobStore(objects)
    name = await blobs.put(b"x" * 100_000)
    assert await blobs.get(name) == b"x" * 100_000
    await w.commit(put(b"ref", name.encode()))
    d = w.commit(WriteBatch().delete(b"ref").release(name))
    assert await blobs.get(name) == b"x" * 100_000  # not durable yet: still there
    await d
    await w.close()  # waits for background deletes
    assert name not in await objects.list("blobs/")


async def test_two_writers_opening_together_both_get_distinct_markers() -> None:
    shared = MemoryObjectStore()
    a, b = await asyncio.gather(LogWriter.open(shared), LogWriter.open(shared))
    assert a.seq != b.seq
    older, newer = (a, b) if a.seq < b.seq else (b, a)
    await newer.commit(put(b"n", b"1"))
    with pytest.raises(Fenced):
        await older.commit(put(b"o", b"1"))
    await newer.close()
    await older.close()


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(
        st.lists(
            st.tuples(st.sampled_from([b"a", b"b", b"c", b"d"]), st.none() | st.binary(max_size=8)),
            min_size=1,
            max_size=4,
        ),
        max_size=25,
    ),
    st.integers(min_value=1, max_value=6),
)
def test_reopen_equals_the_model(
    batches: list[list[tuple[bytes, bytes | None]]], every: int
) -> None:
    async def run() -> None:
        objects = MemoryObjectStore()
        opts = LogOptions(checkpoint_max_objects=every, checkpoint_min_bytes=1)
        w = await LogWriter.open(objects, opts)
        model: dict[bytes, bytes] = {}
        for ops in batches:
            b = WriteBatch()
            for k, v in ops:
                if v is None:
                    b.delete(k)
                    model.pop(k, None)
                else:
                    b.put(k, v)
                    model[k] = v
            await w.commit(b)
        assert dict(w.state.scan()) == model
        w2 = await LogWriter.open(objects)  # crash-reopen: fences w
        assert dict(w2.state.scan()) == model
        await w2.close()
        await w.close()

    asyncio.run(run())


async def test_close_right_after_a_commit_flushes_it(make_objects: Factory) -> None:
    w = await LogWriter.open(make_objects())
    await asyncio.sleep(0)  # the flusher is parked on its wakeup
    d = w.commit(put(b"a", b"1"))
    await asyncio.wait_for(w.close(), timeout=10)
    assert d.done()
    r = await LogReader.open(make_objects())
    assert r.state.get(b"a") == b"1"


async def test_reader_catches_up_when_its_whole_tail_was_trimmed(make_objects: Factory) -> None:
    w = await LogWriter.open(make_objects())
    await w.commit(put(b"a", b"1"))
    r = await LogReader.open(make_objects())
    await w.commit(put(b"b", b"2"))
    await w.checkpoint()  # trims every log object the reader has not read
    await r.refresh()
    assert r.state.get(b"b") == b"2"
    await w.close()


async def test_writer_refused_on_a_backend_that_ignores_create_preconditions() -> None:
    class IgnoresPreconditions(MemoryObjectStore):
        """Claims atomic create but overwrites, like gcp-storage-emulator."""

        async def create(self, name: str, data: bytes) -> None:
            await self.put(name, data)

    objects = IgnoresPreconditions()
    with pytest.raises(MissingGuarantee) as exc:
        await LogWriter.open(objects)
    assert "second create" in str(exc.value)
    assert await objects.list("") == []  # the probe cleaned up; nothing else written


async def test_writer_refused_on_a_plain_fsspec_filesystem_reader_allowed() -> None:
    import fsspec
    from fsspec.implementations.asyn_wrapper import AsyncFileSystemWrapper

    from durable.store.objects.fsspec_store import FsspecObjectStore

    fs = fsspec.filesystem("memory", skip_instance_cache=True)
    fs.store = {}  # fsspec's memory store is process-global: make it private
    fs.pseudo_dirs = [""]
    plain = FsspecObjectStore(AsyncFileSystemWrapper(fs), "plain", "memory://plain")
    with pytest.raises(MissingGuarantee):
        await LogWriter.open(plain)
    shared = MemoryObjectStore()
    w = await LogWriter.open(shared)
    await w.commit(put(b"a", b"1"))
    await w.close()
    for name in await shared.list(""):
        await plain.put(name, await shared.get(name))
    r = await LogReader.open(plain)
    assert r.state.get(b"a") == b"1"
