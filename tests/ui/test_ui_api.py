"""The run view's JSON API and files, in-process (aiohttp's test client)
on a client engine over a store the test built."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import ui_flows as flows
from aiohttp.test_utils import TestClient, TestServer
from typer.testing import CliRunner
from ui_flows import XSS, Built

from durable import Engine
from durable.cli import app as cli_app
from durable.engine.records import MemberRecord
from durable.engine.runs import RunTermination, TerminalStatus
from durable.ui import create_app
from durable.ui.data import group_progress


@pytest.fixture
async def client(built: Built) -> AsyncIterator[TestClient[Any, Any]]:
    """The view's app on a client engine of the built store."""
    async with (
        Engine(built.url, role="client") as engine,
        TestClient(TestServer(create_app(engine, built.url))) as client,
    ):
        yield client


async def get(client: TestClient[Any, Any], path: str, status: int = 200) -> Any:
    response = await client.get(path)
    assert response.status == status, await response.text()
    return await response.json()


async def ids(client: TestClient[Any, Any], query: str) -> list[str]:
    return [r["run_id"] for r in (await get(client, "/api/runs?" + query))["runs"]]


async def test_the_run_list_is_what_engine_runs_lists(built: Built, client: TestClient) -> None:
    async with Engine(built.url, role="client") as engine:
        expected = [r.as_dict() for r in (await engine.runs(limit=1000)).runs]
    page = await get(client, "/api/runs?limit=1000")
    assert page == {"runs": expected, "cursor": None}
    assert {r["run_id"] for r in page["runs"]} == {
        "r-ok",
        "r-ok-c1",
        "r-fails",
        "r-waits",
        "r-xss",
    }


async def test_filters_narrow_the_list(client: TestClient) -> None:
    assert await ids(client, "state=failed") == ["r-xss", "r-fails"]
    assert await ids(client, "workflow=ui.ok") == ["r-ok"]
    assert await ids(client, "attr=customer%3Dc-17") == ["r-ok"]
    assert await ids(client, "attr=order%3Do-9&state=waiting") == ["r-waits"]
    assert await ids(client, "attr=order%3Do-9&state=failed") == []
    assert await ids(client, "started_after=2999-01-01T00:00:00Z") == []
    assert len(await ids(client, "started_after=0&state=&workflow=")) == 5  # empty: no filter


async def test_pages_follow_the_cursor(client: TestClient) -> None:
    everything = await ids(client, "limit=1000")
    seen: list[str] = []
    cursor = ""
    while True:
        page = await get(client, f"/api/runs?limit=2&cursor={cursor}")
        assert len(page["runs"]) <= 2
        seen += [r["run_id"] for r in page["runs"]]
        if page["cursor"] is None:
            break
        cursor = page["cursor"]
    assert seen == everything


async def test_bad_queries_are_400_with_the_reason(client: TestClient) -> None:
    for query, named in [
        ("state=bogus", "bogus"),
        ("limit=lots", "lots"),
        ("limit=0", "limit"),
        ("started_after=yesterday", "yesterday"),
        ("attr=novalue", "novalue"),
        ("cursor=zz", "cursor"),
    ]:
        body = await get(client, "/api/runs?" + query, status=400)
        assert named in body["error"], (query, body)


async def test_a_failed_run_shows_its_step_error_and_attempts(client: TestClient) -> None:
    run = await get(client, "/api/runs/r-fails")
    assert (run["state"], run["error_type"], run["error"]) == ("failed", "ValueError", "disk full")
    step = run["positions"][1]
    assert (step["name"], step["state"], step["attempts"]) == ("ui.boom", "failed", 2)
    assert step["error"] == "ValueError: disk full"
    assert run["positions"][0]["duration_ms"] is not None


async def test_a_waiting_run_shows_its_signal_key(client: TestClient) -> None:
    run = await get(client, "/api/runs/r-waits")
    assert run["state"] == "waiting"
    assert run["waiting"]["signal_key"] == "approval/r-waits"
    assert run["positions"][-1]["signal_key"] == "approval/r-waits"
    assert run["attributes"] == {"order": "o-9"}


async def test_children_published_keys_and_attributes(client: TestClient) -> None:
    run = await get(client, "/api/runs/r-ok")
    assert run["children"] == [{"run_id": "r-ok-c1", "workflow": "ui.child", "state": "succeeded"}]
    assert list(run["published"]) == ["progress"]
    assert run["attributes"] == {"customer": "c-17"}
    assert [p["kind"] for p in run["positions"]] == ["step", "child"]


async def test_user_data_comes_back_as_data(client: TestClient) -> None:
    run = await get(client, "/api/runs/r-xss")
    assert run["error"] == XSS
    assert run["positions"][1]["error"] == f"ValueError: {XSS}"


async def test_unknown_and_bad_run_ids(client: TestClient) -> None:
    body = await get(client, "/api/runs/r-nope", status=404)
    assert "r-nope" in body["error"]
    body = await get(client, "/api/runs/" + "x" * 300, status=400)
    assert "error" in body


async def test_groups_with_their_progress(client: TestClient) -> None:
    groups = (await get(client, "/api/groups"))["groups"]
    assert len(groups) == 1
    group = groups[0]
    assert {k: group[k] for k in ("total", "succeeded", "failed", "pending", "done")} == {
        "total": 3,
        "succeeded": 3,
        "failed": 0,
        "pending": 0,
        "done": 3,
    }


async def test_the_page_and_its_files_allow_only_their_own_scripts(client: TestClient) -> None:
    page = await client.get("/")
    assert page.status == 200
    html = await page.text()
    assert '<script src="/static/app.js"' in html
    assert "http" not in html.replace('content="width=device-width', "")  # nothing fetched
    policy = page.headers["Content-Security-Policy"]
    assert "script-src 'self'" in policy
    assert "default-src 'none'" in policy
    for name, kind in [("app.js", "text/javascript"), ("style.css", "text/css")]:
        response = await client.get(f"/static/{name}")
        assert response.status == 200
        assert response.content_type == kind
    assert (await client.get("/static/secret.py")).status == 404
    assert (await client.get("/api/nothing")).status == 404


async def test_serving_writes_nothing_to_the_store(built: Built, client: TestClient) -> None:
    def listing() -> dict[str, float]:
        root = Path(built.url)
        return {str(p): p.stat().st_mtime for p in root.rglob("*") if p.is_file()}

    before = listing()
    for path in ("/api/runs", "/api/runs/r-ok", "/api/runs/r-waits", "/api/groups", "/"):
        assert (await client.get(path)).status == 200
    assert listing() == before


async def test_it_follows_a_live_owner_without_fencing_it(tmp_path: Path) -> None:
    url = str(tmp_path / "store")
    async with Engine(url):  # the owner
        first = await flows.ok.options(run_id="r-1").start(1)
        await first.result()
        async with (
            Engine(url, role="client") as engine,
            TestClient(TestServer(create_app(engine, url))) as client,
        ):
            assert await ids(client, "") == ["r-1-c1", "r-1"]
            second = await flows.ok.options(run_id="r-2").start(2)  # the owner still writes
            await second.result()
            assert await ids(client, "workflow=ui.ok") == ["r-2", "r-1"]
            assert (await get(client, "/api/runs/r-2"))["state"] == "succeeded"


def test_the_command_never_creates_a_store(tmp_path: Path) -> None:
    missing = tmp_path / "nothing-here"
    result = CliRunner().invoke(cli_app, ["ui", str(missing), "--port", "0"])
    assert result.exit_code == 3, result.output
    assert str(missing) in result.stderr
    assert not os.path.exists(missing)


def test_group_progress_counts_members_by_state() -> None:
    def ended(status: TerminalStatus) -> MemberRecord:
        return MemberRecord("a" * 64, RunTermination(status, 1, 1_000, None))

    records = [
        MemberRecord("b" * 64),  # submitted, not terminated
        MemberRecord("c" * 64),
        ended(TerminalStatus.SUCCEEDED),
        ended(TerminalStatus.FAILED),
        ended(TerminalStatus.CANCELLED),
        ended(TerminalStatus.SUCCEEDED),
    ]
    assert group_progress("g-1", records).as_dict() == {
        "group_id": "g-1",
        "total": 6,
        "pending": 2,
        "succeeded": 2,
        "failed": 1,
        "cancelled": 1,
        "done": 4,
    }
