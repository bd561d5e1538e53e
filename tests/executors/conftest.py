"""Fixtures of the executor tests: the mock clock, and an in-process Dask
cluster (two workers of one thread each, its HTTP server on a free port; it
starts in a few milliseconds, so each test gets its own and none sees
another's tasks)."""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator
from pathlib import Path

import distributed
import pytest

from durable.store.clock import MockClock

# The decorator tests' helpers (make_engine honours DURABLE_TEST_PARTITIONS).
sys.path.insert(0, str(Path(__file__).parent.parent / "decorators"))


@pytest.fixture
def clock() -> MockClock:
    """The clock of every engine a test opens."""
    return MockClock()


@pytest.fixture
async def cluster() -> AsyncIterator[distributed.LocalCluster]:
    """An in-process cluster: two workers, one thread each, no sockets."""
    async with distributed.LocalCluster(
        processes=False,
        n_workers=2,
        threads_per_worker=1,
        dashboard_address=":0",  # None still serves HTTP, on 8787: clashes across xdist workers
        asynchronous=True,
    ) as cluster:
        yield cluster


@pytest.fixture
async def client(cluster: distributed.LocalCluster) -> AsyncIterator[distributed.Client]:
    """An asynchronous client of `cluster`."""
    async with distributed.Client(cluster, asynchronous=True) as client:
        yield client
