"""Fixtures shared by every suite: the storage backends tests run on.

`make_objects` is parametrised by backend; each call returns a new handle
on ONE shared object store, the way a second process would see it.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from durable.store.log import LogWriter
from durable.store.objects import LocalObjectStore, MemoryObjectStore
from durable.store.objects.base import ObjectStore

Factory = Callable[[], ObjectStore]

#: The backends every store-backed test runs on.
BACKENDS = ["memory", "local"]


@pytest.fixture(params=BACKENDS)
def make_objects(request: pytest.FixtureRequest, tmp_path: Path) -> Factory:
    """Handles on ONE object store (each call is like another process's handle)."""
    if request.param == "memory":
        shared = MemoryObjectStore()
        return lambda: shared
    return lambda: LocalObjectStore(tmp_path / "store")


@pytest.fixture
async def writer(make_objects: Factory) -> AsyncIterator[LogWriter]:
    """A log writer on the shared store, closed at teardown."""
    w = await LogWriter.open(make_objects())
    yield w
    await w.close()
