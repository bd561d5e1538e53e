"""``bench_streams --quick`` streams from steps in a worker process to a
client process and ends with one JSON object of figures that meet the
issue's targets (in order, p50 <= 50 ms, <= 0.1 log writes per value)."""

from __future__ import annotations

import pytest
from quick import last_json, run_quick


@pytest.mark.slow
def test_bench_streams_quick_prints_json_figures() -> None:
    done = run_quick("bench_streams", timeout=300)
    assert "read by a client process" in done.stderr  # progress on stderr, figures on stdout
    f = last_json(done)
    assert f["quick"] is True
    assert f["in_order"] is True
    assert f["values"] == f["runs"] * f["rate_per_run"] * f["seconds"] == 2000
    assert f["values_per_s"] > 0
    assert 0 < f["write_to_read_p50_ms"] <= f["write_to_read_p99_ms"]
    assert f["write_to_read_p50_ms"] <= 50
    # Batched into group commits: far from one log object per value.
    assert 0 < f["log_writes_per_value"] <= 0.1
