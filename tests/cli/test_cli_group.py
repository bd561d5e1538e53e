"""``durable group URL GROUP_ID``: a run group's progress, against a live owner."""

from __future__ import annotations

import asyncio
from pathlib import Path

import cli_flows as flows
from test_cli_commands import assert_error, invoke, run_json

from durable import Engine


async def test_group_shows_counts_a_bar_and_follows_to_the_end(tmp_path: Path) -> None:
    url = str(tmp_path / "store")
    flows.GATES.clear()
    gate = flows.GATES["held"] = asyncio.Event()
    async with Engine(url):
        mapped = await flows.gated.submit_map(["a", "fail-b", "held"])
        group_id = mapped.group_id
        completed = mapped.as_completed(return_exceptions=True)
        first = dict([await anext(completed), await anext(completed)])  # index -> result
        assert first[0] == "A"
        assert isinstance(first[1], ValueError)

        doc = await asyncio.to_thread(run_json, "group", url, group_id)
        assert (doc["total"], doc["succeeded"], doc["failed"], doc["done"]) == (3, 1, 1, 2)
        assert doc["running"] + doc["pending"] == 1
        code, out, err = await asyncio.to_thread(invoke, "group", url, group_id)
        assert code == 0, err
        assert "2/3" in out
        assert "succeeded=1" in out
        assert "failed=1" in out

        # --follow ends by itself once the last member ends.
        follow = asyncio.create_task(
            asyncio.to_thread(invoke, "group", url, group_id, "--follow", "--interval", "0.1")
        )
        gate.set()
        assert await anext(completed) == (2, "HELD")
        code, out, err = await asyncio.wait_for(follow, 60)
        assert code == 0, err
        assert "3/3" in out
        assert "done" in out

    await asyncio.to_thread(assert_error, ("group", url, "no-such-group"), 3, "no-such-group")
    missing = str(tmp_path / "missing")
    await asyncio.to_thread(assert_error, ("group", missing, group_id), 3, "missing")
