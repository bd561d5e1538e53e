"""tests/procs.py: a forked child behaves as ``python SCRIPT`` would for the
process tests (argv, ``__main__``, environment, streams, exit codes, signals)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import procs
import pytest

PROBE = str(Path(__file__).with_name("procs_probe.py"))
pytestmark = pytest.mark.slow


def test_a_child_runs_the_script_as_main_with_its_argv_env_cwd_and_streams(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PROCS_PROBE", "set by the test")
    done = procs.run([PROBE, "exit", "0"], capture_output=True, text=True, timeout=60)
    seen = json.loads(done.stdout.splitlines()[0])
    assert seen == {
        "name": "__main__",
        "argv": ["exit", "0"],
        "path0": str(Path(PROBE).parent),
        "env": "set by the test",
        "cwd": os.getcwd(),
        "threads": 1,
        "sigterm_default": True,
        "sigint_python": True,
    }
    assert done.stdout.splitlines()[1:] == ["unflushed at exit"]
    assert done.stderr == "to stderr\n"
    assert done.returncode == 0
    child = procs.spawn([PROBE, "exit", "0"], stdout=procs.PIPE, text=True, cwd=tmp_path)
    assert child.stdout is not None
    assert json.loads(child.stdout.readline())["cwd"] == str(tmp_path)
    assert child.wait(timeout=60) == 0
    child.stdout.close()


def test_exit_codes_read_as_a_fresh_interpreter_s() -> None:
    assert procs.run([PROBE, "exit", "3"], timeout=60).returncode == 3
    failed = procs.run([PROBE, "raise"], capture_output=True, text=True, timeout=60)
    assert failed.returncode == 1
    assert "ValueError: boom" in failed.stderr
    fresh = subprocess.run([sys.executable, PROBE, "raise"], capture_output=True, check=False)
    assert fresh.returncode == failed.returncode


def test_stdin_and_signals_reach_the_child_s_own_pid() -> None:
    child = procs.spawn([PROBE, "echo"], stdin=procs.PIPE, stdout=procs.PIPE, text=True)
    assert child.stdin is not None
    assert child.stdout is not None
    child.stdin.write("hello\n")
    child.stdin.flush()
    assert child.stdout.read().splitlines()[-1] == "got hello"
    assert child.wait(timeout=60) == 0
    child.stdin.close()
    child.stdout.close()
    for sig in (signal.SIGKILL, signal.SIGTERM):
        child = procs.spawn([PROBE, "block"], stdout=procs.PIPE, text=True)
        assert child.stdout is not None
        child.stdout.readline()  # it runs
        with pytest.raises(subprocess.TimeoutExpired):
            child.wait(timeout=0.1)
        assert child.poll() is None
        os.kill(child.pid, signal.SIGSTOP)  # a stopped child is still running
        assert child.poll() is None
        os.kill(child.pid, sig)
        os.kill(child.pid, signal.SIGCONT)
        assert child.wait(timeout=60) == -sig
        child.stdout.close()
