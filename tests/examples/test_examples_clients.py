"""``examples.worker_and_clients``: two workers (owner, standby) and a client
process on one local store; the owner is killed, then the new one SIGTERMed."""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

import pytest
from example_helpers import run_example


@pytest.mark.slow
def test_a_client_runs_work_through_the_owner_and_a_standby_takes_over(tmp_path: Path) -> None:
    out = run_example("worker_and_clients", str(tmp_path / "demo"))
    assert re.search(r"worker \d+ owns the store; worker \d+ stands by", out)
    assert "client approved order-2 (signal sent)" in out
    for i in (1, 2, 3):
        assert f"order-{i}: 'order-{i} packed, order-{i} shipped'" in out
    assert "killed the owner (kill -9) during order-9's ship step" in out
    took = re.search(r"the standby took over after ([\d.]+) s", out)
    assert took is not None
    assert float(took.group(1)) < 4.0  # the host lock: well within the demo's ttl of 4 s
    assert "order-9: 'order-9 packed, order-9 shipped'" in out
    assert re.search(r"SIGTERM: the new owner drained and exited 0 in", out)
    # Every step ran once, but the one in flight at the kill.
    executions = Counter((tmp_path / "demo" / "executions.log").read_text().split())
    expected = {f"{s}:order-{i}": 1 for s in ("pack", "ship") for i in (1, 2, 3, 9)}
    assert executions == {**expected, "ship:order-9": 2}
    assert "step executions: 9; ran twice: ship:order-9" in out
