"""``bench_scale --quick`` runs one and two worker processes on a store of
one and of eight partitions and ends with one JSON object of sane figures."""

from __future__ import annotations

import pytest
from quick import last_json, run_quick

CONFIGS = ("n1_p1", "n1_p8", "n2_p8")
PER_CONFIG = (
    "settle_s",
    "runs",
    "steps_per_run",
    "transitions_per_s",
    "cpu_ms_per_transition",
    "p50_ms",
    "p99_ms",
    "log_writes_per_transition",
    "inbox_writes_per_transition",
    "control_writes_per_transition",
    "ckpt_writes_per_transition",
    "writes_per_transition",
    "idle_requests_per_s_per_process",
    "idle_control_requests_per_s_per_process",
    "idle_inbox_requests_per_s_per_process",
    "idle_log_requests_per_s_per_process",
)


@pytest.mark.slow
def test_bench_scale_quick_prints_json_figures() -> None:
    done = run_quick("bench_scale", timeout=300)
    # Progress and the targets' verdicts on stderr, figures on stdout.
    assert "n=2 p=8:" in done.stderr
    assert "P=8 N=1 at" in done.stderr
    assert "takeover in" in done.stderr
    figures = last_json(done)
    assert figures["quick"] is True
    expected = {f"latency_{c}_{k}" for c in CONFIGS for k in PER_CONFIG}
    expected |= {"latency_n2_p8_takeover_s", "latency_p8_vs_p1_n1", "latency_n2_vs_n1_p8"}
    assert figures.keys() >= expected, expected - figures.keys()
    assert not any(k.startswith("s3_") for k in figures)  # --quick: the local directory only
    numbers = {k: v for k, v in figures.items() if k != "quick"}
    assert all(isinstance(v, int | float) and v >= 0 for v in numbers.values())
    assert all(k == k.lower() and " " not in k for k in figures)
    ttl, hb = figures["ttl_s"], figures["heartbeat_s"]
    for c in CONFIGS:
        f = {k.removeprefix(f"latency_{c}_"): v for k, v in figures.items() if c in k}
        assert f["runs"] > 0
        assert f["transitions_per_s"] > 0
        assert f["cpu_ms_per_transition"] > 0
        assert 0 < f["p50_ms"] <= f["p99_ms"]
        # Every transition is durable (some log object holds it), and a run
        # of 3 steps writes fewer than 6 log objects (start, claim, steps, end).
        assert 0 < f["log_writes_per_transition"] < 2
        assert f["writes_per_transition"] >= f["log_writes_per_transition"]
        # Every worker heartbeats (a PUT per heartbeat) and reads the table.
        assert f["idle_control_requests_per_s_per_process"] >= 0.5 / hb
        assert f["idle_requests_per_s_per_process"] < 200
        # Within the settle limit, and at least a start-up.
        assert 0 < f["settle_s"] < 120
    # Nothing goes through an inbox: one process owns every partition, and
    # each of two mints its keyless runs' ids into partitions it owns.
    assert figures["latency_n1_p8_inbox_writes_per_transition"] == 0
    assert figures["latency_n2_p8_inbox_writes_per_transition"] == 0
    # The survivor of a kill -9 owns all 8 partitions after about a ttl
    # (the dead member is judged after a ttl without change), not before.
    assert ttl * 0.5 < figures["latency_n2_p8_takeover_s"] < ttl + 2 * hb + 10
