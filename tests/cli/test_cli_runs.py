"""``runs``, ``watch``, ``stats`` by state, ``check``, and the run controls
(``resume``, ``forget``, bulk forms, requests that wait for the owner),
in-process (typer's CliRunner) against stores the tests build."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import cli_flows as flows
import pytest
from cli_helpers import Built
from test_cli_commands import assert_error, invoke, run_json
from typer.testing import CliRunner

from durable import Engine, WorkflowState
from durable.cli import app
from durable.store.queue import JobStatus


def test_runs_json_filters_and_pages(built: Built) -> None:
    doc = run_json("runs", built.url)
    assert set(doc) == {"runs", "cursor"}
    states = {r["run_id"]: r["state"] for r in doc["runs"]}
    assert {k: states[k] for k in ("r-ok", "r-fails", "r-waits")} == {
        "r-ok": "succeeded",
        "r-fails": "failed",
        "r-waits": "waiting",
    }
    assert all(
        r["state"] in {"pending", "running", "waiting", "succeeded", "failed", "cancelled"}
        for r in doc["runs"]
    )
    assert doc["cursor"] is None
    failed = run_json("runs", built.url, "--state", "failed")["runs"]
    assert [(r["run_id"], r["error_type"]) for r in failed] == [("r-fails", "ValueError")]
    two = run_json("runs", built.url, "--workflow", "cli.ok", "--workflow", "cli.waits")["runs"]
    assert {r["run_id"] for r in two} == {"r-ok", "r-waits"}
    assert run_json("runs", built.url, "--started-before", "1h")["runs"] == []
    assert len(run_json("runs", built.url, "--started-after", "1h")["runs"]) == len(doc["runs"])
    first = run_json("runs", built.url, "--limit", "1")
    assert len(first["runs"]) == 1
    assert first["cursor"] is not None
    second = run_json("runs", built.url, "--limit", "1", "--cursor", first["cursor"])
    assert second["runs"][0]["run_id"] == doc["runs"][1]["run_id"]
    every = run_json("runs", built.url, "--limit", "1", "--all")
    assert [r["run_id"] for r in every["runs"]] == [r["run_id"] for r in doc["runs"]]
    result = CliRunner(env={"COLUMNS": "200"}).invoke(app, ["runs", built.url, "-s", "failed"])
    code, out, err = result.exit_code, result.stdout, result.stderr
    assert code == 0, err
    assert "r-fails" in out
    assert "r-ok" not in out


def test_runs_bad_filters_are_named(built: Built) -> None:
    assert_error(("runs", built.url, "--state", "bogus"), 2, "bogus")
    assert_error(("runs", built.url, "--started-after", "yesterday"), 2, "yesterday")
    assert_error(("runs", built.url, "--attribute", "novalue"), 2, "novalue")
    assert_error(("runs", "nope://x/y"), 2, "nope")


def test_watch_refreshes_then_ends_and_stats_counts_by_state(built: Built) -> None:
    result = CliRunner(env={"COLUMNS": "200"}).invoke(
        app, ["watch", built.url, "--iterations", "2", "--interval", "0.05"]
    )
    code, out, err = result.exit_code, result.stdout, result.stderr
    assert code == 0, err
    assert "r-waits" in out
    by_state = run_json("stats", built.url)["runs"]["by_state"]
    assert by_state == {
        "pending": 0,
        "running": 0,
        "waiting": 1,
        "succeeded": 2,  # r-ok and its child
        "failed": 1,
        "cancelled": 0,
    }


async def test_check_a_clean_store_then_a_corrupt_object(tmp_path: Path) -> None:
    url = str(tmp_path / "store")
    async with Engine(url) as engine:
        assert await flows.ok.options(run_id="r-1").start(1) is not None
        await engine.handle("r-1").result()
    code, out, err = await asyncio.to_thread(invoke, "check", url)
    assert code == 0, err
    assert "clean" in out
    doc = json.loads((await asyncio.to_thread(invoke, "check", url, "--json"))[1])
    assert doc["clean"] is True
    victim = sorted((tmp_path / "store" / "ckpt").iterdir())[-1]
    victim.write_bytes(victim.read_bytes()[:-3] + b"zzz")
    key = victim.relative_to(tmp_path / "store").as_posix()
    code, out, err = await asyncio.to_thread(invoke, "check", url)
    assert code == 1, (out, err)
    assert key in out
    code, out, _ = await asyncio.to_thread(invoke, "check", url, "--json")
    assert code == 1
    assert key in [p["key"] for p in json.loads(out)["problems"]]
    await asyncio.to_thread(assert_error, ("check", str(tmp_path / "missing")), 3, "missing")


async def test_requeue_without_a_live_owner_stays_queued(built: Built) -> None:
    code, out, err = await asyncio.to_thread(
        invoke, "requeue", built.url, built.dead_job, "--wait", "0.2"
    )
    assert code == 0, err
    assert "queued" in out
    assert "next owner" in out


async def test_resume_forget_and_bulk_reach_a_live_owner(tmp_path: Path) -> None:
    url = str(tmp_path / "store")
    async with Engine(url) as engine:
        failed = []
        for n in range(3):
            handle = await flows.fails.options(run_id=f"r-f{n}", attributes={"batch": "b1"}).start(
                n
            )
            with pytest.raises(ValueError, match="bad input"):
                await handle.result()
            failed.append(handle)
        waiting = await flows.waits.options(run_id="r-w", attributes={"batch": "b2"}).start("k")
        await waiting.waiting()

        # One run by id: resume runs its failed step again (and fails again).
        code, out, err = await asyncio.to_thread(invoke, "resume", url, "r-f0")
        assert code == 0, err
        with pytest.raises(ValueError, match="bad input 0"):
            await engine.handle("r-f0").result()

        # Bulk without --yes and without a terminal: counted, refused.
        code, out, err = await asyncio.to_thread(invoke, "cancel", url, "--attribute", "batch=b2")
        assert code == 2, err
        assert "1 run(s) match" in out
        assert "--yes" in err
        assert (await waiting.status()).state is WorkflowState.WAITING

        code, out, err = await asyncio.to_thread(invoke, "cancel", url, "-a", "batch=b2", "--yes")
        assert code == 0, err
        assert "cancel requested for 1 run(s)" in out

        # forget one by id: applied by the owner (through its inbox).
        code, out, err = await asyncio.to_thread(invoke, "forget", url, "r-f1")
        assert code == 0, err
        assert "forgotten" in out
        assert await engine.handle("r-f1").status() is None

        # forget of an active run is refused, named.
        w2 = await flows.waits.options(run_id="r-w2").start("k2")
        await w2.waiting()
        await asyncio.to_thread(assert_error, ("forget", url, "r-w2"), 1, "r-w2")
        await asyncio.to_thread(assert_error, ("forget", url, "r-unknown"), 3, "r-unknown")
        await asyncio.to_thread(
            assert_error, ("forget", url, "r-f0", "--state", "failed"), 2, "not both"
        )
        await asyncio.to_thread(assert_error, ("forget", url), 2, "RUN_ID")

        # bulk forget: a dry run changes nothing; --yes forgets the rest of b1.
        code, out, err = await asyncio.to_thread(
            invoke, "forget", url, "-a", "batch=b1", "--dry-run"
        )
        assert (code, "2 run(s) match" in out) == (0, True), (out, err)
        code, out, err = await asyncio.to_thread(invoke, "forget", url, "-a", "batch=b1", "--yes")
        assert code == 0, err
        assert "forgot 2 run(s)" in out
        assert await engine.handle("r-f0").status() is None
        assert await engine.handle("r-f2").status() is None

        # requeue of a job that is no longer dead when the owner applies it.
        queue = engine.queue
        job_id = await queue.enqueue("cli-mail", b"hi")
        claim = await queue.claim("cli-mail")
        assert claim is not None
        await queue.dead_letter(claim, "smtp down")
        code, out, err = await asyncio.to_thread(invoke, "requeue", url, job_id)
        assert code == 0, err
        assert queue.job_record(job_id).status is JobStatus.PENDING
        await asyncio.to_thread(
            assert_error, ("requeue", url, job_id), 2, job_id
        )  # checked in the view first
