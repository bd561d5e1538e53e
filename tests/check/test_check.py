"""`durable check`'s verifier (`durable.decorators.check.check_store`) on real
stores: a clean report with sane counts, every kind of corruption named by
its key with a reason, and nothing on the store changed by a check."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

import pytest

import durable
from durable import Engine
from durable.decorators.check import check_store
from durable.decorators.journal import entry_key
from durable.engine.keys import run_key
from durable.errors import StoreNotInitialized
from durable.store.framing import MAGIC
from durable.store.keyspace import USER
from durable.store.log.format import CKPT_PREFIX, LOG_PREFIX, encode_log, log_name, parse_seq
from durable.store.objects import LocalObjectStore, MemoryObjectStore
from durable.store.objects.base import ObjectStore
from durable.testing import cloud

Factory = Callable[[], ObjectStore]
RUNS = 3
LIMIT = 30.0


@durable.step
async def add(x: int) -> int:
    return x + 1


@durable.step
async def big(n: int) -> bytes:
    return b"x" * n


@durable.workflow(name="check.flow")
async def flow(x: int) -> int:
    y = await add(x)
    await durable.publish("stage", "one")
    z = await big(70_000 if x == 0 else 8)  # run 0's result goes to its memo
    return y + len(z)


@durable.workflow(name="check.waiter")
async def waiter(key: str) -> object:
    return await durable.wait_for_signal(key)


async def build(objects: ObjectStore, **options: object) -> None:
    """RUNS finished runs and one waiting, on ``objects``."""
    async with Engine(objects, **options) as engine:  # type: ignore[arg-type]
        handles = [await flow.start(i) for i in range(RUNS)]
        for h in handles:
            await h.result(timeout=LIMIT)
        handle = await waiter.options(run_id="waiting-1").start("sig-1")
        assert await asyncio.wait_for(handle.waiting(), LIMIT) is not None
        assert engine is not None


async def snapshot(objects: ObjectStore) -> dict[str, bytes]:
    """Every object of the store and its bytes."""
    return {name: await objects.get(name) for name in await objects.list("")}


@pytest.fixture(params=["memory", "local"])
def make_objects(request: pytest.FixtureRequest, tmp_path: Path) -> Factory:
    """Handles on one fresh store."""
    if request.param == "memory":
        shared = MemoryObjectStore()
        return lambda: shared
    return lambda: LocalObjectStore(tmp_path / "store")


async def test_a_store_an_engine_built_is_clean(make_objects: Factory) -> None:
    await build(make_objects())
    before = await snapshot(make_objects())
    report = await check_store(make_objects())
    assert report.clean, report.render()
    counts = report.counts
    assert counts["terminal records"] == RUNS
    assert counts["run records"] == counts["step pointers"] == 1  # the waiting run
    assert counts["journal entries"] == 2 * RUNS + 1
    assert counts["invocation records"] == RUNS + 1
    assert counts["memo objects"] >= 1
    assert counts["log objects"] >= 1
    assert counts["checkpoints"] >= 1
    assert counts["job records"] >= 1
    assert report.objects_read == len(before)
    assert await snapshot(make_objects()) == before
    assert "clean" in str(report)
    assert '"clean": true' in report.to_json()


async def test_a_partitioned_store_is_checked_partition_by_partition(tmp_path: Path) -> None:
    objects = LocalObjectStore(tmp_path / "store")
    await build(objects, partitions=3)
    before = await snapshot(objects)
    report = await check_store(objects)
    assert report.clean, report.render()
    assert report.partitions == 3
    assert report.counts["terminal records"] == RUNS
    assert report.counts["partition manifests"] == 1
    assert await snapshot(objects) == before
    # damage in a partition is named with the partition's prefix
    name = next(n for n in before if n.startswith("p") and "/log/" in n)
    await objects.put(name, before[name][:-3])
    report = await check_store(objects)
    assert [(p.key, p.kind) for p in report.problems] == [(name, "log object")]


def _flip(data: bytes, at: int) -> bytes:
    return data[:at] + bytes([data[at] ^ 0xFF]) + data[at + 1 :]


async def _next_log(objects: ObjectStore) -> int:
    """The sequence number the store's next writer would write at."""
    seqs = [parse_seq(n, LOG_PREFIX) for n in await objects.list(LOG_PREFIX)]
    seqs += [parse_seq(n, CKPT_PREFIX) for n in await objects.list(CKPT_PREFIX)]
    return max(s for s in seqs if s is not None) + 1


async def test_every_kind_of_damage_is_named_by_its_key(make_objects: Factory) -> None:
    objects = make_objects()
    await build(objects)
    names = await objects.list("")
    ckpt = max(n for n in names if n.startswith("ckpt/"))
    log = min(n for n in names if n.startswith("log/"))
    memo = next(n for n in names if "/memos/" in n)
    await objects.put(ckpt, _flip(await objects.get(ckpt), 40))
    await objects.put(log, (await objects.get(log))[:-5])
    await objects.put(memo, _flip(await objects.get(memo), 30))
    # records written past the checkpoint, as a damaged writer might have
    seq = await _next_log(objects)
    bad = [USER + run_key("garbage-run"), b"\x00not msgpack\xc1"]
    bad += [USER + entry_key("waiting-1", 7), b"\x92\x01\x02"]  # a list, not a map
    await objects.create(log_name(seq), encode_log(seq, b"w" * 16, bad, marker=False))
    before = await snapshot(objects)

    report = await check_store(objects)

    assert not report.clean
    found = {(p.key, p.kind, p.record): p.reason for p in report.problems}
    assert found[(ckpt, "checkpoint", None)] == "checksum mismatch"
    assert "truncated" in found[(log, "log object", None)]
    assert found[(memo, "memo object", None)] == "checksum mismatch"
    assert "not MessagePack" in found[(log_name(seq), "run record", "workflow/runs/garbage-run")]
    journal = (log_name(seq), "journal entry", "workflow/journal/waiting-1/0000000007")
    assert "not a map" in found[journal]
    text = report.render()
    for key in (ckpt, log, memo, log_name(seq)):
        assert key in text
    assert await snapshot(objects) == before


async def test_a_gap_in_the_log_is_lost_commits(make_objects: Factory) -> None:
    objects = make_objects()
    await build(objects)
    seq = await _next_log(objects)
    await objects.create(log_name(seq + 1), encode_log(seq + 1, b"w" * 16, [], marker=False))
    report = await check_store(objects)
    assert [(p.key, p.kind) for p in report.problems] == [(log_name(seq), "log object")]
    assert "missing from the middle" in report.problems[0].reason


async def test_leftovers_the_design_allows_are_notes(make_objects: Factory) -> None:
    objects = make_objects()
    await build(objects)
    await objects.create("probe/0123", b"x")  # a crashed open's probe
    report = await check_store(objects)
    assert report.clean
    assert [n.key for n in report.notes] == ["probe/0123"]


async def test_a_store_that_does_not_exist_is_a_typed_error(tmp_path: Path) -> None:
    objects = LocalObjectStore(tmp_path / "nowhere")
    with pytest.raises(StoreNotInitialized) as info:
        await check_store(objects)
    assert objects.url in str(info.value)
    assert not (tmp_path / "nowhere").exists()  # nothing was created


def test_a_frame_starts_with_the_magic() -> None:
    assert MAGIC == b"DRBL"  # the check tells framed objects by it


@pytest.fixture(params=[pytest.param("s3", marks=pytest.mark.emulator)])
async def cloud_objects(request: pytest.FixtureRequest, tmp_path: Path) -> ObjectStore:
    """A fresh store on an emulated cloud backend."""
    if not cloud.available(request.param):
        pytest.skip(f"{cloud.ENV[request.param]} is unset: start the emulators with scripts/test")
    from durable.store.objects.url import open_object_store

    location = await cloud.new_location(request.param, tmp_path)
    return await open_object_store(location.url, location.options)


async def test_a_cloud_store_is_checked_without_a_write(cloud_objects: ObjectStore) -> None:
    await build(cloud_objects)
    before = await snapshot(cloud_objects)
    report = await check_store(cloud_objects)
    assert report.clean, report.render()
    assert report.counts["terminal records"] == RUNS
    name = max(n for n in before if n.startswith("ckpt/"))
    await cloud_objects.put(name, _flip(before[name], 40))
    report = await check_store(cloud_objects)
    assert [p.key for p in report.problems] == [name]
    await cloud_objects.close()


async def test_a_request_the_owner_set_aside_is_a_note(make_objects: Factory) -> None:
    objects = make_objects()
    await build(objects)
    await objects.create("inbox-corrupt/req/0001", b"DRBL\x06garbage")
    report = await check_store(objects)
    assert report.clean, report.render()
    assert [n.key for n in report.notes] == ["inbox-corrupt/req/0001"]
