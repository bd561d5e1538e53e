"""Helpers shared by the queue tests."""

from __future__ import annotations

from durable.store.objects.base import ObjectStore
from durable.store.queue import Claim, Queue


def snapshot(q: Queue) -> tuple[list[bytes], list[bytes]]:
    """Every key and value of the queue's store state."""
    return q.writer.state.snapshot()


async def blob_names(objects: ObjectStore) -> list[str]:
    """The payload objects in the store."""
    return await objects.list("blobs/")


async def claim_one(q: Queue, queue: str = "q", lease: float | None = None) -> Claim:
    """Claim the next job of ``queue``; fail the test if there is none."""
    claim = await q.claim(queue, lease)
    assert claim is not None, f"expected a pending job in {queue!r}"
    return claim


#: Tasks of one open queue that sleep on the clock (reaper, scheduler, fence check).
BG = 3
