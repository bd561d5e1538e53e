"""Fixtures shared by every suite: the storage backends tests run on.

`make_objects` is parametrised by backend; each call returns a new handle
on ONE shared object store, the way a second process would see it.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from durable.store.log import LogWriter
from durable.store.objects import LocalObjectStore, MemoryObjectStore
from durable.store.objects.base import ObjectStore
from durable.testing import cloud
from durable.testing.cloud import StoreLocation

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


# --- every backend, the cloud ones on their emulators ------------------------
# scripts/test starts moto, fake-gcs-server and azurite (scripts/emulators.py)
# and exports their endpoints; without them the cloud cases skip.


def _cloud(backends: tuple[str, ...]) -> list[Any]:
    return [pytest.param(b, marks=pytest.mark.emulator) for b in backends]


async def _location(backend: str, tmp_path: Path) -> StoreLocation:
    if backend in cloud.CLOUD_BACKENDS and not cloud.available(backend):
        pytest.skip(f"{cloud.ENV[backend]} is unset: start the emulators with scripts/test")
    return await cloud.new_location(backend, tmp_path)


@pytest.fixture(params=[*BACKENDS, *_cloud(cloud.CLOUD_BACKENDS)])
async def location(request: pytest.FixtureRequest, tmp_path: Path) -> StoreLocation:
    """A fresh store on every backend."""
    return await _location(request.param, tmp_path)


@pytest.fixture(params=["local", *_cloud(cloud.CLOUD_BACKENDS)])
async def shared_location(request: pytest.FixtureRequest, tmp_path: Path) -> StoreLocation:
    """A fresh store on every backend that several processes can share."""
    return await _location(request.param, tmp_path)
