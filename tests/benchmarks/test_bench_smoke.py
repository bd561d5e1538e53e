"""Every benchmark runs with --quick and ends with one JSON object of figures."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
@pytest.mark.parametrize("name", ["bench_store", "bench_steps", "bench_segments"])
def test_benchmark_quick_prints_json_figures(name: str) -> None:
    done = subprocess.run(
        [sys.executable, "-m", f"benchmarks.{name}", "--quick"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    figures = json.loads(done.stdout.strip().splitlines()[-1])
    assert figures["quick"] is True
    numbers = {k: v for k, v in figures.items() if k != "quick"}
    assert numbers
    assert all(isinstance(v, int | float) and v >= 0 for v in numbers.values())
    assert all(k == k.lower() and " " not in k for k in figures)
