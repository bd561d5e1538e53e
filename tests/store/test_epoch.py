"""Epochs in the log: a partition owner's open marker carries its epoch, and an
open at an epoch below the log's newest is refused (`StaleEpoch`), writing
nothing, so epochs never go backwards in a log (issue 15: a member acting on
a superseded assignment table must not fence the newer owner)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable

import pytest

from durable.errors import Fenced, InvalidOption, StaleEpoch
from durable.store.log import LogOptions, LogReader, LogWriter, WriteBatch
from durable.store.log.format import (
    CKPT_PREFIX,
    LOG_PREFIX,
    decode_checkpoint,
    decode_log,
    encode_checkpoint,
    encode_log,
)
from durable.store.objects import MemoryObjectStore
from durable.store.objects.base import ObjectLock, ObjectStore
from durable.store.queue import OpenOptions, Queue

Factory = Callable[[], ObjectStore]
NO_CKPT = LogOptions(checkpoint_on_close=False)


def put(key: bytes, value: bytes) -> WriteBatch:
    return WriteBatch().put(key, value)


async def everything(objects: ObjectStore) -> dict[str, bytes]:
    """Every object of the store and its bytes."""
    return {name: await objects.get(name) for name in await objects.list("")}


async def markers(objects: ObjectStore) -> list[tuple[bytes, int | None]]:
    """(writer id, epoch) of every open marker in the log, in order."""
    out = []
    for name in await objects.list(LOG_PREFIX):
        obj = decode_log(name, await objects.get(name))
        if obj.marker:
            out.append((obj.writer, obj.epoch))
    return out


class BeforeLogCreate(ObjectStore):
    """A handle on ``inner`` that runs ``hook`` once, before its first create of
    a log object (after loading: the open marker's create), then goes on."""

    def __init__(self, inner: ObjectStore, hook: Callable[[], Awaitable[None]]) -> None:
        self.inner = inner
        self.guarantees = inner.guarantees
        self.hook: Callable[[], Awaitable[None]] | None = hook

    @property
    def url(self) -> str:
        return self.inner.url

    async def get(self, name: str) -> bytes:
        return await self.inner.get(name)

    async def put(self, name: str, data: bytes) -> None:
        await self.inner.put(name, data)

    async def create(self, name: str, data: bytes) -> None:
        if self.hook is not None and name.startswith(LOG_PREFIX):
            hook, self.hook = self.hook, None
            await hook()
        await self.inner.create(name, data)

    async def list(self, prefix: str) -> list[str]:
        return await self.inner.list(prefix)

    async def delete(self, names: Iterable[str]) -> None:
        await self.inner.delete(names)

    async def try_lock(self, name: str) -> ObjectLock | None:
        return await self.inner.try_lock(name)


async def test_an_open_at_a_lower_epoch_is_refused_and_writes_nothing(
    make_objects: Factory,
) -> None:
    w3 = await LogWriter.open(make_objects(), epoch=3)
    assert w3.epoch == 3
    await w3.commit(put(b"a", b"1"))
    before = await everything(make_objects())
    with pytest.raises(StaleEpoch) as exc:
        await LogWriter.open(make_objects(), NO_CKPT, epoch=2)
    assert isinstance(exc.value, Fenced)  # a writer that must not write
    assert (exc.value.epoch, exc.value.newest) == (2, 3)
    message = str(exc.value)
    assert w3.url in message
    assert "epoch 2" in message
    assert "epoch 3" in message
    assert "newer owner holds the partition" in message
    assert await everything(make_objects()) == before  # nothing written, nothing fenced
    await w3.commit(put(b"b", b"2"))  # the newer owner goes on
    await w3.close()
    again = await LogWriter.open(make_objects(), epoch=3)  # its own epoch again: allowed
    assert again.epoch == 3
    await again.close()
    w4 = await LogWriter.open(make_objects(), epoch=4)
    assert w4.epoch == 4
    assert w4.state.get(b"b") == b"2"
    await w4.close()
    assert [epoch for _, epoch in await markers(make_objects())] == [3, 3, 4]


@pytest.mark.parametrize(("hooked", "racer"), [(2, 3), (3, 2)])
async def test_two_openers_racing_for_one_marker_leave_the_higher_epoch_last(
    hooked: int, racer: int
) -> None:
    """The ``hooked`` opener loads, then, before its marker's create, the
    ``racer`` opens completely and takes that sequence number. The hooked one
    catches up: at a lower epoch it is refused, writing nothing; at a higher one
    it writes the next marker, fencing the racer. Either way the epoch-3 writer
    holds the last marker and commits."""
    shared = MemoryObjectStore()
    first = await LogWriter.open(shared, NO_CKPT, epoch=1)
    await first.commit(put(b"k", b"1"))
    opened: list[LogWriter] = []

    async def race() -> None:
        opened.append(await LogWriter.open(shared, NO_CKPT, epoch=racer))

    handle = BeforeLogCreate(shared, race)
    if hooked < racer:
        with pytest.raises(StaleEpoch) as exc:
            await LogWriter.open(handle, NO_CKPT, epoch=hooked)
        assert (exc.value.epoch, exc.value.newest) == (hooked, racer)
        winner = opened[0]
    else:
        winner = await LogWriter.open(handle, NO_CKPT, epoch=hooked)
        with pytest.raises(Fenced):
            await opened[0].commit(put(b"k", b"stale"))
    assert handle.hook is None  # the race happened
    assert winner.epoch == 3
    assert winner.state.get(b"k") == b"1"
    await winner.commit(put(b"k", b"3"))
    found = await markers(shared)
    assert found[-1] == (winner.writer_id, 3)
    assert [epoch for _, epoch in found] == sorted(epoch for _, epoch in found)
    assert len(found) == (2 if hooked < racer else 3)  # a refused opener wrote no marker
    for w in (first, *opened, winner):
        await w.close()


async def test_the_epoch_survives_checkpoints_trims_and_epochless_writers(
    make_objects: Factory,
) -> None:
    often = LogOptions(checkpoint_max_objects=3, checkpoint_min_bytes=1)
    w = await LogWriter.open(make_objects(), often, epoch=5)
    for i in range(12):
        await w.commit(put(b"k%d" % i, b"v"))
        await w.wait_idle()
    await w.close()
    objects = make_objects()
    ckpts = await objects.list(CKPT_PREFIX)
    assert len(ckpts) == 1
    assert decode_checkpoint(ckpts[0], await objects.get(ckpts[0])).epoch == 5
    # An open without an epoch checks nothing, keeps the log's, and its
    # checkpoints carry it on after trimming everything it replayed.
    plain = await LogWriter.open(make_objects(), often)
    assert plain.epoch == 5
    for i in range(12):
        await plain.commit(put(b"p%d" % i, b"v"))
        await plain.wait_idle()
    await plain.close()
    ckpts = await objects.list(CKPT_PREFIX)
    assert decode_checkpoint(ckpts[-1], await objects.get(ckpts[-1])).epoch == 5
    # Only markers are left of the log before the newest checkpoint: the
    # epoch-5 marker is not read at open, the checkpoint says 5.
    before = await everything(objects)
    with pytest.raises(StaleEpoch):
        await LogWriter.open(make_objects(), epoch=4)
    assert await everything(objects) == before
    reader = await LogReader.open(make_objects())
    assert reader.state.get(b"p11") == b"v"
    w6 = await LogWriter.open(make_objects(), epoch=6)
    assert w6.epoch == 6
    assert w6.state.get(b"k11") == b"v"
    await w6.close()


async def test_a_log_written_without_epochs_opens_with_one(make_objects: Factory) -> None:
    old = await LogWriter.open(make_objects())
    assert old.epoch is None
    await old.commit(put(b"a", b"1"))
    await old.close()  # a checkpoint without an epoch too
    w = await LogWriter.open(make_objects(), epoch=1)
    assert w.epoch == 1
    assert w.state.get(b"a") == b"1"
    await w.close()
    assert [epoch for _, epoch in await markers(make_objects())] == [None, 1]
    with pytest.raises(StaleEpoch):
        await LogWriter.open(make_objects(), epoch=0)


def test_epoch_fields_are_written_only_when_set_and_read_back() -> None:
    writer = bytes(range(16))
    plain = encode_log(7, writer, [], marker=True)
    assert b"\xa1e" not in plain  # no "e" key: the bytes of a marker before epochs
    marker = decode_log("log/00000000000000000007", encode_log(7, writer, [], True, epoch=9))
    assert (marker.marker, marker.epoch) == (True, 9)
    assert decode_log("log/00000000000000000007", plain).epoch is None
    ck = encode_checkpoint(7, writer, [b"a"], [b"1"], [7], epoch=9)
    assert decode_checkpoint("ckpt/00000000000000000007", ck).epoch == 9
    ck_plain = encode_checkpoint(7, writer, [b"a"], [b"1"], [7])
    assert decode_checkpoint("ckpt/00000000000000000007", ck_plain).epoch is None


async def test_queue_open_threads_the_epoch_and_bad_epochs_are_refused() -> None:
    shared = MemoryObjectStore()
    q = await Queue.open(shared, OpenOptions(epoch=3))
    assert q.writer.epoch == 3
    before = await everything(shared)
    with pytest.raises(StaleEpoch, match="epoch 2"):
        await Queue.open(shared, OpenOptions(epoch=2))
    assert await everything(shared) == before
    await q.close()
    for bad in (-1, True, 1.5, "3"):
        with pytest.raises(InvalidOption, match="epoch"):
            OpenOptions(epoch=bad)  # type: ignore[arg-type]
        with pytest.raises(ValueError, match="epoch"):
            await LogWriter.open(shared, epoch=bad)  # type: ignore[arg-type]
