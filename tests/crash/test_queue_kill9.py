"""kill -9 of a real queue process at random moments of enqueue/claim/ack traffic."""

from __future__ import annotations

import os
import random
import signal
from pathlib import Path

import procs
import pytest
from queue_child import CONFIG, QUEUE, payload_of

from durable.store.queue import JobStatus, OpenOptions, Queue, QueueReader
from durable.testing.cloud import StoreLocation

CHILD = str(Path(__file__).with_name("queue_child.py"))
pytestmark = pytest.mark.slow


def read_events(proc: procs.Child, count: int) -> list[tuple[str, ...]]:
    assert proc.stdout is not None
    events = []
    while len(events) < count:
        line = proc.stdout.readline()
        assert line, f"child exited early with {proc.wait()}"
        events.append(tuple(line.split()))
    return events


async def check_reader_sees(where: StoreLocation, enqueued: set[str]) -> None:
    """A read-only view in this process sees the live writer's commits, never fencing it."""
    reader = await QueueReader.open(where.url, storage_options=where.options)
    await reader.refresh()
    for job_id in enqueued:
        record = reader.job_record(job_id)
        assert record is not None, f"reader does not see enqueued job {job_id}"
    await reader.close()


async def run_and_kill(where: StoreLocation, tag: str, lines: int) -> list[tuple[str, str]]:
    """Start a child, read ``lines`` events, kill -9 it, return every event it printed.

    Half-way, a reader in this process checks what the child reported so
    far; the child must go on working afterwards (readers never fence).
    """
    # Blocking reads of the child's pipe are fine: this loop runs nothing else.
    proc = procs.spawn([CHILD, *where.argv(), tag], stdout=procs.PIPE, text=True)
    assert proc.stdout is not None
    events = read_events(proc, lines // 2)
    await check_reader_sees(where, {e[1] for e in events if e[0] == "E"})
    events += read_events(proc, lines - lines // 2 + 5)  # still writing after the read
    os.kill(proc.pid, signal.SIGKILL)
    events += [tuple(line.split()) for line in proc.stdout.read().splitlines()]
    proc.wait(timeout=30)
    proc.stdout.close()
    return [(e[0], e[1]) for e in events if len(e) == 2]


async def test_every_returned_operation_survives_kill_9(shared_location: StoreLocation) -> None:
    where = shared_location
    rng = random.Random(20261130)
    enqueued: set[str] = set()
    acked: set[str] = set()
    for round_ in range(20):
        events = await run_and_kill(where, f"r{round_}", rng.randint(5, 400))
        enqueued |= {job for what, job in events if what == "E"}
        acked |= {job for what, job in events if what == "A"}
        options = OpenOptions(default_queue_config=CONFIG)
        q = await Queue.open(where.url, options, storage_options=where.options)  # opens cleanly
        stats = q.stats(QUEUE)
        assert stats.claimed == 0  # interrupted claims were requeued at open
        for job_id in enqueued:
            # Payloads (some offloaded to blobs) of this round's jobs; every
            # job's record every round.
            fresh = job_id.startswith(f"r{round_}-")
            record = await q.get_job(job_id) if fresh else q.job_record(job_id)
            assert record is not None, f"enqueued job {job_id} was lost"
            if fresh:
                assert record.payload == payload_of(job_id)
            if job_id in acked:
                assert record.status is JobStatus.DONE, f"acked job {job_id} is {record.status}"
            else:
                assert record.status in (JobStatus.PENDING, JobStatus.DONE)
        await q.close()
    assert len(enqueued) > 500
    assert len(acked) > 100
