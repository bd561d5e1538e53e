"""Two client processes submit the same run ids at once through the
decorator API (``wf.options(run_id=...).start(x)``) while a worker runs
them (two pairs of clients at once, in one cluster per backend): with
the same input, one run per id whose body ran once, and both clients see
its result; with different inputs, one run per id (the
winner's input), and the other client gets `InputMismatch`, at ``start()``
when the clash is visible to it then, else at ``result()``.

A client whose view of the store is behind (it cannot see the run the
other started, and the other's request has left the inbox) has its
``start()`` succeed; its ``result()`` must then raise `InputMismatch`
instead of returning the other run's result."""

from __future__ import annotations

import asyncio
import signal
import time
from collections import Counter, defaultdict
from pathlib import Path

import pytest
from scaleout_harness import cluster, listing, location

from durable.cluster.requests import INBOX_PREFIX
from durable.testing.cloud import StoreLocation

RUNS = 20
pytestmark = pytest.mark.slow

BACKENDS = [
    "local",
    pytest.param("s3", marks=pytest.mark.emulator),
    pytest.param("gcs", marks=pytest.mark.emulator),
    pytest.param("azure", marks=pytest.mark.emulator),
]


def _race(where: StoreLocation, tmp_path: Path) -> list[dict]:
    """One worker; four clients at once: two submit run ids ``s0..`` with the
    same input (5), two submit run ids ``d0..`` with inputs 1 and 2."""
    with cluster(where, tmp_path) as procs:
        worker = procs.worker()
        procs.wait_for(lambda e: e["ev"] == "owner", 30, worker)
        pairs = [("s", 5), ("s", 5), ("d", 1), ("d", 2)]
        clients = [procs.client("same", prefix, RUNS, x) for prefix, x in pairs]
        procs.go(clients)
        for client in clients:
            procs.finish(client)
        worker.signal(signal.SIGTERM)
        procs.finish(worker, 60)
    return procs.events


@pytest.mark.parametrize("backend", BACKENDS)
def test_one_run_id_from_two_processes_at_once_is_one_run_or_an_input_mismatch(
    backend: str, tmp_path: Path
) -> None:
    events = _race(location(backend, tmp_path), tmp_path)
    check_same_input([e for e in events if e.get("run", "").startswith("s")])
    check_other_inputs([e for e in events if e.get("run", "").startswith("d")])


def check_same_input(events: list[dict]) -> None:
    """Both starts of each run id succeeded, one run ran (its body once),
    and both clients got its result."""
    starts = Counter(e["run"] for e in events if e["ev"] == "start" and e.get("ok"))
    assert starts == Counter({f"s{i}": 2 for i in range(RUNS)})  # both starts succeed
    bodies = Counter(e["run"] for e in events if e["ev"] == "start" and "step" in e)
    assert bodies == Counter({f"s{i}": 1 for i in range(RUNS)})  # one run, its body once
    results = defaultdict(list)
    for e in events:
        if e["ev"] == "result":
            results[e["run"]].append(e.get("value", e.get("error")))
    for i in range(RUNS):
        first, second = results[f"s{i}"]
        assert first == second, (first, second)
        assert first["x"] == 6, first


def check_other_inputs(events: list[dict]) -> None:
    """One run per id, with the winner's input; the other client got
    `InputMismatch`, at ``start()`` or at ``result()``."""
    bodies = Counter(e["run"] for e in events if e["ev"] == "start" and "step" in e)
    assert bodies == Counter({f"d{i}": 1 for i in range(RUNS)})  # one run per id
    surfaced: Counter[str] = Counter()
    for i in range(RUNS):
        run = f"d{i}"
        started = {
            e["input"]: e.get("error", "ok")
            for e in events
            if e["ev"] == "start" and e.get("run") == run and "step" not in e
        }
        assert set(started.values()) <= {"ok", "InputMismatch"}, (run, started)
        assert len(started) == 2, (run, started)
        results = {
            e["pid"]: e.get("value", e.get("error"))
            for e in events
            if e["ev"] == "result" and e["run"] == run
        }
        values = [v for v in results.values() if isinstance(v, dict)]
        # The winner (the input the run has) started and sees its own result.
        winner = values[0]["x"] - 1
        assert started[winner] == "ok", (run, started, results)
        assert values[0]["x"] == winner + 1
        loser = 3 - winner
        if started[loser] == "InputMismatch":
            surfaced["start"] += 1
            assert len(results) == 1, (run, started, results)
        elif sorted(map(str, results.values())).count("InputMismatch") == 1:
            surfaced["result"] += 1
            assert len(values) == 1, (run, started, results)
        else:
            raise AssertionError(f"{run}: the loser got no InputMismatch: {started} {results}")
    print(f"InputMismatch surfaced at: {dict(surfaced)}")


async def _inbox_empty(where: StoreLocation) -> bool:
    return not await listing(where, INBOX_PREFIX + "submit/")


def test_a_client_that_cannot_see_the_other_run_gets_input_mismatch_at_result(
    tmp_path: Path,
) -> None:
    where = location("local", tmp_path)  # the view is frozen by the test: no backend race
    with cluster(where, tmp_path) as procs:
        worker = procs.worker()
        procs.wait_for(lambda e: e["ev"] == "owner", 30, worker)
        late = procs.client("stale", "r0", 2)
        procs.go([late])
        procs.wait_for(lambda e: e["ev"] == "frozen", 30, late)
        first = procs.client("same", "r", 1, 1)
        procs.go([first])
        procs.finish(first)  # r0 ran with input 1
        deadline = time.monotonic() + 30
        while not asyncio.run(_inbox_empty(where)):  # its request left the inbox
            assert time.monotonic() < deadline
            time.sleep(0.05)
        late.say("start")
        started = procs.wait_for(lambda e: e["ev"] == "start" and e["pid"] == late.pid, 30, late)
        late.say("thaw")
        procs.finish(late)
        worker.signal(signal.SIGTERM)
        procs.finish(worker, 60)
    assert started.get("ok"), started  # the clash was not visible at start()
    result = procs.find(lambda e: e["ev"] == "result" and e["pid"] == late.pid)
    assert result is not None
    assert result.get("error") == "InputMismatch", result
