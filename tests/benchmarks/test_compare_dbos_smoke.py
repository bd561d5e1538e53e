"""``compare_dbos --quick`` runs both systems and ends with one JSON object of
positive figures: each system's, and their ratios."""

from __future__ import annotations

import json

import pytest
from quick import run_quick

pytestmark = pytest.mark.slow  # six child processes, two of them killed with -9

FIGURES = (
    "steps_per_s",
    "cpu_ms_per_step",
    "one_step_p50_ms",
    "one_step_p95_ms",
    "one_step_p99_ms",
    "ms_per_sequential_step",
    "restart_s",
    "steps_committed_at_kill",
    "steps_run_again",
    "peak_rss_mib",
    "peak_threads",
)
EXPECTED = {
    f"{p}{f}{s}" for f in FIGURES for p, s in (("durable_", ""), ("dbos_", ""), ("", "_ratio"))
}


def test_compare_dbos_quick_prints_a_table_and_json_figures() -> None:
    pytest.importorskip("dbos")
    done = run_quick("compare_dbos", timeout=300)
    lines = done.stdout.strip().splitlines()
    assert lines[0].startswith("| figure | durable | DBOS | durable / DBOS |")
    figures = json.loads(lines[-1])
    assert figures.keys() >= EXPECTED
    assert all(k == k.lower() and " " not in k for k in figures)
    # Neither system runs a step again whose result it had committed before
    # the kill -9; every other figure is a positive number.
    assert figures.pop("durable_committed_steps_run_again") == 0
    assert figures.pop("dbos_committed_steps_run_again") == 0
    bad = {k: v for k, v in figures.items() if not (isinstance(v, int | float) and v > 0)}
    assert not bad, bad
    for f in FIGURES:  # the ratio is the durable figure over DBOS's
        ratio = figures[f"durable_{f}"] / figures[f"dbos_{f}"]
        assert figures[f"{f}_ratio"] == pytest.approx(ratio, rel=0.01)
    # The step that sent SIGKILL never committed: each system runs it again.
    assert figures["rounds"] == 1  # --quick: one round of the main workloads
    assert figures["durable_steps_run_again"] >= 1
    assert figures["dbos_steps_run_again"] >= 1
    p50, p95, p99 = (figures[f"durable_one_step_p{p}_ms"] for p in (50, 95, 99))
    assert p50 <= p95 <= p99
