"""kill -9 between a step's end and the next step's start (issue 20, point 2).

A step's journal entry is not awaited when the step ends: it is awaited
before the next step's body starts (`RunContext.journaled`). This test
proves that line with real processes: a child (`writes_child.py`) starts
many two-step runs on a local directory store; step 1 returns a fresh
uuid4, step 2 appends it to a trace file outside the store. The child is
killed with SIGKILL at a random point of the trace, a new process finishes
every run, and every uuid step 2 ever recorded for a run must be the step-1
result its journal kept (the run's result): step 2 never ran on a step-1
result that was not durable.
"""

from __future__ import annotations

import json
import os
import random
import signal
import time
from pathlib import Path

import pytest
from procs import reap, run, spawn

CHILD = str(Path(__file__).with_name("writes_child.py"))
RUNS = 300
ROUNDS = 3
pytestmark = pytest.mark.slow


def trace_lines(trace: Path) -> list[tuple[str, str]]:
    """``(run, uuid)`` of every complete line step 2 wrote."""
    text = trace.read_text()
    return [tuple(line.split()) for line in text.splitlines() if len(line.split()) == 2]  # type: ignore[misc]


def start_and_kill(store: Path, trace: Path, after: int) -> int:
    """Start `RUNS` runs in a child; kill -9 it once ``after`` more trace
    lines are written. The trace lines at the kill."""
    first = len(trace_lines(trace))
    proc = spawn([CHILD, str(store), str(trace), "start", str(RUNS)])
    try:
        deadline = time.monotonic() + 60
        while len(trace_lines(trace)) < first + after:
            assert proc.poll() is None, f"the child exited early with {proc.returncode}"
            assert time.monotonic() < deadline, "the child made no progress"
            time.sleep(0.001)  # polling a file another process writes
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        reap(proc)
    return len(trace_lines(trace))


def test_step_2_never_runs_on_a_step_1_result_that_was_not_durable(tmp_path: Path) -> None:
    rng = random.Random(20261203)
    trace = tmp_path / "trace"
    trace.touch()
    for round_ in range(ROUNDS):
        store = tmp_path / f"store-{round_}"
        killed_at = start_and_kill(store, trace, after=rng.randint(5, RUNS // 2))
        done = run(
            [CHILD, str(store), str(trace), "finish", str(RUNS)],
            timeout=180,
            capture_output=True,
            text=True,
        )
        assert done.returncode == 0, done.stderr
        results: dict[str, str] = json.loads(done.stdout.strip().splitlines()[-1])
        assert len(results) == RUNS
        lines = [(r, u) for r, u in trace_lines(trace) if r in results]
        assert len(lines) >= RUNS  # step 2 ran for every run, some twice
        for run_id, value in lines:
            # Every value step 2 acted on is the journaled step-1 result.
            assert value == results[run_id], (round_, run_id, value, results[run_id])
        trace.write_text("")  # the next round's store has the same run ids
        print(f"round {round_}: killed at {killed_at} trace lines, {len(lines)} after restart")
