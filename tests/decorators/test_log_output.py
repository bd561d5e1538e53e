"""What a user sees of `durable`'s logs (issue 13, point 13), from real processes.

A new app that configured no logging writes its first pickle (an
exception of a step) without a signing key: the warning comes once per
process, formatted (level, logger, event, what to do), not stdlib's bare
"last resort" line. An app that configures logging gets the event in its
own format and nothing twice; a ``NullHandler`` on ``durable`` silences it.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

APP = """
import asyncio
import logging
import sys

import durable


@durable.step
async def boom(i: int) -> None:
    raise ValueError(f"boom {i}")


@durable.step
async def odd() -> set[int]:
    return {1, 2}  # not plain data: pickled


@durable.workflow
async def flow() -> None:
    for i in range(3):
        try:
            await boom(i)
        except ValueError:
            pass
    await odd()
    raise KeyError("the end")


async def main(store: str) -> None:
    async with durable.Engine(store) as engine:
        for _ in range(2):  # pickles written, and read back by result()
            try:
                await (await flow.start()).result(timeout=60)
            except KeyError:
                pass
    print("done", flush=True)


if sys.argv[2] == "basic":
    logging.basicConfig(format="%(levelname)s:%(name)s:%(message)s")
elif sys.argv[2] == "null":
    logging.getLogger("durable").addHandler(logging.NullHandler())
asyncio.run(main(sys.argv[1]))
"""


def run_apps(tmp_path: Path, *modes: str) -> dict[str, list[str]]:
    """Run the app once per mode, at the same time; each one's stderr lines."""
    app = tmp_path / "app.py"
    app.write_text(APP)
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    procs = {
        mode: subprocess.Popen(
            [sys.executable, str(app), str(tmp_path / f"store-{mode}"), mode],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for mode in modes
    }
    errors = {}
    for mode, proc in procs.items():
        out, err = proc.communicate(timeout=120)
        assert (proc.returncode, out) == (0, "done\n"), err
        errors[mode] = err.splitlines()
    return errors


def test_the_unsigned_pickle_warning_is_formatted_once_with_the_fix(tmp_path: Path) -> None:
    lines = run_apps(tmp_path, "plain", "basic", "null")
    # No logging configured: one line, with level, logger and what to do.
    assert len(lines["plain"]) == 1, lines["plain"]
    (line,) = lines["plain"]
    assert line.startswith(
        "WARNING [durable.decorators.codec] unsigned pickle: action='written' "
        "what=\"the exception of step 'app.boom' (position 0 of run "
    ), line
    assert "Engine(signing_key=...)" in line
    assert "Engine(codec='msgpack')" in line
    assert "once per process" in line
    # The app's own logging: its format, once, and not twice.
    assert len(lines["basic"]) == 1, lines["basic"]
    assert lines["basic"][0].startswith(
        "WARNING:durable.decorators.codec:unsigned pickle: action='written' "
    ), lines["basic"]
    # A NullHandler on "durable" silences the library.
    assert lines["null"] == []
