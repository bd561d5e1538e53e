"""Run an example as ``python -m examples.NAME``, as a user would."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def run_example(name: str, *args: str) -> str:
    """Run ``examples.NAME`` in a subprocess from the repo root; its standard output.

    Fails the test (showing the example's stderr) if it exits non-zero.
    """
    done = subprocess.run(
        [sys.executable, "-m", f"examples.{name}", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout
