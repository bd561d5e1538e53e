"""The CLI as a real process: ``python -m durable`` against stores the tests build."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path

import cli_flows as flows
import pytest
from cli_helpers import HERE, REPO, Built, build, cli

from durable import Engine

pytestmark = pytest.mark.slow  # a process costs 1-4 s here


def test_show_json_and_table_from_a_process(built: Built) -> None:
    done = cli("show", built.url, "r-ok", "--json")
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)  # stdout is one JSON document and nothing else
    assert doc["state"] == "succeeded"
    assert doc["workflow"] == "cli.ok"
    assert [p["name"] for p in doc["positions"]] == ["cli.double", "cli.child"]
    assert doc["positions"][0]["attempts"] == 1
    assert doc["children"][0]["state"] == "succeeded"
    assert list(doc["published"]) == ["progress"]
    assert done.stderr == ""
    table = cli("show", built.url, "r-waits")
    assert table.returncode == 0, table.stderr
    assert "signal 'k-1'" in table.stdout
    assert "waiting" in table.stdout


def test_bad_inputs_from_a_process(built: Built, tmp_path: Path) -> None:
    missing = tmp_path / "nothing-here"
    cases = [
        (("show", "foo://bucket/x", "r-ok"), 2, "foo"),
        (("show", str(missing), "r-ok"), 3, str(missing)),
        (("show", built.url, "r-nope"), 3, "r-nope"),
    ]
    for args, code, named in cases:
        done = cli(*args)
        lines = done.stderr.strip().splitlines()
        assert done.returncode == code, (args, done.stderr)
        assert 1 <= len(lines) <= 2, done.stderr
        assert named in done.stderr
        assert "Traceback" not in done.stderr
        assert done.stdout == ""
    assert not missing.exists()  # the CLI never creates a store


async def test_signal_from_a_process_reaches_the_owner(tmp_path: Path) -> None:
    url = str(tmp_path / "store")
    async with Engine(url):
        handle = await flows.waits.options(run_id="r-sig").start("k-2")
        await handle.waiting()
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), str(HERE)])}
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            *("-m", "durable", "signal", url, "k-2", '{"n": 5}'),
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env=env,
        )
        _out, err = await proc.communicate()
        assert proc.returncode == 0, err
        assert await handle.result() == "got {'n': 5}"


@pytest.mark.emulator
async def test_show_and_missing_bucket_on_s3(tmp_path: Path) -> None:
    from durable.testing import cloud

    if not cloud.available("s3"):
        pytest.skip(f"{cloud.ENV['s3']} is unset: start the emulators with scripts/test")
    location = await cloud.new_location("s3", tmp_path)
    await build(location.url, location.options)
    options = [f"--option={k}={json.dumps(v)}" for k, v in location.options.items()]
    done = await asyncio.to_thread(cli, "show", location.url, "r-ok", "--json", *options)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["state"] == "succeeded"
    empty = location.url.rsplit("/", 1)[0] + "/no-store-here"
    missing = await asyncio.to_thread(cli, "stats", empty, *options)
    assert missing.returncode == 3, missing.stderr
    assert empty in missing.stderr
    assert len(missing.stderr.strip().splitlines()) <= 2


async def test_runs_check_and_forget_from_a_process(tmp_path: Path) -> None:
    url = str(tmp_path / "store")
    async with Engine(url) as engine:
        handle = await flows.ok.options(run_id="r-p", attributes={"c": "1"}).start(2)
        await handle.result()
        done = await asyncio.to_thread(cli, "runs", url, "--json", "-a", "c=1")
        assert done.returncode == 0, done.stderr
        doc = json.loads(done.stdout)  # one JSON document, nothing else
        assert [(r["run_id"], r["state"]) for r in doc["runs"]] == [("r-p", "succeeded")]
        checked = await asyncio.to_thread(cli, "check", url)
        assert checked.returncode == 0, checked.stdout + checked.stderr
        gone = await asyncio.to_thread(cli, "forget", url, "r-p")
        assert gone.returncode == 0, gone.stderr
        assert await engine.handle("r-p").status() is None
