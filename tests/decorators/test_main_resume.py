"""A run started by a script is resumed by a process that imports it (issue 13,
point 12), with real processes.

The test writes a script ``app.py`` (or ``pkg/app.py``) whose workflow runs
three steps; the first process starts a run, and is killed with SIGKILL
while step 1 runs (step 0 is journaled). A second process, started another
way (``import app``, ``python -m app``, ``python app.py``), opens the same
store and finishes the run: the names agree, so it knows the workflow and
replays step 0 from the journal instead of running it again.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]

APP = """
import asyncio
import os
import sys

import durable


def say(line: str) -> None:
    with open(os.environ["APP_LOG"], "a") as f:
        f.write(line + "\\n")


@durable.step
async def work(i: int) -> int:
    say(f"start {i}")
    if i == 1 and os.environ.get("APP_HANG"):
        print("ready", flush=True)  # step 0 is journaled: kill me here
        await asyncio.Event().wait()
    say(f"done {i}")
    return i


@durable.workflow
async def pipeline(n: int) -> list[int]:
    return [await work(i) for i in range(n)]


async def main(store: str, mode: str) -> None:
    async with durable.Engine(store) as engine:
        if mode == "start":
            await pipeline.options(run_id="run-1").start(3)
            await asyncio.Event().wait()
        print(pipeline.name, work.name)
        print(await engine.handle("run-1").result(timeout=60))


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:]))
"""


def command(how: str, module: str, store: Path, mode: str) -> list[str]:
    """The command line that runs ``main(store, mode)`` of ``module`` ``how``."""
    if how == "script":
        return [sys.executable, module.replace(".", "/") + ".py", str(store), mode]
    if how == "-m":
        return [sys.executable, "-m", module, str(store), mode]
    code = f"import asyncio, sys, {module}; asyncio.run({module}.main(*sys.argv[1:]))"
    return [sys.executable, "-c", code, str(store), mode]


def environment(log: Path, *, hang: bool) -> dict[str, str]:
    env = dict(os.environ, APP_LOG=str(log), PYTHONPATH=str(ROOT))
    env.pop("APP_HANG", None)
    if hang:
        env["APP_HANG"] = "1"
    return env


def start_and_kill(cwd: Path, argv: list[str], log: Path) -> None:
    """Run ``argv`` until its step 1 runs, then SIGKILL it."""
    proc = subprocess.Popen(
        argv, cwd=cwd, env=environment(log, hang=True), stdout=subprocess.PIPE, text=True
    )
    watchdog = threading.Timer(60, proc.kill)  # only if the process hangs
    watchdog.start()
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "ready", "the first process did not start"
    finally:
        watchdog.cancel()
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
        proc.stdout.close()  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("module", "start", "finish"),
    [
        ("app", "script", "import"),  # python app.py, then a process that imports app
        ("app", "-m", "import"),
        ("app", "import", "script"),
        ("pkg.app", "script", "-m"),  # python pkg/app.py, then python -m pkg.app
        ("pkg.app", "script", "import"),
    ],
)
def test_a_run_started_by_a_script_resumes_where_it_is_imported(
    tmp_path: Path, module: str, start: str, finish: str
) -> None:
    path = tmp_path / (module.replace(".", "/") + ".py")
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.parent != tmp_path:
        (path.parent / "__init__.py").touch()
    path.write_text(APP)
    store, log = tmp_path / "store", tmp_path / "steps.log"

    start_and_kill(tmp_path, command(start, module, store, "start"), log)
    assert log.read_text().split("\n") == ["start 0", "done 0", "start 1", ""]

    done = subprocess.run(
        command(finish, module, store, "finish"),
        cwd=tmp_path,
        env=environment(log, hang=False),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    names, result = done.stdout.strip().splitlines()[-2:]
    assert names == f"{module}.pipeline {module}.work"
    assert result == "[0, 1, 2]"
    # Step 0 was journaled: replayed, not run again; step 1 (in flight) ran again.
    assert log.read_text().splitlines() == [
        "start 0",
        "done 0",
        "start 1",
        "start 1",
        "done 1",
        "start 2",
        "done 2",
    ]
