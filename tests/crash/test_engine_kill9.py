"""kill -9 of a real workflow worker process at random moments of its runs.

Each round the test opens the store (fencing the previous worker, requeueing
its claims), notes how far every run has committed, submits a few new runs,
then starts a worker process (`engine_child.py`) and kills it with SIGKILL
at a random moment: during start-up, or after it has started a random
number of steps. Finally this process completes every run.

What counts as "committed" is what the store shows after the kill, not what
the dead process had seen: a settlement is visible in-process (the next step
can be claimed and start) before it is durable, so a kill in that window
re-runs the step even though its successor had started. The log of step
executions must show that no step the store had committed ran again, and
that within one process each step of a run ran once, in order.
"""

from __future__ import annotations

import asyncio
import os
import random
import signal
import time
from pathlib import Path

import procs
import pytest
from engine_child import OPTIONS, STEPS, LoggingRunner, expected_result, spec

from durable.engine import DEFAULT_QUEUE_NAME, TerminalStatus, Terminated, WorkflowRuntime
from durable.store.queue import Queue
from durable.testing.cloud import StoreLocation

CHILD = str(Path(__file__).with_name("engine_child.py"))
ROUNDS = 12
RUNS_PER_ROUND = 3
pytestmark = pytest.mark.slow

#: Steps committed per run, as the store showed them before each worker started.
Progress = list[dict[str, int]]


def read_log(log: Path) -> list[list[str]]:
    return [line.split() for line in log.read_text().splitlines()]


def run_and_kill(where: StoreLocation, log: Path, rng: random.Random) -> None:
    """Start a worker process, let it run a random while, kill -9 it."""
    before = len(read_log(log))
    proc = procs.spawn([CHILD, *where.argv(), str(log)])
    if rng.random() < 0.2:  # any moment, start-up and store open included
        time.sleep(rng.uniform(0.0, 0.6))
    else:  # right after the child started its n-th step (likely mid-step)
        n = rng.randint(1, 12)
        deadline = time.monotonic() + 5.0  # or once it ran out of work
        while time.monotonic() < deadline:
            events = read_log(log)[before:]
            if sum(e[0] == "start" for e in events) >= n:
                break
            time.sleep(0.002)
        time.sleep(rng.uniform(0.0, 0.02))
    assert proc.poll() is None, f"worker exited early with {proc.returncode}"
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)


def new_process(rt: WorkflowRuntime, runs: list[str], runner: LoggingRunner) -> dict[str, int]:
    """How many steps of each run have committed; marks a new process in the log.

    Called with no worker running and the store just opened, so the store
    shows exactly what was durable when the last worker died.
    """
    done = {}
    for run in runs:
        status = rt.status(run)
        assert status is not None, f"run {run} was lost"
        done[run] = status.current_step + isinstance(status.state, Terminated)
    runner.say("process")
    return done


def check_log(events: list[list[str]], progress: Progress, runs: list[str]) -> tuple[int, int]:
    """No committed step started again.

    Returns how many starts were repeats, and how many of those repeated a
    step whose successor had already started (in the process that died).
    """
    segments: list[list[tuple[str, int, int]]] = []
    for event in events:
        if event[0] == "process":
            segments.append([])
        elif event[0] == "start":
            segments[-1].append((event[1], int(event[2]), int(event[3])))
    assert len(segments) == len(progress)
    attempts: dict[tuple[str, int], int] = {}
    highest: dict[str, int] = {}  # highest step started so far, any process
    repeats = speculative = 0
    for n, (starts, done) in enumerate(zip(segments, progress, strict=True)):
        nxt = dict(done)  # the one step of each run a worker can claim
        for run, step, attempt in starts:
            # A committed step never runs again; in one process the steps of
            # a run run in order, once each (no step fails in this test).
            assert step >= done.get(run, 0), f"process {n}: {run} step {step} ran again"
            assert step == nxt.get(run, 0), f"process {n}: {run} ran step {step}, not {nxt}"
            nxt[run] = step + 1
            if (run, step) in attempts:
                repeats += 1
                speculative += step < highest[run]
                # A claim is not awaited durable (semantics 1.4): one lost in
                # the kill is made again with the same attempt number.
                assert attempt >= attempts[run, step], f"{run} step {step}: attempts fell"
            attempts[run, step] = attempt
            highest[run] = max(highest.get(run, 0), step)
    for run in runs:
        assert (run, STEPS - 1) in attempts, f"{run} never started its last step"
    return repeats, speculative


async def test_killed_workers_never_repeat_committed_steps(
    shared_location: StoreLocation, tmp_path: Path
) -> None:
    where = shared_location
    rng = random.Random(20261201)
    log = tmp_path / "steps.log"
    log.touch()
    runner = LoggingRunner(log, max_delay=0.0)  # this process's worker, at the end
    runs: list[str] = []
    progress: Progress = []
    try:
        for round_ in range(ROUNDS):
            q = await Queue.open(where.url, OPTIONS, storage_options=where.options)
            try:
                assert q.stats(DEFAULT_QUEUE_NAME).claimed == 0  # interrupted claims requeued
                rt = WorkflowRuntime(q, runner)
                progress.append(new_process(rt, runs, runner))
                for i in range(RUNS_PER_ROUND):
                    runs.append(f"r{round_}-{i}")
                    assert (await rt.submit(spec(runs[-1]))).newly_submitted
            finally:
                await q.close()
            run_and_kill(where, log, rng)

        # Complete every run in this process.
        q = await Queue.open(where.url, OPTIONS, storage_options=where.options)
        try:
            rt = WorkflowRuntime(q, runner)
            progress.append(new_process(rt, runs, runner))
            worker = rt.spawn()
            try:
                for run in runs:
                    end = await asyncio.wait_for(rt.wait(run), timeout=30)
                    assert end is not None
                    assert end.termination.status is TerminalStatus.SUCCEEDED, end
                    assert end.outcome is not None
                    assert end.outcome.result == expected_result(run)
                    assert end.termination.final_step == STEPS - 1
            finally:
                await worker.shutdown()
            stats = q.stats(DEFAULT_QUEUE_NAME)
            assert (stats.pending, stats.claimed, stats.scheduled, stats.dead) == (0, 0, 0, 0)
        finally:
            await q.close()
    finally:
        runner.close()
    repeats, speculative = check_log(read_log(log), progress, runs)
    print(f"{len(runs)} runs, {repeats} repeated steps ({speculative} after their successor began)")
    assert repeats > 0  # some kills did land mid-step
