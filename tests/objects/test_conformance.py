"""The conformance suite, run on the local, memory and fault-free faulty stores."""

from __future__ import annotations

import inspect
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

import durable.testing
from durable.store.objects import (
    FaultyObjectStore,
    LocalObjectStore,
    MemoryObjectStore,
    ObjectStore,
    SegmentObjectStore,
)
from durable.testing import ObjectStoreConformance


class TestLocalConformance(ObjectStoreConformance):
    @pytest.fixture(autouse=True)
    def _root(self, tmp_path: Path) -> None:
        self.root = tmp_path / "store"

    async def make_store(self) -> ObjectStore:
        return LocalObjectStore(self.root)


class TestSegmentConformance(ObjectStoreConformance):
    """The segment medium serves every name that is not a log name as its local store does."""

    @pytest.fixture(autouse=True)
    def _root(self, tmp_path: Path) -> None:
        self.root = tmp_path / "store"

    async def make_store(self) -> ObjectStore:
        return SegmentObjectStore(self.root)


class TestMemoryConformance(ObjectStoreConformance):
    async def make_store(self) -> ObjectStore:
        return MemoryObjectStore()


class TestNamedMemoryConformance(ObjectStoreConformance):
    @pytest.fixture(autouse=True)
    def _name(self) -> Iterator[None]:
        self.name = f"conformance-{uuid.uuid4().hex}"
        yield
        MemoryObjectStore.forget(self.name)

    async def make_store(self) -> ObjectStore:
        return MemoryObjectStore.named(self.name)


class TestFaultyConformance(ObjectStoreConformance):
    async def make_store(self) -> ObjectStore:
        return FaultyObjectStore(MemoryObjectStore())


def test_testing_exports_are_documented() -> None:
    assert sorted(durable.testing.__all__) == durable.testing.__all__
    for name in durable.testing.__all__:
        obj = getattr(durable.testing, name)
        assert inspect.getdoc(obj), name
    assert durable.testing.ObjectStoreConformance is ObjectStoreConformance
    with pytest.raises(AttributeError):
        _ = durable.testing.NoSuchThing  # type: ignore[attr-defined]


def test_public_methods_are_documented() -> None:
    for cls in (LocalObjectStore, MemoryObjectStore, FaultyObjectStore, ObjectStoreConformance):
        for name, member in inspect.getmembers(cls):
            if not name.startswith("_") and callable(member):
                assert inspect.getdoc(member), f"{cls.__name__}.{name}"


def test_conformance_base_is_not_collected() -> None:
    # pytest collects only classes named Test*; the base must not be one.
    assert not ObjectStoreConformance.__name__.startswith("Test")
