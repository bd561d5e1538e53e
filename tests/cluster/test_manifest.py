"""The partition manifest: routing (pinned vectors), the partition count, the
manifest's format, and `open_manifest` on new, existing, corrupt, unpartitioned
and raced stores."""

from __future__ import annotations

import asyncio
import json
import pickle
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

import durable
from durable import errors
from durable.cluster.manifest import (
    HASH,
    MANIFEST,
    MAX_PARTITIONS,
    Manifest,
    check_partitions,
    co_located_id,
    decode_manifest,
    encode_manifest,
    open_manifest,
    partition_of,
    partition_prefix,
)
from durable.errors import (
    CorruptObject,
    InvalidArgument,
    ObjectStoreError,
    PartitionMismatch,
    UnsupportedFormat,
)
from durable.store.log import LogWriter
from durable.store.objects import (
    FaultyObjectStore,
    LocalObjectStore,
    MemoryObjectStore,
    ObjectStore,
    PrefixedObjectStore,
)

CHILD = str(Path(__file__).with_name("manifest_child.py"))

# ------------------------------------------------------------------- routing

#: run id -> its partition for P = 1, 2, 8, 16, 1000; computed once with the
#: formula and pinned: a change of routing would strand every stored run.
VECTORS: dict[str, tuple[int, int, int, int, int]] = {
    "a": (0, 0, 2, 10, 250),
    "0": (0, 0, 0, 8, 40),
    "-": (0, 1, 1, 9, 249),
    "run-1": (0, 1, 5, 5, 45),
    "run-2": (0, 1, 1, 9, 921),
    "order-42": (0, 1, 7, 15, 703),
    "01HZX3B2W3R8R8R8R8R8R8R8R8": (0, 1, 1, 1, 817),
    "x" * 128: (0, 0, 6, 6, 790),
    "": (0, 0, 4, 4, 652),
    "é": (0, 1, 3, 3, 51),
    "日本語": (0, 1, 3, 3, 371),
    "🙂": (0, 0, 0, 8, 536),
    "Zürich-run": (0, 1, 3, 11, 427),
    "naïve_id": (0, 1, 1, 9, 193),
}
COUNTS = (1, 2, 8, 16, 1000)


@pytest.mark.parametrize("run_id", list(VECTORS))
def test_routing_matches_the_pinned_vectors(run_id: str) -> None:
    assert tuple(partition_of(run_id, p) for p in COUNTS) == VECTORS[run_id]


def test_routing_is_the_published_sha256_not_pythons_hash() -> None:
    # The well-known SHA-256 of "a" starts ca978112ca1bbdca: the partition is
    # that big-endian u64 modulo P, whatever PYTHONHASHSEED says.
    first_8 = 0xCA978112CA1BBDCA
    assert [partition_of("a", p) for p in COUNTS] == [first_8 % p for p in COUNTS]


def test_routing_spreads_run_ids_evenly() -> None:
    counts = Counter(partition_of(f"run-{i}", 16) for i in range(16_000))
    assert sorted(counts) == list(range(16))
    assert min(counts.values()) > 900
    assert max(counts.values()) < 1100


def test_partition_prefixes_are_fixed_width_and_distinct() -> None:
    assert partition_prefix(0) == "p000/"
    assert partition_prefix(7) == "p007/"
    assert partition_prefix(MAX_PARTITIONS - 1) == "p999/"
    prefixes = [partition_prefix(p) for p in range(MAX_PARTITIONS)]
    assert len(set(prefixes)) == MAX_PARTITIONS
    assert all(len(p) == 5 for p in prefixes)


# --------------------------------------------------------- the partition count

BAD_COUNTS: list[object] = [0, -1, MAX_PARTITIONS + 1, True, False, 2.0, "8", None, [8]]


@pytest.mark.parametrize("value", [1, 2, 8, 16, MAX_PARTITIONS])
def test_a_partition_count_is_an_int_in_range(value: int) -> None:
    assert check_partitions(value) == value


@pytest.mark.parametrize("value", BAD_COUNTS, ids=repr)
def test_a_bad_partition_count_is_refused_naming_it_and_the_range(value: object) -> None:
    with pytest.raises(InvalidArgument) as info:
        check_partitions(value)
    message = str(info.value)
    assert f"partitions={value!r}" in message
    assert f"from 1 to {MAX_PARTITIONS}" in message
    assert isinstance(info.value, ValueError)


# ------------------------------------------------------------------ encoding


def test_the_manifest_is_human_readable_json() -> None:
    data = encode_manifest(Manifest(16))
    assert data == b'{\n  "hash": "sha256-u64/v1",\n  "partitions": 16,\n  "v": 1\n}\n'
    assert json.loads(data) == {"v": 1, "partitions": 16, "hash": HASH}


@pytest.mark.parametrize("partitions", [1, 2, 8, 999, MAX_PARTITIONS])
def test_the_manifest_round_trips(partitions: int) -> None:
    manifest = Manifest(partitions)
    assert decode_manifest(MANIFEST, encode_manifest(manifest)) == manifest


def test_unknown_fields_are_ignored_for_later_versions_to_add() -> None:
    data = json.dumps({"v": 1, "partitions": 4, "hash": HASH, "note": "later"}).encode()
    assert decode_manifest(MANIFEST, data) == Manifest(4)


def _json(**fields: object) -> bytes:
    return json.dumps(fields).encode()


#: Corrupt manifest bytes -> a piece of the error message (naming the value).
CORRUPT: list[tuple[bytes, str]] = [
    (b"", "not UTF-8 JSON"),
    (b"not json", "not UTF-8 JSON"),
    (b"\xff\xfe{}", "not UTF-8 JSON"),
    (b'{"v": 1, "partitions": 4', "not UTF-8 JSON"),
    (b"[1, 4]", "a JSON list"),
    (b'"partitions"', "a JSON str"),
    (b"null", "a JSON NoneType"),
    (_json(partitions=4, hash=HASH), "format version None"),
    (_json(v="1", partitions=4, hash=HASH), "format version '1'"),
    (_json(v=True, partitions=4, hash=HASH), "format version True"),
    (_json(v=0, partitions=4, hash=HASH), "format version 0"),
    (_json(v=1, hash=HASH), "partitions None"),
    (_json(v=1, partitions="8", hash=HASH), "partitions '8'"),
    (_json(v=1, partitions=True, hash=HASH), "partitions True"),
    (_json(v=1, partitions=2.0, hash=HASH), "partitions 2.0"),
    (_json(v=1, partitions=0, hash=HASH), "partitions 0"),
    (_json(v=1, partitions=MAX_PARTITIONS + 1, hash=HASH), "partitions 1001"),
    (_json(v=1, partitions=4), "hash None"),
    (_json(v=1, partitions=4, hash=1), "hash 1"),
]


@pytest.mark.parametrize(("data", "said"), CORRUPT, ids=repr)
def test_a_corrupt_manifest_is_refused_naming_the_object_and_value(data: bytes, said: str) -> None:
    with pytest.raises(CorruptObject) as info:
        decode_manifest(MANIFEST, data)
    assert info.value.name == MANIFEST
    assert said in str(info.value)


def test_a_newer_format_is_unsupported() -> None:
    with pytest.raises(UnsupportedFormat) as info:
        decode_manifest(MANIFEST, _json(v=2, partitions=4, hash=HASH))
    assert info.value.name == MANIFEST
    assert info.value.version == 2
    assert "upgrade durable" in str(info.value)


def test_an_unknown_routing_hash_is_unsupported_naming_it() -> None:
    with pytest.raises(UnsupportedFormat) as info:
        decode_manifest(MANIFEST, _json(v=1, partitions=4, hash="sha3-u64/v9"))
    assert info.value.name == MANIFEST
    assert "'sha3-u64/v9'" in str(info.value)
    assert "upgrade durable" in str(info.value)


# ------------------------------------------------------------- open_manifest


async def _snapshot(objects: ObjectStore) -> dict[str, bytes]:
    return {name: await objects.get(name) for name in await objects.list("")}


def _writes(store: FaultyObjectStore) -> int:
    return store.calls["put"] + store.calls["create"] + store.calls["delete"]


async def test_a_new_store_records_its_count_once() -> None:
    store = FaultyObjectStore(MemoryObjectStore())
    assert await open_manifest(store, 8) == Manifest(8)
    assert await store.list("") == [MANIFEST]
    assert await store.get(MANIFEST) == encode_manifest(Manifest(8))
    assert store.calls["create"] == 1
    before = dict(store.calls)
    # later opens read it: one GET, with the count or without
    assert await open_manifest(store, 8) == Manifest(8)
    assert await open_manifest(store, None) == Manifest(8)
    assert store.calls["get"] == before["get"] + 2
    assert store.calls["list"] == before["list"]
    assert _writes(store) == 1


async def test_a_store_without_manifest_or_partitions_is_unpartitioned() -> None:
    store = FaultyObjectStore(MemoryObjectStore())
    assert await open_manifest(store, None) is None
    assert _writes(store) == 0
    assert await store.list("") == []


async def test_another_count_is_refused_naming_both_and_nothing_is_written() -> None:
    store = FaultyObjectStore(MemoryObjectStore())
    await open_manifest(store, 8)
    before = await _snapshot(store)
    writes = _writes(store)
    with pytest.raises(PartitionMismatch) as info:
        await open_manifest(store, 16)
    assert (info.value.stored, info.value.requested) == (8, 16)
    assert info.value.url == store.url
    message = str(info.value)
    assert "partitions=8" in message
    assert "not 16" in message
    assert "cannot change" in message
    assert store.url in message
    assert not info.value.transient
    assert await _snapshot(store) == before
    assert _writes(store) == writes


def test_partition_mismatch_is_a_documented_exported_store_error() -> None:
    assert durable.PartitionMismatch is PartitionMismatch
    assert issubclass(PartitionMismatch, errors.StoreError)
    assert "PartitionMismatch" in (errors.__doc__ or "")
    err = pickle.loads(pickle.dumps(PartitionMismatch("memory://x", 8, 16)))
    assert isinstance(err, PartitionMismatch)
    assert (err.url, err.stored, err.requested, err.unpartitioned) == ("memory://x", 8, 16, False)


@pytest.mark.parametrize("value", [v for v in BAD_COUNTS if v is not None], ids=repr)
async def test_a_bad_count_is_refused_before_the_store_is_touched(value: object) -> None:
    store = FaultyObjectStore(MemoryObjectStore())
    await store.put("log/00000000000000000001", b"x")
    store.calls.clear()
    with pytest.raises(InvalidArgument) as info:
        await open_manifest(store, value)  # type: ignore[arg-type]
    assert f"partitions={value!r}" in str(info.value)
    assert sum(store.calls.values()) == 0
    assert await store.list("") == ["log/00000000000000000001"]


@pytest.mark.parametrize("partitions", [None, 8])
@pytest.mark.parametrize(("data", "said"), CORRUPT, ids=repr)
async def test_a_corrupt_stored_manifest_is_refused_and_nothing_is_written(
    data: bytes, said: str, partitions: int | None
) -> None:
    store = FaultyObjectStore(MemoryObjectStore())
    await store.put(MANIFEST, data)
    await store.put("p000/log/00000000000000000001", b"x")
    before = await _snapshot(store)
    store.calls.clear()
    with pytest.raises(CorruptObject) as info:
        await open_manifest(store, partitions)
    assert info.value.name == MANIFEST
    assert said in str(info.value)
    assert _writes(store) == 0
    assert await _snapshot(store) == before


@pytest.mark.parametrize("partitions", [None, 8])
@pytest.mark.parametrize(
    "data",
    [_json(v=2, partitions=8, hash=HASH), _json(v=1, partitions=8, hash="sha3-u64/v9")],
    ids=["newer version", "unknown hash"],
)
async def test_an_unsupported_manifest_is_refused_and_nothing_is_written(
    data: bytes, partitions: int | None
) -> None:
    store = FaultyObjectStore(MemoryObjectStore())
    await store.put(MANIFEST, data)
    store.calls.clear()
    with pytest.raises(UnsupportedFormat) as info:
        await open_manifest(store, partitions)
    assert info.value.name == MANIFEST
    assert _writes(store) == 0
    assert await store.list("") == [MANIFEST]


@pytest.mark.parametrize("partitions", [None, 8, 4])
async def test_a_lost_manifest_beside_partition_stores_is_refused(
    partitions: int | None,
) -> None:
    inner = MemoryObjectStore()
    store = FaultyObjectStore(inner)
    await open_manifest(store, 8)
    writer = await LogWriter.open(PrefixedObjectStore(store, partition_prefix(0)))
    await writer.close()
    await store.delete([MANIFEST])  # lost by hand
    before = await _snapshot(store)
    store.calls.clear()
    with pytest.raises(CorruptObject) as info:
        await open_manifest(store, partitions)
    assert info.value.name == MANIFEST
    message = str(info.value)
    assert "missing while partition stores exist" in message
    assert "'p000/'" in message
    assert store.url in message
    assert _writes(store) == 0
    assert await _snapshot(store) == before


@pytest.mark.parametrize("partitions", [1, 8])
async def test_an_unpartitioned_store_is_not_opened_with_partitions(partitions: int) -> None:
    store = FaultyObjectStore(MemoryObjectStore())
    writer = await LogWriter.open(store)  # a store as every one before partitions
    await writer.close()
    before = await _snapshot(store)
    store.calls.clear()
    with pytest.raises(PartitionMismatch) as info:
        await open_manifest(store, partitions)
    assert info.value.unpartitioned
    assert (info.value.stored, info.value.requested) == (1, partitions)
    message = str(info.value)
    assert "created unpartitioned" in message
    assert f"partitions={partitions}" in message
    assert _writes(store) == 0
    assert await _snapshot(store) == before
    # without partitions= it stays what it is
    assert await open_manifest(store, None) is None
    assert _writes(store) == 0


async def test_an_existing_manifest_with_other_bytes_but_the_same_count_opens() -> None:
    store = MemoryObjectStore()
    await store.put(MANIFEST, _json(hash=HASH, partitions=8, v=1))  # compact, not ours
    assert await open_manifest(store, 8) == Manifest(8)


async def test_transient_errors_are_retried() -> None:
    store = FaultyObjectStore(MemoryObjectStore())
    store.fail_next("get")
    store.fail_next("list", count=2)
    store.timeout_next("create", after=True)  # it landed; the retry finds our bytes
    assert await open_manifest(store, 8, retry_seconds=5) == Manifest(8)
    assert store.calls["create"] == 2
    store.fail_next("get", count=3)
    assert await open_manifest(store, None, retry_seconds=5) == Manifest(8)


async def test_a_permanent_store_error_propagates_and_nothing_is_written() -> None:
    store = FaultyObjectStore(MemoryObjectStore())
    denied = ObjectStoreError("access denied", name=MANIFEST)
    denied.transient = False
    store.fail_next("get", denied)
    with pytest.raises(ObjectStoreError, match="access denied"):
        await open_manifest(store, 8)
    assert _writes(store) == 0


# -------------------------------------------------------------------- races


async def test_two_tasks_creating_with_different_counts_one_wins() -> None:
    for round_ in range(20):
        # latency makes both reach the create before either lands
        store = FaultyObjectStore(MemoryObjectStore(), latency=0.001)
        counts = (4, 8) if round_ % 2 else (8, 4)
        results = await asyncio.gather(
            *(open_manifest(store, p) for p in counts), return_exceptions=True
        )
        assert store.calls["create"] == 2  # both raced to create
        winners = [r for r in results if isinstance(r, Manifest)]
        losers = [r for r in results if isinstance(r, PartitionMismatch)]
        assert len(winners) == 1, results
        assert len(losers) == 1, results
        won = winners[0].partitions
        assert (losers[0].stored, losers[0].requested) == (won, 12 - won)
        assert decode_manifest(MANIFEST, await store.get(MANIFEST)) == Manifest(won)
        assert await store.list("") == [MANIFEST]


async def test_two_tasks_creating_with_the_same_count_both_open_it() -> None:
    store = FaultyObjectStore(MemoryObjectStore(), latency=0.001)
    results = await asyncio.gather(open_manifest(store, 8), open_manifest(store, 8))
    assert store.calls["create"] == 2
    assert results == [Manifest(8), Manifest(8)]


@pytest.mark.slow
def test_two_processes_creating_with_different_counts_one_wins(tmp_path: Path) -> None:
    procs = [
        subprocess.Popen(
            [sys.executable, CHILD], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )
        for _ in range(2)
    ]
    try:
        for proc in procs:
            assert proc.stdout is not None
            assert proc.stdout.readline().split() == ["ready"]
        for round_ in range(20):
            directory = tmp_path / f"store-{round_}"
            for proc, count in zip(procs, (4, 8), strict=True):
                assert proc.stdin is not None
                proc.stdin.write(f"{directory} {count}\n")
                proc.stdin.flush()
            answers = []
            for proc in procs:
                assert proc.stdout is not None
                answers.append(proc.stdout.readline().split())
            ok = [a for a in answers if a[0] == "ok"]
            mismatch = [a for a in answers if a[0] == "mismatch"]
            assert len(ok) == 1, answers
            assert len(mismatch) == 1, answers
            won = int(ok[0][1])
            assert mismatch[0][1:] == [str(won), str(12 - won)]
            stored = (directory / MANIFEST).read_bytes()
            assert decode_manifest(MANIFEST, stored) == Manifest(won)
            assert sorted(p.name for p in directory.iterdir()) == [MANIFEST]
    finally:
        for proc in procs:
            assert proc.stdin is not None
            proc.stdin.close()
        for proc in procs:
            assert proc.wait(timeout=30) == 0
            assert proc.stdout is not None
            proc.stdout.close()


async def test_a_local_directory_round_trip(tmp_path: Path) -> None:
    store = LocalObjectStore(tmp_path)
    assert await open_manifest(store, 16) == Manifest(16)
    assert json.loads((tmp_path / MANIFEST).read_text()) == {
        "v": 1,
        "partitions": 16,
        "hash": HASH,
    }
    assert await open_manifest(LocalObjectStore(tmp_path), None) == Manifest(16)


# ------------------------------------------------------------ co-located ids

#: (base, partition, partitions) -> the id; pinned like the routing vectors:
#: a child or fork id minted differently would be another run.
CO_LOCATED = {
    ("order-1", 3, 8): "order-1-p1",
    ("order-1", 4, 8): "order-1",  # it routes there already
    ("parent-c4", 0, 16): "parent-c4-p11",
    ("run", 7, 1000): "run-p439",
    ("a", 0, 1): "a",
    (
        "x" * 128,
        5,
        1000,
    ): "h-24da1b81d0b16df6428eee73c69fcb2a93c76bc6df706f0c6670fe6bfe80-p877",
}


def test_co_located_ids_are_pinned_and_route_to_their_partition() -> None:
    for (base, partition, partitions), expected in CO_LOCATED.items():
        minted = co_located_id(base, partition, partitions)
        assert minted == expected, (base[:20], partition, partitions)
        assert partition_of(minted, partitions) == partition
        assert len(minted) <= 128


def test_every_partition_gets_a_co_located_id_within_the_length_limit() -> None:
    for partitions in (2, 16, 1000):
        for partition in range(0, partitions, max(1, partitions // 16)):
            for base in ("p", "parent-run-c12", "y" * 120):
                minted = co_located_id(base, partition, partitions)
                assert partition_of(minted, partitions) == partition
                assert len(minted) <= 128
                assert minted == co_located_id(base, partition, partitions)  # deterministic
