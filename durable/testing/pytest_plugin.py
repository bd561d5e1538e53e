"""The pytest plugin of `durable`: engines on a mock clock, as fixtures.

Installed with the package (the ``pytest11`` entry point ``durable``), so
every test session of a project that depends on `durable` has these
fixtures; pytest-asyncio runs the async ones (any ``asyncio_mode``):

- ``durable_clock``: a fresh `MockClock` per test (it fails fast: see
  `durable.decorators.stall`).
- ``durable_engine``: a running worker `Engine` on a fresh in-memory store
  (``memory://`` with a name of its own: no two tests share it) on
  ``durable_clock``; closed at teardown.
- ``durable_local_engine``: the same on a local directory under the
  test's ``tmp_path`` (``durable-store``), for tests that reopen the store
  or read it with the CLI.

With `durable.testing.run_until_settled` a test skips the clock through
every timer of a run; see ``docs/testing.md``. Disable the plugin with
``-p no:durable``.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio

from durable.decorators.engine import Engine
from durable.store.clock import MockClock
from durable.store.objects.memory import MemoryObjectStore

__all__ = ["durable_clock", "durable_engine", "durable_local_engine"]


@pytest.fixture
def durable_clock() -> MockClock:
    """A `MockClock` of this test (moved by ``advance``, or `run_until_settled`)."""
    return MockClock()


@pytest_asyncio.fixture
async def durable_engine(durable_clock: MockClock) -> AsyncIterator[Engine]:
    """A running `Engine` on a fresh ``memory://`` store and ``durable_clock``."""
    name = f"durable-test-{uuid.uuid4().hex}"
    try:
        async with Engine(f"memory://{name}", clock=durable_clock) as engine:
            yield engine
    finally:
        MemoryObjectStore.forget(name)


@pytest_asyncio.fixture
async def durable_local_engine(durable_clock: MockClock, tmp_path: Path) -> AsyncIterator[Engine]:
    """A running `Engine` on ``tmp_path / "durable-store"`` and ``durable_clock``."""
    async with Engine(tmp_path / "durable-store", clock=durable_clock) as engine:
        yield engine
