"""Four client processes (``Engine(url, role="client")``) start, signal and
cancel runs while one worker process (``engine.serve()``) runs them: every
run ends as expected, each client sees its results through
``handle.result()``, every step body ran once (side channel), and nothing
a client did fenced the worker.

Before the clients start, another process (the test) writes a corrupt
request into the inbox, sorting before theirs: the worker moves it to
``inbox-corrupt/``, logs an event naming its key, and applies every request
behind it."""

from __future__ import annotations

import asyncio
import signal
from pathlib import Path

import pytest
from scaleout_harness import check_executions, check_results, cluster, create, listing, location

from durable.cluster.requests import CORRUPT_PREFIX, INBOX_PREFIX, REQ_PREFIX

CLIENTS = 4
RUNS = 3  # of each kind (plain, signalled, cancelled) per client
#: A request object someone corrupted; it sorts before every ULID.
CORRUPT = REQ_PREFIX + "0" * 26
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
        asyncio.run(create(where, CORRUPT, b"not a request"))
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
    # The corrupt request was moved aside, and logged naming its key.
    corrupt = [e for e in events if e["ev"] == "corrupt"]
    assert len(corrupt) == 1, corrupt
    assert f"key='{CORRUPT}'" in corrupt[0]["message"], corrupt
    moved = CORRUPT_PREFIX + CORRUPT.removeprefix(INBOX_PREFIX)
    assert asyncio.run(listing(where, CORRUPT_PREFIX)) == [moved]
    assert asyncio.run(listing(where, INBOX_PREFIX)) == []
    assert not problems, "\n".join(problems)
