"""Fixtures of the engine tests: a `MockClock` and queues opened on the shared store.

The queue's reaper, scheduler and fence check sleep an hour, so tests decide alone when
leases expire (`Queue.reap_now`) and scheduled steps come due
(`Queue.promote_scheduled_now`). Retries have no backoff unless
``open_queue(retry_backoff_base=...)`` asks for one.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from engine_helpers import HOUR, QUEUE, Factory, Opener

from durable.store.clock import MockClock
from durable.store.queue import OpenOptions, Queue, QueueConfig


@pytest.fixture
def clock() -> MockClock:
    """The clock of every queue (and so of every runtime) a test opens."""
    return MockClock()


@pytest.fixture
async def open_queue(make_objects: Factory, clock: MockClock) -> AsyncIterator[Opener]:
    """Open a `Queue` on the test's store; ``config`` configures the runtime's queue.

    Every call opens a new handle on the same store (a restart, or a second
    process fencing the first); every queue opened is closed at teardown.
    """
    opened: list[Queue] = []

    async def _open(**config: Any) -> Queue:
        config.setdefault("retry_backoff_base", 0.0)
        cfg = QueueConfig(**config)
        q = await Queue.open(
            make_objects(),
            OpenOptions(
                clock=clock,
                reaper_interval=HOUR,
                scheduler_interval=HOUR,
                fence_check_interval=HOUR,
                queue_configs={QUEUE: cfg},
            ),
        )
        opened.append(q)
        return q

    yield _open
    for q in reversed(opened):
        await q.close()
