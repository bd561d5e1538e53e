"""``bench_streams --quick`` streams from steps in a worker process to a
client process and ends with one JSON object of figures that meet the
issue's targets (in order, p50 <= 50 ms, <= 0.1 log writes per value)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_bench_streams_quick_prints_json_figures() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks.bench_streams", "--quick"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    assert "read by a client process" in done.stderr  # progress on stderr, figures on stdout
    f = json.loads(done.stdout.strip().splitlines()[-1])
    assert f["quick"] is True
    assert f["in_order"] is True
    assert f["values"] == f["runs"] * f["rate_per_run"] * f["seconds"] == 2000
    assert f["values_per_s"] > 0
    assert 0 < f["write_to_read_p50_ms"] <= f["write_to_read_p99_ms"]
    assert f["write_to_read_p50_ms"] <= 50
    # Batched into group commits: far from one log object per value.
    assert 0 < f["log_writes_per_value"] <= 0.1
