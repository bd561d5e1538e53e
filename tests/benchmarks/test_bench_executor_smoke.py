"""``bench_executor --quick`` runs and ends with one JSON object of sane figures."""

from __future__ import annotations

import pytest
from quick import last_json, run_quick

EXPECTED = {
    "cpu_steps",
    "cpu_step_ms",
    "process_cluster_start_s",
    "cpu_inline_s",
    "cpu_dask_s",
    "cpu_dask_speedup",
    "cpu_plain_dask_s",
    "cpu_plain_dask_speedup",
    "noop_inline_ms_per_step",
    "noop_dask_ms_per_step",
    "noop_dask_overhead_ms_per_step",
    "noop_plain_dask_ms_per_task",
    "peak_rss_mb",
}

pytestmark = pytest.mark.slow  # starts a cluster of worker processes


def test_bench_executor_quick_prints_json_figures() -> None:
    done = run_quick("bench_executor", timeout=120)
    # progress and the verdicts on the two targets go to stderr, figures to stdout
    assert "noop x 20 sequential, dask:" in done.stderr
    assert "cpu speedup on 2 worker processes" in done.stderr
    assert "dask overhead per no-op step" in done.stderr
    assert len([line for line in done.stderr.splitlines() if line[:5] in ("PASS ", "FAIL ")]) == 2
    figures = last_json(done)
    assert figures["quick"] is True
    assert figures.keys() >= EXPECTED
    assert all(k == k.lower() and " " not in k for k in figures)
    assert (figures["cpu_steps"], figures["cpu_step_ms"], figures["rounds"]) == (8, 20.0, 1)
    # Each of the 8 steps burned 20 ms of CPU: no run can beat the work it did
    # (inline all of it on one thread, on two worker processes half of it).
    assert figures["cpu_inline_s"] >= 8 * 0.020
    assert figures["cpu_dask_s"] >= 4 * 0.020
    assert figures["cpu_plain_dask_s"] >= 4 * 0.020
    speedup = figures["cpu_inline_s"] / figures["cpu_dask_s"]
    assert figures["cpu_dask_speedup"] == pytest.approx(speedup, rel=0.02)
    inline, dask = figures["noop_inline_ms_per_step"], figures["noop_dask_ms_per_step"]
    assert 0 < inline < dask  # a round trip to the cluster costs something
    assert figures["noop_dask_overhead_ms_per_step"] == pytest.approx(dask - inline, abs=0.002)
    assert figures["noop_plain_dask_ms_per_task"] > 0
