"""kill -9 of the worker between a request's receipt and its reply (issue 19 point 2).

A worker process (`requests_child.py`) owns a local directory store (one
store, or 8 partitions) and
runs a workflow that answers ``work`` requests with a step's result. This
test is a client engine of the same store: it sends a request and, once
the worker's step for it has begun (the step's log line, not the clock),
kills the worker with SIGKILL. While no worker runs it sends a second
request, then starts a new worker. The replayed run receives the first
request again (its receipt is journaled) and answers it; the caller gets
one answer to each request, and each step finished once.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from requests_child import served

import durable

CHILD = str(Path(__file__).with_name("requests_child.py"))
LIMIT = 60.0
pytestmark = pytest.mark.slow


def lines(log: Path) -> list[str]:
    return log.read_text().splitlines()


async def logged(log: Path, line: str, count: int = 1) -> None:
    """Wait until LOG holds ``line`` ``count`` times (the children's side channel)."""
    deadline = time.monotonic() + LIMIT
    while lines(log).count(line) < count:
        assert time.monotonic() < deadline, f"{line!r} never logged: {lines(log)}"
        await asyncio.sleep(0.005)


def worker(store: Path, log: Path, mode: str, partitions: int) -> subprocess.Popen[bytes]:
    args = [str(store), str(log), mode, str(partitions)]
    return subprocess.Popen([sys.executable, CHILD, *args])


@pytest.mark.parametrize("partitions", [0, 8], ids=["one-store", "8-partitions"])
async def test_a_request_survives_a_kill_of_its_worker(tmp_path: Path, partitions: int) -> None:
    store, log = tmp_path / "store", tmp_path / "steps.log"
    log.touch()
    first = worker(store, log, "hold", partitions)
    second = None
    try:
        await logged(log, "ready")
        async with durable.Engine(store, role="client", partitions=partitions or None) as client:
            assert not client.owner
            handle = await served.options(run_id="served-1").start(2)
            asked = asyncio.ensure_future(handle.request("work", 5))
            await logged(log, "start 5")  # received, journaled, its step runs
            os.kill(first.pid, signal.SIGKILL)
            first.wait(timeout=30)
            assert not asked.done()
            # No worker runs: this request waits durably in the store's inbox.
            later = asyncio.ensure_future(handle.request("work", 7))
            second = worker(store, log, "serve", partitions)
            assert await asyncio.wait_for(asked, LIMIT) == 10
            assert await asyncio.wait_for(later, LIMIT) == 14
            assert await asyncio.wait_for(handle.result(), LIMIT) == [10, 14]
        seen = lines(log)
        assert seen.count("done 5") == 1  # the kill cut its first execution short
        assert seen.count("start 5") == 2
        assert (seen.count("start 7"), seen.count("done 7")) == (1, 1)
    finally:
        for proc in (first, second):
            if proc is not None and proc.poll() is None:
                proc.kill()
                proc.wait(timeout=30)
