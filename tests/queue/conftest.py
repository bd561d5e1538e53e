"""Fixtures of the queue tests: every test runs on a memory store, a local
store, and a local store whose log is segment files (`SegmentObjectStore`).

Time is a `MockClock`; the background loops get hour-long intervals unless a
test asks otherwise, so `reap_now` / `promote_scheduled_now` / `sweep_now`
decide alone what happens and when.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from durable.store.clock import MockClock
from durable.store.objects import LocalObjectStore, MemoryObjectStore, SegmentObjectStore
from durable.store.objects.base import ObjectStore
from durable.store.queue import OpenOptions, Queue

Factory = Callable[[], ObjectStore]
Opener = Callable[..., Awaitable[Queue]]

HOUR = 3600.0


@pytest.fixture(params=["memory", "local", "segments"])
def make_objects(request: pytest.FixtureRequest, tmp_path: Path) -> Factory:
    """Handles on ONE store (each call is like another process's handle); the
    queue's conformance runs on every log medium."""
    if request.param == "memory":
        shared = MemoryObjectStore()
        return lambda: shared
    if request.param == "segments":
        # Small segments, so that rolling and trimming happen within a test.
        return lambda: SegmentObjectStore(tmp_path / "store", segment_bytes=4096)
    return lambda: LocalObjectStore(tmp_path / "store")


@pytest.fixture
def clock() -> MockClock:
    return MockClock()


@pytest.fixture
async def open_queue(make_objects: Factory, clock: MockClock) -> AsyncIterator[Opener]:
    """Open a `Queue` on the shared store; every queue opened is closed at teardown."""
    opened: list[Queue] = []

    async def _open(**options: Any) -> Queue:
        options.setdefault("clock", clock)
        options.setdefault("reaper_interval", HOUR)
        options.setdefault("scheduler_interval", HOUR)
        options.setdefault("fence_check_interval", HOUR)
        q = await Queue.open(make_objects(), OpenOptions(**options))
        opened.append(q)
        return q

    yield _open
    for q in reversed(opened):
        with contextlib.suppress(Exception):
            await q.close()


@pytest.fixture
async def queue(open_queue: Opener) -> Queue:
    return await open_queue()
