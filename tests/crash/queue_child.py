"""A queue process for the kill -9 test (run as a script).

    python queue_child.py URL OPTIONS_JSON TAG

Producers enqueue jobs ``TAG-<n>`` (every 7th with a payload large enough
to be offloaded to its own object) and print ``E <id>`` once the enqueue
returned; workers claim, print ``C <id>``, ack, and print ``A <id>`` once
the ack returned. It runs until killed.
"""

from __future__ import annotations

import asyncio
import json
import sys

from durable.store.queue import EnqueueOptions, OpenOptions, Queue, QueueConfig

QUEUE = "crash"
CONFIG = QueueConfig(keep_done_jobs=10 * 365 * 86400.0, max_attempts=1000)


def payload_of(job_id: str) -> bytes:
    """The payload of ``job_id``: some offloaded, most inline."""
    n = int(job_id.rsplit("-", 1)[1])
    size = 300_000 if n % 7 == 0 else 32
    return (job_id.encode() * (size // len(job_id) + 1))[:size]


def say(what: str, job_id: str) -> None:
    sys.stdout.write(f"{what} {job_id}\n")
    sys.stdout.flush()


async def main(url: str, storage_options: str, tag: str) -> None:
    options = OpenOptions(default_queue_config=CONFIG, payload_offload_threshold=256 * 1024)
    q = await Queue.open(url, options, storage_options=json.loads(storage_options))
    counter = iter(range(10**9))

    async def producer() -> None:
        while True:
            job_id = f"{tag}-{next(counter)}"
            await q.enqueue_with(QUEUE, payload_of(job_id), EnqueueOptions(id_override=job_id))
            say("E", job_id)

    async def worker() -> None:
        while True:
            claim = await q.claim_with_wait(QUEUE, 30.0, 1.0)
            if claim is None:
                continue
            say("C", claim.record.id)
            assert claim.record.payload == payload_of(claim.record.id)
            await q.ack(claim)
            say("A", claim.record.id)

    await asyncio.gather(*(producer() for _ in range(4)), *(worker() for _ in range(4)))


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:]))
