"""Helpers shared by the queue tests."""

from __future__ import annotations

from durable.store.objects.base import ObjectStore
from durable.store.queue import Claim, Queue


def process_dies(q: Queue) -> None:
    """What the kernel does when ``q``'s process dies: release its log medium's
    writer lock (the segment medium's ``flock``), so that a new writer may
    open while ``q`` lingers in this process. A no-op on media that fence by
    create-if-absent alone (the new writer fences ``q``)."""
    claim = q.writer._claim
    if claim is not None:
        claim.release()


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
