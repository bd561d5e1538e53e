"""Each command in-process (typer's CliRunner) against stores the tests build."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import cli_flows as flows
import pytest
from cli_helpers import Built
from typer.testing import CliRunner

from durable import Engine, WorkflowState
from durable.cli import app
from durable.errors import RunCancelled
from durable.store.queue import JobStatus


def invoke(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(app, list(args))
    return result.exit_code, result.stdout, result.stderr


def run_json(*args: str) -> dict:
    code, out, err = invoke(*args, "--json")
    assert code == 0, err
    return json.loads(out)


def test_show_a_failed_run_names_attempts_and_error(built: Built) -> None:
    doc = run_json("show", built.url, "r-fails")
    assert doc["state"] == "failed"
    assert doc["error_type"] == "ValueError"
    step = doc["positions"][1]
    assert (step["name"], step["state"], step["attempts"]) == ("cli.flaky", "failed", 2)
    assert step["error"] == "ValueError: bad input 4"
    assert step["duration_ms"] is not None
    assert step["duration_ms"] >= 0
    assert doc["positions"][0]["result_bytes"] > 0


def test_show_a_waiting_run_names_its_signal_key(built: Built) -> None:
    doc = run_json("show", built.url, "r-waits")
    assert doc["state"] == "waiting"
    assert doc["waiting"]["signal_key"] == "k-1"
    assert doc["waiting"]["until_ms"] is None  # no timeout
    assert doc["positions"][-1]["kind"] == "signal"
    code, out, _ = invoke("show", built.url, "r-waits")
    assert code == 0
    assert "signal 'k-1', no timeout" in out


def test_stats_dead_and_kv(built: Built) -> None:
    stats = run_json("stats", built.url)
    runs = stats["runs"]
    assert (runs["active"], runs["terminated"]) == (1, 3)  # r-ok's child terminated too
    assert runs["by_state"]["waiting"] == 1
    assert stats["dead_letters"] == 1
    assert {q["queue"] for q in stats["queues"]} >= {"cli-mail"}
    dead = run_json("dead", built.url, "--queue", "cli-mail")["dead"]
    assert [(d["job_id"], d["last_error"]) for d in dead] == [(built.dead_job, "smtp down")]
    assert run_json("kv", "get", built.url, "app/a")["text"] == "alpha"
    entries = run_json("kv", "scan", built.url, "app/")["entries"]
    assert [(e["key"], e["text"]) for e in entries] == [("app/a", "alpha"), ("app/b", None)]
    code, out, _ = invoke("kv", "get", built.url, "app/a")
    assert (code, out) == (0, "alpha\n")


def assert_error(args: tuple[str, ...], code: int, named: str) -> None:
    exit_code, out, err = invoke(*args)
    lines = err.strip().splitlines()
    assert exit_code == code, (args, err)
    assert 1 <= len(lines) <= 2, err
    assert named in err, err
    assert "Traceback" not in err
    assert out == ""


def test_bad_input_is_two_lines_naming_it(built: Built, tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    assert_error(("show", "nope://x/y", "r-ok"), 2, "nope")
    assert_error(("stats", str(empty)), 3, str(empty))
    assert_error(("stats", str(tmp_path / "missing")), 3, "missing")
    assert_error(("show", built.url, "r-unknown"), 3, "r-unknown")
    assert_error(("requeue", built.url, "j-unknown"), 3, "j-unknown")
    assert_error(("kv", "get", built.url, "app/zzz"), 3, "app/zzz")
    assert_error(("stats", built.url, "--option", "novalue"), 2, "novalue")
    assert_error(("fork", built.url, "r-ok", "--from-step", "9"), 2, "r-ok")
    assert list(empty.iterdir()) == []  # nothing was created
    assert not (tmp_path / "missing").exists()


async def test_a_corrupt_checkpoint_is_named_by_its_key(tmp_path: Path) -> None:
    url = str(tmp_path / "store")
    async with Engine(url) as engine:
        await engine.queue.kv.put(b"x", b"1")
    victim = sorted((tmp_path / "store" / "ckpt").iterdir())[-1]  # what a reader opens
    victim.write_bytes(victim.read_bytes()[:-3] + b"zzz")
    key = victim.relative_to(tmp_path / "store").as_posix()
    exit_code, _, err = await asyncio.to_thread(invoke, "stats", url)
    assert exit_code == 4, err
    assert len(err.strip().splitlines()) <= 2
    assert key in err
    assert "Traceback" not in err
    exit_code, _, err = await asyncio.to_thread(invoke, "stats", url, "--verbose")
    assert exit_code == 4
    assert "Traceback" in err


async def test_cancel_fork_requeue_reach_a_live_owner(tmp_path: Path) -> None:
    url = str(tmp_path / "store")
    async with Engine(url) as engine:
        waiting = await flows.waits.options(run_id="r-w").start("k-9")
        await waiting.waiting()
        done = await flows.ok.options(run_id="r-done").start(1)
        assert await done.result() == 6
        queue = engine.queue
        job_id = await queue.enqueue("cli-mail", b"hi")
        claim = await queue.claim("cli-mail")
        assert claim is not None
        await queue.dead_letter(claim, "smtp down")

        code, out, err = await asyncio.to_thread(invoke, "cancel", url, "r-w")
        assert code == 0, err
        with pytest.raises(RunCancelled):
            await waiting.result()
        code, out, err = await asyncio.to_thread(invoke, "cancel", url, "r-done")
        assert code == 0
        assert "terminated already" in out

        code, out, err = await asyncio.to_thread(invoke, "requeue", url, job_id)
        assert code == 0, err
        assert f"job {job_id!r} requeued" in out  # it waited for the owner's done record
        assert queue.job_record(job_id).status is JobStatus.PENDING

        code, out, err = await asyncio.to_thread(
            invoke, "fork", url, "r-done", "--from-step", "1", "--new-run-id", "r-fork", "--json"
        )
        assert code == 0, err
        assert json.loads(out)["run_id"] == "r-fork"
        assert await engine.handle("r-fork").result() == 6
        status = await engine.handle("r-fork").status()
        assert status is not None
        assert status.state is WorkflowState.SUCCEEDED
