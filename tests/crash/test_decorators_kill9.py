"""kill -9 of a real process in the middle of a decorated workflow.

A child process (`decorators_child.py`) starts a run of an 8-step workflow
on a local directory store and is killed with SIGKILL once a few steps are
done (the test watches the steps' log file, not the clock). The test then
reads the journal the store kept, and a new process with a new `Engine`
finishes the run. Every step ran; no step the journal held at the kill ran
again; only the step in flight at the kill may have run twice.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from decorators_child import STEPS

import durable
from durable.decorators.archive import load_journal

CHILD = str(Path(__file__).with_name("decorators_child.py"))
ROUNDS = 3
pytestmark = pytest.mark.slow


def events(log: Path, run_id: str) -> list[tuple[str, int]]:
    out = []
    for line in log.read_text().splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[1] == run_id:
            out.append((parts[0], int(parts[2])))
    return out


def start_and_kill(store: Path, log: Path, run_id: str, after: int) -> None:
    """Start the run in a child process; kill -9 it once ``after`` steps are done."""
    proc = subprocess.Popen([sys.executable, CHILD, str(store), str(log), "start", run_id])
    try:
        deadline = time.monotonic() + 30
        while sum(kind == "done" for kind, _ in events(log, run_id)) < after:
            assert proc.poll() is None, f"the child exited early with {proc.returncode}"
            assert time.monotonic() < deadline, "the child made no progress"
            time.sleep(0.002)
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)


async def journaled(store: Path, run_id: str) -> set[int]:
    """The positions the store's journal holds a result for (nothing runs here)."""
    async with durable.Engine(store, concurrency={"workflows": 0}) as engine:
        journal = await load_journal(engine, run_id)  # the KV, or the archive once ended
        return {p for p, e in journal.entries() if e.resolved}


def finish(store: Path, log: Path, run_id: str) -> str:
    done = subprocess.run(
        [sys.executable, CHILD, str(store), str(log), "finish", run_id],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


async def test_a_killed_workflow_resumes_in_a_new_process(tmp_path: Path) -> None:
    rng = random.Random(20260601)
    store, log = tmp_path / "store", tmp_path / "steps.log"
    log.touch()
    repeated = 0
    for round_ in range(ROUNDS):
        run_id = f"kill-{round_}"
        start_and_kill(store, log, run_id, after=rng.randint(2, STEPS - 2))
        killed = events(log, run_id)
        held = await journaled(store, run_id)
        assert held, "the kill landed before any step was journaled"
        assert held == set(range(len(held)))  # a prefix of the steps
        assert finish(store, log, run_id) == "-".join(str(i) for i in range(STEPS))
        assert await journaled(store, run_id) == set(range(STEPS))  # nothing lost

        after = events(log, run_id)[len(killed) :]
        starts = [p for kind, p in events(log, run_id) if kind == "start"]
        assert sorted(set(starts)) == list(range(STEPS))  # every step ran
        for position in held:  # journaled before the kill: never again
            assert starts.count(position) == 1, (position, starts)
        # The new process began where the journal ended, and ran each step once.
        restarted = [p for kind, p in after if kind == "start"]
        assert restarted == list(range(len(held), STEPS))
        repeated += len(set(restarted) & {p for kind, p in killed if kind == "start"})
    print(f"{ROUNDS} kills, {repeated} steps in flight at a kill ran again")
