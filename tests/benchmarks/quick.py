"""Running a benchmark script's ``--quick`` mode in a child process, for the smoke tests."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]


def run_quick(module: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """``python -m benchmarks.<module> --quick`` from the checkout's root; it must exit 0."""
    done = subprocess.run(
        [sys.executable, "-m", f"benchmarks.{module}", "--quick"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert done.returncode == 0, done.stderr
    return done


def last_json(done: subprocess.CompletedProcess[str]) -> Any:
    """The JSON object a benchmark prints as its last line of output."""
    return json.loads(done.stdout.strip().splitlines()[-1])
