"""Fixtures of the executor tests: the mock clock, and an in-process Dask
cluster (two workers of one thread each, its HTTP server on a free port; it
starts in a few milliseconds, so each test gets its own and none sees
another's tasks)."""

from __future__ import annotations

import copyreg
import sys
from collections.abc import AsyncIterator
from pathlib import Path

_BEFORE = dict(copyreg.dispatch_table)
import distributed  # noqa: E402 (after the snapshot)
import pytest  # noqa: E402

# Importing distributed registers tblib's pickling for every exception class
# defined so far (distributed/utils.py: tblib.pickling_support.install()),
# which changes how other tests' exceptions pickle in this process (e.g. one
# that should not unpickle then does). Undo that for exception classes
# (tracebacks keep theirs); in-process workers do not need it.
for _cls in [c for c in copyreg.dispatch_table if c not in _BEFORE]:
    if isinstance(_cls, type) and issubclass(_cls, BaseException):
        del copyreg.dispatch_table[_cls]

from durable.store.clock import MockClock  # noqa: E402

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
