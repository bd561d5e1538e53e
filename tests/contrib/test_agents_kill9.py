"""kill -9 of a worker in the middle of a durable agent run, for both integrations.

A child process (`agent_child.py`) runs an agent whose offline model makes
four calls (three ask for a tool, the fourth answers) and is killed with
SIGKILL inside model call 3, once calls 1 and 2 and their tools are done.
A new process finishes the run: every model call and tool call finished
before the kill was made once; only model call 3, in flight at the kill,
was made twice.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

CHILD = str(Path(__file__).with_name("agent_child.py"))
pytestmark = pytest.mark.slow


def lines(log: Path) -> list[str]:
    return log.read_text().splitlines()


def start_and_kill(store: Path, log: Path, run_id: str, framework: str) -> None:
    """Start the run in a child; kill -9 it once model call 3 has begun."""
    args = [sys.executable, CHILD, str(store), str(log), "start", run_id, framework]
    proc = subprocess.Popen(args)
    try:
        deadline = time.monotonic() + 60
        while "model-start 3" not in lines(log):
            assert proc.poll() is None, f"the child exited early with {proc.returncode}"
            assert time.monotonic() < deadline, f"no model call 3: {lines(log)}"
            time.sleep(0.005)  # watching another process's file: nothing to await
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)


def finish(store: Path, log: Path, run_id: str, framework: str) -> object:
    done = subprocess.run(
        [sys.executable, CHILD, str(store), str(log), "finish", run_id, framework],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize(
    "framework",
    [
        pytest.param("pydantic_ai", id="pydantic_ai"),
        pytest.param("openai_agents", id="openai_agents"),
    ],
)
def test_a_killed_agent_run_resumes_without_repeating_a_finished_call(
    tmp_path: Path, framework: str
) -> None:
    pytest.importorskip("pydantic_ai" if framework == "pydantic_ai" else "agents")
    store, log = tmp_path / "store", tmp_path / "calls.log"
    log.touch()
    start_and_kill(store, log, "agent-1", framework)
    before = Counter(lines(log))
    assert before == Counter(
        {"model-start 1": 1, "model-done 1": 1, "tool 1": 1}
        | {"model-start 2": 1, "model-done 2": 1, "tool 2": 1, "model-start 3": 1}
    )
    assert finish(store, log, "agent-1", framework) == "done"
    calls = Counter(lines(log))
    # Finished before the kill: made once. In flight at the kill: made again.
    assert calls == Counter(
        {"model-start 1": 1, "model-done 1": 1, "tool 1": 1}
        | {"model-start 2": 1, "model-done 2": 1, "tool 2": 1}
        | {"model-start 3": 2, "model-done 3": 1, "tool 3": 1}
        | {"model-start 4": 1, "model-done 4": 1}
    )
