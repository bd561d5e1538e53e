"""Changing a workflow's code under a run in flight (issue 18 point 5), with
real processes.

The test writes ``orders.py`` with v1 of a workflow (``reserve``, a signal
wait, ``ship``; the listings are read from docs/versioning.md). A first
process starts run ``old`` on it and is killed with SIGKILL while the run
waits for its signal. The test then rewrites
``orders.py`` as v2: the same workflow name, with a ``fraud_check`` step
added after ``reserve`` behind ``durable.patched("fraud-check")``. A
second process, on v2, starts run ``new``, signals both, and reports:

- run ``old`` (past the patch point under v1: its journal holds the wait
  there) finishes on the old branch: no fraud check, ``reserve`` not run
  again, no marker in its journal;
- run ``new`` takes the new branch, with the marker journaled;
- each run's recorded version is the version of the code that started it,
  in ``handle.status()`` and ``engine.runs(version=...)``.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]

COMMON = """
import asyncio
import json
import os
import sys

import durable


def say(line: str) -> None:
    with open(os.environ["APP_LOG"], "a") as f:
        f.write(line + "\\n")


@durable.step
async def reserve(order: str) -> str:
    say(f"reserve {order}")
    return order


@durable.step
async def fraud_check(order: str) -> str:
    say(f"fraud-check {order}")
    return "ok"


@durable.step
async def ship(order: str) -> str:
    say(f"ship {order}")
    return f"shipped {order}"
"""

DOCS = ROOT / "docs" / "versioning.md"


def listing(version: str) -> str:
    """The code block of docs/versioning.md that starts ``# orders.py, {version}``:
    the test runs the code the page shows."""
    found = re.search(rf"```python\n(# orders\.py, {version}\n.*?)```", DOCS.read_text(), re.DOTALL)
    assert found is not None, f"docs/versioning.md has no listing of orders.py, {version}"
    return "\n" + found.group(1)


V1, V2 = listing("v1"), listing("v2")

MAIN = """
async def journal(engine, run_id):
    from durable.decorators.archive import load_journal

    return [e.kind + " " + e.name for _, e in (await load_journal(engine, run_id)).entries()]


async def main(store: str, mode: str) -> None:
    async with durable.Engine(store) as engine:
        if mode == "start":
            handle = await fulfil.options(run_id="old").start("old")
            await handle.waiting(timeout=60)
            status = await handle.status()
            print(json.dumps({"version": fulfil.version, "recorded": status.version}), flush=True)
            await asyncio.Event().wait()  # killed here, the run waiting for its signal
        new = await fulfil.options(run_id="new").start("new")
        await new.waiting(timeout=60)
        report = {"version": fulfil.version}
        for run_id in ("old", "new"):
            await engine.signal(f"paid:{run_id}", True)
            handle = engine.handle(run_id)
            report[run_id] = {
                "result": await handle.result(timeout=60),
                "version": (await handle.status()).version,
                "journal": await journal(engine, run_id),
            }
        for v in ("v1", "v2"):
            page = await engine.runs(version=sys.argv[3] if v == "v1" else fulfil.version)
            report[v + "_runs"] = [r.run_id for r in page.runs]
        print(json.dumps(report), flush=True)


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:3]))
"""


def environment(log: Path) -> dict[str, str]:
    return dict(os.environ, APP_LOG=str(log), PYTHONPATH=str(ROOT), PYTHONDONTWRITEBYTECODE="1")


def start_and_kill(cwd: Path, store: Path, log: Path) -> dict[str, str]:
    """Run v1 until its run waits for its signal, then SIGKILL it; what it printed."""
    proc = subprocess.Popen(
        [sys.executable, "orders.py", str(store), "start"],
        cwd=cwd,
        env=environment(log),
        stdout=subprocess.PIPE,
        text=True,
    )
    watchdog = threading.Timer(60, proc.kill)  # only if the process hangs
    watchdog.start()
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line, "the v1 process did not start its run"
        started: dict[str, str] = json.loads(line)
    finally:
        watchdog.cancel()
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
        proc.stdout.close()  # type: ignore[union-attr]
    return started


def test_a_run_started_on_v1_finishes_on_v2_code_on_its_old_branch(tmp_path: Path) -> None:
    module = tmp_path / "orders.py"
    store, log = tmp_path / "store", tmp_path / "steps.log"

    module.write_text(COMMON + V1 + MAIN)
    v1 = start_and_kill(tmp_path, store, log)
    assert v1["recorded"] == v1["version"]
    assert log.read_text().splitlines() == ["reserve old"]

    module.write_text(COMMON + V2 + MAIN)  # deploy v2: the same workflow name
    done = subprocess.run(
        [sys.executable, "orders.py", str(store), "finish", v1["version"]],
        cwd=tmp_path,
        env=environment(log),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout.strip().splitlines()[-1])
    v2 = report["version"]
    assert v2 != v1["version"]  # derived from the code: the patch changed it

    old, new = report["old"], report["new"]
    assert old["result"] == "shipped old"
    assert old["version"] == v1["version"]
    assert old["journal"] == [
        "step orders.reserve",
        "signal durable.wait_for_signal",
        "step orders.ship",
    ]
    assert new["result"] == "shipped new"
    assert new["version"] == v2
    assert new["journal"] == [
        "step orders.reserve",
        "patch fraud-check",
        "step orders.fraud_check",
        "signal durable.wait_for_signal",
        "step orders.ship",
    ]
    assert report["v1_runs"] == ["old"]
    assert report["v2_runs"] == ["new"]
    # v1's reserve was journaled: not run again; the old run never met the fraud check.
    assert log.read_text().splitlines() == [
        "reserve old",
        "reserve new",
        "fraud-check new",
        "ship old",
        "ship new",
    ]
