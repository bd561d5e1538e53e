"""`durable.testing.replay` against live stores and exported files, and `durable export`."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest
import replay_flows as flows
from typer.testing import CliRunner

from durable import Engine
from durable.cli import app
from durable.errors import InvalidArgument, NonDeterminismError
from durable.testing import RunHistory, fetch_history, replay, run_until_settled


@pytest.fixture(autouse=True)
def recorded_code() -> Iterator[None]:
    """Each test records on version 1 of the flows, then changes it."""
    flows.VERSION = 1
    yield
    flows.VERSION = 1


async def finished_billing(engine: Engine) -> str:
    handle = await flows.billing.start(4)
    await run_until_settled(handle)
    assert await handle.result() == "charged 400"
    return handle.run_id


async def test_unchanged_code_replays_ok_from_a_live_store(durable_engine: Engine) -> None:
    run_id = await finished_billing(durable_engine)
    result = await replay(flows.billing, run_id, store=durable_engine)
    assert result.ok, result
    assert result.replayed == 3  # charge, sleep, notify
    result.check()  # no divergence: no error


async def test_an_inserted_step_is_reported_at_its_position(durable_engine: Engine) -> None:
    run_id = await finished_billing(durable_engine)
    flows.VERSION = 2
    result = await replay(flows.billing, run_id, store=durable_engine)
    assert not result.ok
    d = result.divergence
    assert d is not None
    assert (d.position, d.expected, d.got) == (2, "flows.notify", "calls flows.audit")
    assert "position 2" in str(result)
    with pytest.raises(NonDeterminismError, match=r"flows\.notify"):
        result.check()


async def test_a_removed_step_is_reported(durable_engine: Engine) -> None:
    run_id = await finished_billing(durable_engine)
    flows.VERSION = 3
    result = await replay(flows.billing, run_id, store=durable_engine)
    d = result.divergence
    assert d is not None
    assert (d.position, d.expected, d.got) == (2, "flows.notify", "returns")


async def test_a_run_in_flight_replays_up_to_where_it_waits(durable_engine: Engine) -> None:
    handle = await flows.billing.start(5)
    await handle.waiting()  # parked on its 30-day sleep
    assert (await replay(flows.billing, handle.run_id, store=durable_engine)).ok
    flows.VERSION = 2  # the inserted step comes after the journal's end: fine for this run
    assert (await replay(flows.billing, handle.run_id, store=durable_engine)).ok


async def test_another_workflow_is_refused(durable_engine: Engine) -> None:
    run_id = await finished_billing(durable_engine)
    with pytest.raises(InvalidArgument, match=r"flows\.billing"):
        await replay(flows.monthly, run_id, store=durable_engine)


async def test_replay_from_an_exported_file(durable_local_engine: Engine, tmp_path: Path) -> None:
    run_id = await finished_billing(durable_local_engine)
    url = str(tmp_path / "durable-store")
    out = tmp_path / "billing.durable-run"
    # The CLI runs its own event loop: in a thread, beside the engine that owns the store.
    result = await asyncio.to_thread(
        CliRunner().invoke, app, ["export", url, run_id, "-o", str(out)]
    )
    assert result.exit_code == 0, result.stderr
    assert f"exported run {run_id} (flows.billing, succeeded, 3 journal position(s))" in (
        result.stdout
    )
    history = RunHistory.load(out)
    assert (history.run_id, history.workflow, history.state) == (
        run_id,
        "flows.billing",
        "succeeded",
    )
    assert history == await fetch_history(durable_local_engine, run_id)
    assert (await replay(flows.billing, out)).ok
    flows.VERSION = 2
    d = (await replay(flows.billing, str(out))).divergence
    assert d is not None
    assert (d.position, d.expected) == (2, "flows.notify")


async def test_a_step_past_the_end_of_a_finished_run_is_reported(
    durable_engine: Engine, tmp_path: Path
) -> None:
    handle = await flows.billing.start(6)
    await run_until_settled(handle)
    await handle.result()
    history = await fetch_history(durable_engine, handle.run_id)
    # The run as an older code recorded it: without its last step.
    older = RunHistory(
        history.run_id, history.workflow, "succeeded", history.invocation, history.journal[:2]
    )
    older.dump(tmp_path / "older.durable-run")
    d = (await replay(flows.billing, tmp_path / "older.durable-run")).divergence
    assert d is not None
    assert (d.position, d.expected, d.got) == (
        2,
        "the end of the run (succeeded)",
        "calls flows.notify",
    )


async def test_export_of_an_unknown_run_exits_not_found(
    durable_local_engine: Engine, tmp_path: Path
) -> None:
    url = str(tmp_path / "durable-store")
    out = tmp_path / "nothing.durable-run"
    result = await asyncio.to_thread(
        CliRunner().invoke, app, ["export", url, "no-such-run", "-o", str(out)]
    )
    assert result.exit_code == 3, result.stdout + result.stderr
    assert "no-such-run" in result.stderr
    assert not out.exists()


def test_a_file_that_is_not_a_history_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "junk.durable-run"
    path.write_bytes(b"\x81\xa1x\x01")
    with pytest.raises(Exception, match="durable export"):
        RunHistory.load(path)
