"""`PrefixedObjectStore`: the conformance suite below a prefix of a memory and a
local store, and what the wrapper adds (names, URL, locks, close, bad prefixes)."""

from __future__ import annotations

from pathlib import Path

import pytest
from prefixed_conformance import PrefixedConformance

from durable.errors import InvalidStoreUrl, ObjectExists, ObjectNotFound
from durable.store.objects import (
    FaultyObjectStore,
    Guarantee,
    LocalObjectStore,
    MemoryObjectStore,
    ObjectStore,
    PrefixedObjectStore,
)


class TestPrefixedMemoryConformance(PrefixedConformance):
    async def make_inner(self) -> ObjectStore:
        return MemoryObjectStore()


class TestPrefixedLocalConformance(PrefixedConformance):
    @pytest.fixture(autouse=True)
    def _root(self, tmp_path: Path) -> None:
        self.root = tmp_path / "store"

    async def make_inner(self) -> ObjectStore:
        return LocalObjectStore(self.root)


async def test_names_are_joined_below_the_prefix(tmp_path: Path) -> None:
    inner = LocalObjectStore(tmp_path)
    store = PrefixedObjectStore(inner, "p007/")
    await store.put("log/0001", b"one")
    await store.create("ckpt/0001", b"two")
    assert (tmp_path / "p007" / "log" / "0001").read_bytes() == b"one"
    assert await inner.list("") == ["p007/ckpt/0001", "p007/log/0001"]
    assert await store.list("") == ["ckpt/0001", "log/0001"]
    await store.delete(iter(["log/0001"]))
    assert await inner.list("") == ["p007/ckpt/0001"]


async def test_errors_name_the_object_as_the_caller_did() -> None:
    store = PrefixedObjectStore(MemoryObjectStore(), "p001/")
    with pytest.raises(ObjectNotFound) as missing:
        await store.get("log/0001")
    assert missing.value.name == "log/0001"
    assert "p001/" not in str(missing.value)
    await store.create("log/0001", b"x")
    with pytest.raises(ObjectExists) as taken:
        await store.create("log/0001", b"y")
    assert taken.value.name == "log/0001"


async def test_url_guarantees_and_locality_are_the_inner_stores(tmp_path: Path) -> None:
    local = LocalObjectStore(tmp_path)
    store = PrefixedObjectStore(local, "p000/")
    assert store.url == f"{local.url}/p000"
    assert store.guarantees == local.guarantees
    assert Guarantee.PROCESS_LOCK in store.guarantees
    assert store.is_local
    remote = FaultyObjectStore(MemoryObjectStore(), latency=0.001)
    assert not PrefixedObjectStore(remote, "a/b/").is_local
    assert PrefixedObjectStore(remote, "a/b/").url == f"{remote.url}/a/b"
    assert "p000/" in repr(store)


async def test_locks_are_taken_on_the_prefixed_name_and_released_by_close(
    tmp_path: Path,
) -> None:
    inner = LocalObjectStore(tmp_path)
    store = PrefixedObjectStore(inner, "p002/")
    lock = await store.try_lock("owner")
    assert lock is not None
    assert lock.name == "owner"
    assert lock.held
    # the same file, whichever way it is reached
    assert await inner.try_lock("p002/owner") is None
    assert await PrefixedObjectStore(inner, "p002/").try_lock("owner") is None
    other = await inner.try_lock("owner")  # another name: the root's
    assert other is not None
    await store.close()
    assert not lock.held
    assert other.held  # close released only what was taken through the wrapper
    again = await inner.try_lock("p002/owner")
    assert again is not None
    again.release()
    await inner.close()


async def test_close_leaves_the_inner_store_open(tmp_path: Path) -> None:
    inner = LocalObjectStore(tmp_path)
    first = PrefixedObjectStore(inner, "p000/")
    second = PrefixedObjectStore(inner, "p001/")
    await first.put("x", b"1")
    await first.close()
    await second.put("x", b"2")
    assert await inner.get("p000/x") == b"1"
    assert await second.list("") == ["x"]


async def test_no_lock_where_the_backend_has_none() -> None:
    store = PrefixedObjectStore(MemoryObjectStore(), "p000/")
    assert await store.try_lock("owner") is None
    await store.close()


@pytest.mark.parametrize("prefix", ["", "p000", "/p000/", "p000//", "./", "a/../", "../", "a\x00/"])
def test_a_bad_prefix_is_refused_naming_it(prefix: str) -> None:
    inner = MemoryObjectStore()
    with pytest.raises(InvalidStoreUrl) as info:
        PrefixedObjectStore(inner, prefix)
    assert repr(prefix) in str(info.value)
    assert isinstance(info.value, ValueError)
