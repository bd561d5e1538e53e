"""``examples.dask_pipeline``: CPU-bound steps on a local cluster of worker processes."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from example_helpers import ROOT

pytestmark = pytest.mark.slow  # starts a Dask cluster of worker processes


def test_dask_pipeline_counts_primes_on_worker_processes(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "examples.dask_pipeline", str(tmp_path / "demo")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    # The scheduler has allowed-failures 0: the executor's warning stays silent.
    assert "allowed-failures" not in done.stderr
    out = done.stdout
    lines = out.splitlines()
    assert lines[0] == "started a Dask cluster of 2 worker processes"
    chunks = re.findall(
        r"\[([\d,]+), ([\d,]+)\): ([\d,]+) primes, counted by worker process (\d+)", out
    )
    # pi(50,000k) for k = 1..4: 5,133, 9,592, 13,848, 17,984
    assert [(lo, hi, n) for lo, hi, n, _ in chunks] == [
        ("0", "50,000", "5,133"),
        ("50,000", "100,000", "4,459"),
        ("100,000", "150,000", "4,256"),
        ("150,000", "200,000", "4,136"),
    ]
    # The bodies ran in the cluster's worker processes, not in the engine's.
    engine = re.search(r"engine process: (\d+)", out)
    assert engine is not None
    workers = {pid for *_, pid in chunks}
    assert engine.group(1) not in workers
    assert "worker processes used: " in out
    assert f"worker processes used: {len(workers)};" in out
    assert 1 <= len(workers) <= 2
    assert "run 'primes': 17,984 primes below 200,000" in out
    assert lines[-1] == "closed the cluster"
