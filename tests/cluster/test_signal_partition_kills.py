"""kill -9 of a real process while a signal crosses partitions.

The child (`signal_child.py`) owns both partitions of a store on a local
directory, starts a run waiting on a key homed in the other partition and
SIGKILLs itself at a named point of the message protocol: after the
register message was applied at the home but before its outbox record was
deleted; after the signal's commit but before the deliver message left;
after the deliver message was applied (the run woken) but before the home
deleted its outbox record. This process then opens both partitions: the
outbox records left are sent again, the copies are no-ops at their
targets (done records), and the run ends with the value, its step after
the wait run once, nothing left buffered or in flight.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from signal_child import KEY, RUN, P
from signal_cluster import SignalCluster, buffer_of, index_of

from durable.store.clock import SystemClock
from durable.store.objects import LocalObjectStore

CHILD = str(Path(__file__).with_name("signal_child.py"))
pytestmark = pytest.mark.slow


def run_child(directory: Path, point: str) -> list[str]:
    """Run the child to its death; the lines it printed."""
    proc = subprocess.run(
        [sys.executable, CHILD, str(directory), point],
        capture_output=True,
        text=True,
        timeout=120,
        env=os.environ.copy(),
        check=False,
    )
    assert proc.returncode == -9, (proc.returncode, proc.stdout, proc.stderr[-2000:])
    return proc.stdout.split("\n")


@pytest.mark.parametrize("point", ["register", "deliver-before", "deliver-after"])
async def test_a_signal_crossing_partitions_survives_a_kill_9(tmp_path: Path, point: str) -> None:
    lines = run_child(tmp_path / "store", point)
    assert "dying" in lines
    assert "survived" not in lines
    if point != "register":
        assert "signal delivered" in lines  # the home forwarded it (in one commit)
    cluster = SignalCluster(LocalObjectStore(tmp_path / "store"), P, SystemClock())
    try:
        await cluster.open_all()
        a, h = cluster.parts[0], cluster.parts[1]
        left = len(a.outbox_records()) + len(h.outbox_records())
        assert left == 1  # the record whose send the kill cut short
        await cluster.pump()
        if point == "register":
            assert index_of(h, KEY) is not None
            assert await h.runtime.signal(KEY, b"v") is not None
            await cluster.pump()
        end = await a.finish(RUN)
        assert end.outcome.result == b"v"  # type: ignore[attr-defined]
        assert a.runner.finished == [(RUN, b"v")]  # the step after the wait ran once
        await cluster.pump()
        assert buffer_of(h, KEY) is None  # no copy of the value came back
        assert index_of(h, KEY) is None
        assert await cluster.in_flight() == 0
    finally:
        await cluster.close()
