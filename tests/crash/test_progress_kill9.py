"""kill -9, again and again: a progressing run never fails, a poison run ends.

Issue 13, point 2, with real processes (`progress_child.py`) on a local
directory store. A delivery that dies with its process costs its queue job
an attempt; the run counts only the attempts that journal nothing.

- A run of `STEPS` steps is killed `KILLS` times (more than the 25 claims
  the queue used to allow, and more than the bound without progress),
  each time once one more step has begun after the last kill (so the step
  before it is journaled): it finishes with every step journaled once.
- A workflow whose step SIGKILLs its own process fails, once `LIMIT`
  attempts in a row have ended without progress, with `RunStalled`.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import procs
import pytest

import durable
from durable.decorators.archive import load_journal
from durable.decorators.journal import STEP

CHILD = str(Path(__file__).with_name("progress_child.py"))
STEPS = 60
KILLS = 30
LIMIT = 3
pytestmark = pytest.mark.slow


def events(log: Path, kind: str, run_id: str) -> list[int]:
    """The positions of ``kind`` lines of run ``run_id`` in ``log``, in order."""
    out = []
    for line in log.read_text().splitlines():
        parts = line.split()
        if parts[:2] == [kind, run_id]:
            out.append(int(parts[2]) if len(parts) > 2 else -1)
    return out


def child(store: Path, log: Path, *args: str) -> list[str]:
    return [CHILD, str(store), str(log), *args]


def kill_once_past(store: Path, log: Path, run_id: str, highest: int) -> int:
    """Run the long workflow in a child; SIGKILL it as soon as a step after
    ``highest`` begins; that step's position."""
    proc = procs.spawn(child(store, log, "long", run_id, str(STEPS)))
    try:
        deadline = time.monotonic() + 60
        while True:
            begun = [p for p in events(log, "start", run_id) if p > highest]
            if begun:
                return begun[0]
            assert proc.poll() is None, f"the child exited early with {proc.returncode}"
            assert time.monotonic() < deadline, "the child made no progress"
            time.sleep(0.002)
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)


def finish(command: list[str]) -> subprocess.CompletedProcess[str]:
    return procs.run(command, capture_output=True, text=True, timeout=180)


async def test_a_progressing_run_survives_more_kills_than_any_attempt_limit(
    tmp_path: Path,
) -> None:
    store, log, run_id = tmp_path / "store", tmp_path / "steps.log", "long"
    log.touch()
    highest = -1
    for _ in range(KILLS):
        highest = kill_once_past(store, log, run_id, highest)
    assert highest < STEPS - 1, "the run finished before the last kill"
    done = finish(child(store, log, "long", run_id, str(STEPS)))
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.splitlines()[-1]) == {"result": sum(range(STEPS))}

    async with durable.Engine(store, concurrency={"workflows": 0}) as engine:
        journal = await load_journal(engine, run_id)
    assert [(p, e.kind, e.name, e.resolved) for p, e in journal.entries()] == [
        (p, STEP, "crash.progress.work", True) for p in range(STEPS)
    ]
    starts = events(log, "start", run_id)
    assert sorted(set(starts)) == list(range(STEPS))
    # At most the step in flight at each kill ran again.
    again = [p for p in range(STEPS) if starts.count(p) > 1]
    assert all(starts.count(p) == 2 for p in again), starts
    assert len(again) <= KILLS


async def test_a_run_that_kills_its_process_at_one_position_ends_stalled(
    tmp_path: Path,
) -> None:
    store, log, run_id = tmp_path / "store", tmp_path / "steps.log", "poison"
    log.touch()
    kills = 0
    while True:
        done = finish(child(store, log, "poison", run_id, str(LIMIT)))
        if done.returncode == -signal.SIGKILL:
            kills += 1
            assert kills <= LIMIT + 1, "the poison run was not stopped"
            continue
        assert done.returncode == 0, done.stderr
        break
    outcome = json.loads(done.stdout.splitlines()[-1])
    assert outcome == {
        "error": "RunStalled",
        "position": 1,
        "attempts": LIMIT,
        "workflow": "crash.progress.poisoned",
    }
    # The first attempt journaled step 0 (progress); LIMIT more died at step 1.
    assert kills == LIMIT + 1
    assert len(events(log, "boom", run_id)) == LIMIT + 1
    assert events(log, "start", run_id) == [0]
