"""``bench_decorators --quick`` runs and ends with one JSON object of sane figures."""

from __future__ import annotations

import pytest
from quick import last_json, run_quick

EXPECTED = {
    "steps_per_s",
    "cpu_ms_per_step",
    "peak_threads",
    "peak_rss_mb",
    "one_step_log_objects_per_run",
    "one_step_p50_ms",
    "one_step_p95_ms",
    "one_step_p99_ms",
    "ms_per_sequential_step",
    "long_run_s",
    "many_runs_s",
    "long_vs_many_ratio",
    "long_run_invocations",
}


@pytest.mark.slow
def test_bench_decorators_quick_prints_json_figures() -> None:
    done = run_quick("bench_decorators", timeout=120)
    assert "throughput" in done.stderr  # progress goes to stderr, figures to stdout
    figures = last_json(done)
    assert figures["quick"] is True
    assert figures.keys() >= EXPECTED
    numbers = {k: v for k, v in figures.items() if k != "quick"}
    assert all(isinstance(v, int | float) and v >= 0 for v in numbers.values())
    assert all(k == k.lower() and " " not in k for k in figures)
    assert figures["steps_per_s"] > 0
    assert figures["peak_threads"] >= 1
    p50, p95, p99 = (figures[f"one_step_p{p}_ms"] for p in (50, 95, 99))
    assert 0 < p50 <= p95 <= p99
    # The start; then the claim, the step's journal entry and the terminal
    # record in one group commit (issue 20, point 2; 4 writes before it).
    assert figures["one_step_log_objects_per_run"] == 2
    # Point 10: in a process that stays up, the long run executes its workflow
    # function once (no replay per step) and costs less than as many runs.
    assert figures["long_run_invocations"] == 1
    ratio = figures["long_run_s"] / figures["many_runs_s"]  # of the rounded figures
    assert figures["long_vs_many_ratio"] == pytest.approx(ratio, rel=0.02)
    assert figures["long_vs_many_ratio"] < 1
