"""kill -9 of a real process across a continue-as-new boundary.

A child process (`continue_child.py`) runs a workflow of six incarnations of
two steps each on a local directory store and is killed with SIGKILL at a
point the test picks from the child's log: right after the workflow body
calls ``durable.continue_as_new``, or 10 ms after (the kill lands before or
after the settlement that starts the next incarnation, or while it commits),
or after a step of an incarnation is done. A new process finishes the run. The run's result
is right (every incarnation saw its predecessor's arguments once), its
status counts every incarnation, and only a step whose entry was not yet
durable at the kill ran twice: an incarnation the store had left behind
never ran again, and the journal of the one in progress answered its
finished steps.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
from continue_child import INCARNATIONS, expected

CHILD = str(Path(__file__).with_name("continue_child.py"))
pytestmark = pytest.mark.slow


def lines(log: Path, run_id: str) -> list[list[str]]:
    """The log lines of run ``run_id``, split."""
    return [
        parts[:1] + parts[2:]
        for parts in (line.split() for line in log.read_text().splitlines())
        if len(parts) >= 3 and parts[1] == run_id
    ]


def start_and_kill(store: Path, log: Path, run_id: str, at: list[str], later: float) -> None:
    """Start the run in a child process; kill -9 it ``later`` seconds after
    the log shows ``at``."""
    proc = subprocess.Popen([sys.executable, CHILD, str(store), str(log), "start", run_id])
    try:
        deadline = time.monotonic() + 60
        while at not in lines(log, run_id):
            assert proc.poll() is None, f"the child exited early with {proc.returncode}"
            assert time.monotonic() < deadline, "the child made no progress"
            time.sleep(0.001)
        time.sleep(later)  # where the kill lands, not a synchronisation
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)


def finish(store: Path, log: Path, run_id: str) -> list[int]:
    done = subprocess.run(
        [sys.executable, CHILD, str(store), str(log), "finish", run_id],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    answer: list[int] = json.loads(done.stdout.strip().splitlines()[-1])
    return answer


@pytest.mark.parametrize(
    ("name", "at", "later"),
    [
        ("boundary-1", ["cont", "1"], 0.0),
        ("boundary-3", ["cont", "3"], 0.0),
        ("boundary-late", ["cont", "2"], 0.01),
        ("mid-step", ["done", "2", "0"], 0.0),
        ("next-step", ["start", "4", "1"], 0.0),
    ],
)
def test_a_run_killed_across_incarnations_resumes_in_a_new_process(
    tmp_path: Path, name: str, at: list[str], later: float
) -> None:
    store, log = tmp_path / "store", tmp_path / "steps.log"
    log.touch()
    run_id = f"cont-{name}"
    start_and_kill(store, log, run_id, at, later)
    killed = lines(log, run_id)
    # A step followed by a later step's start was journaled (a step's body
    # starts once the entries before it are durable); any other that began was
    # in flight. Not a `continue_as_new` call after it: the last step's entry
    # rides the settlement's commit (issue 20, point 2), which the kill may
    # have stopped.
    began = [(inc, pos) for kind, inc, *pos_ in killed if kind == "start" for pos in pos_]
    passed = {
        (line[1], line[2])
        for i, line in enumerate(killed)
        if line[0] == "done" and any(later[0] == "start" for later in killed[i + 1 :])
    }
    in_flight = set(began) - passed
    assert finish(store, log, run_id) == [expected(), INCARNATIONS - 1]
    starts = Counter(
        (inc, pos) for kind, inc, *rest in lines(log, run_id) for pos in rest if kind == "start"
    )
    every = {(str(i), str(p)) for i in range(INCARNATIONS) for p in (0, 1)}
    assert set(starts) == every  # every step of every incarnation ran
    twice = {step for step, n in starts.items() if n > 1}
    assert twice <= in_flight, (twice, in_flight)  # nothing finished ran again
    assert max(starts.values()) <= 2
