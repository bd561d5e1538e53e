"""Every example runs as ``python -m examples.NAME`` and does what it says."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def run_example(name: str, *args: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", f"examples.{name}", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.mark.slow
def test_quickstart_survives_kill_9_and_repeats_only_in_flight_stages(tmp_path: Path) -> None:
    out = run_example("quickstart", str(tmp_path / "demo"))
    assert "killed the worker process (kill -9)" in out
    assert "all 12 orders shipped" in out
    executions = (tmp_path / "demo" / "executions.log").read_text().splitlines()
    stages = {tuple(line.split()) for line in executions}
    assert len(stages) == 36  # every stage of every order ran
    m = re.search(r"stage executions: (\d+) for 36 stages \((\d+) re-run", out)
    assert m is not None
    assert int(m.group(1)) == len(executions)
    # Only stages in flight at the kill run twice: at most the worker's concurrency.
    assert int(m.group(2)) <= 4
