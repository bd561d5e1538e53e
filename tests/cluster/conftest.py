"""Fixtures of the inbox tests: a `MockClock`, owners opened on the shared
store, and the two-partition `cluster` of the signal-routing tests.

The queue's reaper, scheduler and fence check sleep an hour, so tests decide
alone when scheduled steps come due. Every owner opened is closed at teardown
(its applier stopped first).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from cluster_helpers import Factory, Opener, Owner, open_owner
from signal_cluster import SignalCluster

from durable.store.clock import MockClock
from durable.store.objects.base import ObjectStore


@pytest.fixture
def clock() -> MockClock:
    """The clock of every owner and writer of a test."""
    return MockClock()


@pytest.fixture
async def owner_of(clock: MockClock) -> AsyncIterator[Opener]:
    """``await owner_of(store, body, ...)``: an `Owner` of ``store``, closed at teardown."""
    opened: list[Owner] = []

    async def _open(store: ObjectStore, *args: Any, **kwargs: Any) -> Owner:
        owner = await open_owner(store, clock, *args, **kwargs)
        opened.append(owner)
        return owner

    yield _open
    for owner in reversed(opened):
        await owner.applier.stop()
        await owner.queue.close()


@pytest.fixture(params=[True, False], ids=["direct", "objects"])
async def cluster(
    request: pytest.FixtureRequest, make_objects: Factory, clock: MockClock
) -> AsyncIterator[SignalCluster]:
    """Two partitions of a store with signals routed between them, both
    opened (messages applied at once, or through inbox objects)."""
    cl = SignalCluster(make_objects(), 2, clock, direct=request.param)
    await cl.open_all()
    yield cl
    await cl.close()
