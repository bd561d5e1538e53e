"""Step bodies on a Dask cluster of worker processes, killed with SIGKILL
(issue 16, point 3): a worker killed mid-step costs only its attempt, and
an engine killed while its step runs on the cluster resumes in a new
process.

The cluster (`LocalCluster`, two worker processes of one thread, each under
a nanny that restarts it) starts with ``allowed-failures: 0``, as the docs
tell users: a killed worker gives ``KilledWorker`` at once and Dask never
re-runs a body itself. The bodies (`dask_child`) leave a file per execution
outside the store, so executions are counted across processes.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import TypeVar

import dask.config
import distributed
import pytest
from dask_child import executions, pipeline
from decorator_helpers import LIMIT, journal_names

import durable
from durable.decorators.archive import load_journal

pytestmark = pytest.mark.slow

CHILD = str(Path(__file__).with_name("dask_child.py"))
RESULT = [1, 2, 70, 4]  # pipeline(side, 7)
T = TypeVar("T")


@pytest.fixture
async def process_cluster() -> AsyncIterator[distributed.LocalCluster]:
    """Two worker processes of one thread each; the scheduler (in this
    process) with ``allowed-failures: 0``."""
    with dask.config.set({"distributed.scheduler.allowed-failures": 0}):
        async with distributed.LocalCluster(
            processes=True,
            n_workers=2,
            threads_per_worker=1,
            host="127.0.0.1",
            dashboard_address=":0",
            asynchronous=True,
        ) as cluster:
            yield cluster


def poll(found: Callable[[], T], alive: Callable[[], None] = lambda: None) -> T:
    """``found()`` once it is truthy (the files of another process: no event
    to wait on); ``alive()`` asserts the writer still lives. Bounded by `LIMIT`."""
    deadline = time.monotonic() + LIMIT
    while not (value := found()):
        alive()
        assert time.monotonic() < deadline, "nothing came"
        time.sleep(0.005)
    return value


async def test_a_worker_killed_mid_step_costs_only_its_attempt(
    tmp_path: Path, process_cluster: distributed.LocalCluster
) -> None:
    side = tmp_path / "side"
    side.mkdir()
    async with (
        distributed.Client(process_cluster, asynchronous=True) as client,
        durable.Engine(tmp_path / "store", executors={"dask": client}) as engine,
    ):
        handle = await pipeline.start(str(side), 7)
        [killed] = await asyncio.to_thread(poll, lambda: executions(side, "held", 2))
        os.kill(killed, signal.SIGKILL)  # the worker running held, blocked in its body
        (side / "release").touch()  # the next attempt goes through
        assert await handle.result(timeout=LIMIT) == RESULT
        names = [name for _, _, name in await journal_names(engine, handle.run_id)]
    started = executions(side, "held", 2)
    assert len(started) == 2, started  # the killed attempt and one more
    assert killed in started
    [again] = [pid for pid in started if pid != killed]  # on another worker process
    assert executions(side, "held", 2, "done") == [again]
    assert names.count("dask_child.held") == 1  # one result journaled
    for position in (0, 1, 3):
        assert len(executions(side, "quick", position)) == 1, position


def spawn(args: list[str]) -> subprocess.Popen[bytes]:
    """`dask_child` running in a new process with ``args``."""
    return subprocess.Popen([sys.executable, CHILD, *args])


async def journaled(store: Path, run_id: str) -> set[int]:
    """The positions the store's journal holds a result for (nothing runs here)."""
    async with durable.Engine(store, concurrency={"workflows": 0}) as engine:
        journal = await load_journal(engine, run_id)
        return {p for p, e in journal.entries() if e.resolved}


async def test_an_engine_killed_while_its_step_runs_on_the_cluster_resumes(
    tmp_path: Path, process_cluster: distributed.LocalCluster
) -> None:
    store, side, run_id = tmp_path / "store", tmp_path / "side", "engine-kill"
    side.mkdir()
    child = [str(store), str(side), process_cluster.scheduler_address]
    proc = spawn([*child, "start", run_id])

    def alive() -> None:
        assert proc.poll() is None, f"the child exited early with {proc.returncode}"

    try:
        [first] = await asyncio.to_thread(poll, lambda: executions(side, "held", 2), alive)
    finally:
        os.kill(proc.pid, signal.SIGKILL)  # the engine, while held runs on a worker
        proc.wait(timeout=LIMIT)
    held = await journaled(store, run_id)
    assert held == {0, 1}, held  # the quick steps' results, before held started
    (side / "release").touch()  # the orphaned body ends too, unobserved

    done = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, CHILD, *child, "finish", run_id],
        capture_output=True,
        text=True,
        timeout=4 * LIMIT,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.strip().splitlines()[-1]) == RESULT
    assert await journaled(store, run_id) == {0, 1, 2, 3}
    for position in held:  # journaled before the kill: never again
        assert len(executions(side, "quick", position)) == 1, position
    started = executions(side, "held", 2)
    assert len(started) == 2, started  # in flight at the kill: run again
    assert first in started
    assert len(executions(side, "quick", 3)) == 1


def queued_for(cluster: distributed.LocalCluster, run_id: str) -> int:
    """How many tasks of ``run_id`` the scheduler (in this process) holds."""
    return sum(1 for key in cluster.scheduler.tasks if str(key).startswith(f"{run_id}/"))


async def test_a_restarted_engine_waits_for_workers_busy_with_orphaned_bodies(
    tmp_path: Path, process_cluster: distributed.LocalCluster
) -> None:
    """Every worker is still running a body of the killed engine (Dask cannot
    stop a thread): the restarted engine's attempts wait on the cluster until
    those end, then the run completes; the orphans' results are dropped."""
    store, side, run_id = tmp_path / "store", tmp_path / "side", "orphans"
    side.mkdir()
    child = [str(store), str(side), process_cluster.scheduler_address]
    proc = spawn([*child, "start-wide", run_id])

    def alive() -> None:
        assert proc.poll() is None, f"the child exited early with {proc.returncode}"

    def both_held() -> list[int]:
        found = executions(side, "held", 1) + executions(side, "held", 2)
        return found if len(found) == 2 else []

    try:
        orphans = await asyncio.to_thread(poll, both_held, alive)
    finally:
        os.kill(proc.pid, signal.SIGKILL)  # the engine, while both workers hold its bodies
        proc.wait(timeout=LIMIT)
    assert sorted(orphans) == sorted(w.pid for w in process_cluster.workers.values() if w.pid)
    assert await journaled(store, run_id) == {0}
    # Its client gone, the scheduler forgets the killed engine's tasks.
    await asyncio.to_thread(poll, lambda: queued_for(process_cluster, run_id) == 0)

    finisher = subprocess.Popen(  # noqa: ASYNC220
        [sys.executable, CHILD, *child, "finish-wide", run_id],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        # The new attempts reach the scheduler while every worker thread is
        # still inside an orphaned body: they are queued, none has started.
        await asyncio.to_thread(poll, lambda: queued_for(process_cluster, run_id) >= 2)
        assert len(executions(side, "held", 1) + executions(side, "held", 2)) == 2
        release = side / "release"
        release.touch()  # the orphans end (unobserved), then the new attempts run
        out, _ = await asyncio.to_thread(finisher.communicate, timeout=4 * LIMIT)
    finally:
        if finisher.poll() is None:
            finisher.kill()
            finisher.wait()
    assert finisher.returncode == 0
    assert json.loads(out.strip().splitlines()[-1]) == [1, 70, 70]
    assert await journaled(store, run_id) == {0, 1, 2}
    assert len(executions(side, "quick", 0)) == 1  # journaled before the kill: never again
    for position in (1, 2):
        started = side.glob(f"held.{position}.*.started")
        times = sorted(p.stat().st_mtime_ns for p in started)
        assert len(times) == 2, times  # the orphan and the restarted engine's attempt
        assert times[1] >= release.stat().st_mtime_ns  # only once a worker was free
