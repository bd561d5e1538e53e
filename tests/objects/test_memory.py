"""MemoryObjectStore details beyond the conformance suite: handles and copies."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from durable.errors import ObjectExists, ObjectNotFound
from durable.store.objects import Guarantee, MemoryObjectStore


@pytest.fixture
def name() -> Iterator[str]:
    name = f"test-{uuid.uuid4().hex}"
    yield name
    MemoryObjectStore.forget(name)


def test_describes_itself(name: str) -> None:
    assert MemoryObjectStore().guarantees == {Guarantee.ATOMIC_CREATE}
    assert MemoryObjectStore.named(name).url == f"memory://{name}"
    assert MemoryObjectStore().url != MemoryObjectStore().url
    assert "MemoryObjectStore" in repr(MemoryObjectStore())


async def test_stores_are_private() -> None:
    one, two = MemoryObjectStore(), MemoryObjectStore()
    await one.put("a", b"1")
    assert await two.list("") == []


async def test_named_handles_share_objects(name: str) -> None:
    writer, reader = MemoryObjectStore.named(name), MemoryObjectStore.named(name)
    await writer.create("log/1", b"w")
    assert await reader.get("log/1") == b"w"
    with pytest.raises(ObjectExists):
        await reader.create("log/1", b"r")
    assert await MemoryObjectStore.named(f"{name}-other").list("") == []
    MemoryObjectStore.forget(f"{name}-other")


async def test_forget_drops_the_name_but_not_open_handles(name: str) -> None:
    old = MemoryObjectStore.named(name)
    await old.put("a", b"1")
    MemoryObjectStore.forget(name)
    MemoryObjectStore.forget(name)  # forgetting twice is fine
    assert await old.get("a") == b"1"
    with pytest.raises(ObjectNotFound):
        await MemoryObjectStore.named(name).get("a")


async def test_callers_cannot_mutate_stored_bytes() -> None:
    store = MemoryObjectStore()
    buf = bytearray(b"abc")
    await store.put("p", buf)  # type: ignore[arg-type]
    await store.create("c", buf)  # type: ignore[arg-type]
    buf[0] = ord("X")
    assert await store.get("p") == b"abc"
    assert await store.get("c") == b"abc"
    assert type(await store.get("p")) is bytes


async def test_delete_rejects_a_bare_string() -> None:
    store = MemoryObjectStore()
    with pytest.raises(TypeError, match="iterable of names"):
        await store.delete("abc")
