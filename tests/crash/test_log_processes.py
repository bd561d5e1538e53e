"""Real processes: kill -9 of a committing writer, and fencing across processes."""

from __future__ import annotations

import os
import random
import signal
from pathlib import Path

import procs
import pytest
from procs import read_acks_until, reap

from durable.store.log import LogReader, LogWriter
from durable.store.objects import open_object_store
from durable.testing.cloud import StoreLocation

CHILD = str(Path(__file__).with_name("log_child.py"))
pytestmark = pytest.mark.slow


def spawn(*args: str) -> procs.Child:
    return procs.spawn([CHILD, *args], stdin=procs.PIPE, stdout=procs.PIPE, text=True)


async def test_kill_9_loses_no_acknowledged_commit(tmp_path: Path) -> None:
    # The log alone, on a local directory; the queue's kill -9 test runs on
    # every backend.
    shared_location = StoreLocation("local", str(tmp_path / "store"))
    where = shared_location.argv()
    rng = random.Random(7)
    acked: set[int] = set()
    for _ in range(20):
        proc = spawn(*where, "commit")
        acked.update(read_acks_until(proc, rng.randint(1, 120)))
        os.kill(proc.pid, signal.SIGKILL)  # mid-traffic: commits are in flight
        assert proc.stdout is not None
        acked.update(int(line.split()[1]) for line in proc.stdout.read().splitlines())
        reap(proc)
        objects = await open_object_store(shared_location.url, shared_location.options)
        w = await LogWriter.open(objects)  # opens cleanly every time
        missing = [i for i in acked if w.state.get(b"k%08d" % i) != b"v%d" % i]
        assert missing == []
        await w.close()
        await objects.close()
    assert len(acked) > 200


async def test_second_process_fences_the_first(shared_location: StoreLocation) -> None:
    where = shared_location.argv()
    a = spawn(*where, "fence", "a")
    assert a.stdout is not None
    assert a.stdin is not None
    assert a.stdout.readline().strip() == "ready"
    b = spawn(*where, "fence", "b")
    assert b.stdout is not None
    assert b.stdin is not None
    assert b.stdout.readline().strip() == "ready"
    a.stdin.write("go\n")
    a.stdin.flush()
    assert a.stdout.readline().strip() == "fenced"
    b.stdin.write("go\n")
    b.stdin.flush()
    assert b.stdout.readline().strip() == "committed"
    assert a.wait(timeout=30) == 0
    assert b.wait(timeout=30) == 0
    reap(a)
    reap(b)
    objects = await open_object_store(shared_location.url, shared_location.options)
    r = await LogReader.open(objects)
    assert r.state.get(b"writer-a") == b"1"  # a's commit before b opened survives
    assert r.state.get(b"writer-b") == b"1"
    assert r.state.get(b"late-b") == b"1"
    assert r.state.get(b"late-a") is None  # the fenced commit never landed
    await objects.close()
