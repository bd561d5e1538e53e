"""Four client processes (``Engine(url, role="client")``) start, signal and
cancel runs while one worker process (``engine.serve()``) runs them: every
run ends as expected, each client sees its results through
``handle.result()``, every step body ran once (side channel), and nothing
a client did fenced the worker."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest
from scaleout_harness import check_executions, check_results, cluster, location

CLIENTS = 4
RUNS = 3  # of each kind (plain, signalled, cancelled) per client
pytestmark = pytest.mark.slow


@pytest.mark.parametrize("backend", ["local", pytest.param("s3", marks=pytest.mark.emulator)])
def test_four_clients_start_signal_and_cancel_runs_that_one_worker_runs(
    backend: str, tmp_path: Path
) -> None:
    where = location(backend, tmp_path)
    with cluster(where, tmp_path) as procs:
        worker = procs.worker()
        owner = procs.wait_for(lambda e: e["ev"] == "owner", 30, worker)
        clients = [procs.client("mix", f"m{i}", RUNS, 0.02) for i in range(CLIENTS)]
        procs.go(clients)
        for client in clients:
            procs.finish(client)
        worker.signal(signal.SIGTERM)
        procs.finish(worker, 60)

    events = procs.events
    problems: list[str] = []
    results = check_results(events, problems)
    assert len(results) == CLIENTS * RUNS * 3
    assert check_executions(events, results, {}, problems) == 0
    # The worker owned the store from start to end: no client fenced it.
    roles = [e["ev"] for e in events if e["ev"] in ("owner", "standby")]
    assert roles == ["owner"], roles
    assert owner["pid"] == worker.pid
    assert not problems, "\n".join(problems)
