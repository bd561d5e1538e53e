"""The CLI shows how many times a run continued as new (``runs``, ``show``),
in-process (typer's CliRunner) against a store the test builds."""

from __future__ import annotations

import asyncio
from pathlib import Path

from test_cli_commands import invoke, run_json
from typer.testing import CliRunner

import durable
from durable import Engine
from durable.cli import app


@durable.workflow(name="cli.continue.loop")
async def loop(n: int = 0) -> int:
    if n < 2:
        durable.continue_as_new(n + 1)
    await durable.wait_for_signal("cli-continue:go", timeout=3600)
    return n


async def _build(url: str) -> None:
    async with Engine(url):
        handle = await loop.options(run_id="r-continued").start()
        waiting = await asyncio.wait_for(handle.waiting(), 20)
        assert waiting is not None


def test_runs_and_show_name_the_incarnation(tmp_path: Path) -> None:
    url = str(tmp_path / "store")
    asyncio.run(_build(url))
    [run] = run_json("runs", url)["runs"]
    assert (run["run_id"], run["state"], run["incarnation"]) == ("r-continued", "waiting", 2)
    doc = run_json("show", url, "r-continued")
    assert (doc["state"], doc["incarnation"], doc["steps"]) == ("waiting", 2, 1)
    code, out, err = invoke("show", url, "r-continued")
    assert code == 0, err
    assert "continued as new" in out
    wide = CliRunner(env={"COLUMNS": "250"}).invoke(app, ["runs", url])
    assert wide.exit_code == 0, wide.stderr
    assert "1 (incarnation 2)" in wide.stdout
