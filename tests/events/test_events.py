"""Engine events through the public switch (`durable.events.enable`), issue 17 point 5.

Real engines on a local store; the events are read back from the stream
`enable` writes to, as JSON lines or console lines.
"""

from __future__ import annotations

import asyncio
import io
import json
import logging
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import durable
from durable import events

ROOT = Path(__file__).resolve().parents[2]

attempts: dict[str, int] = {}


class Lines(io.StringIO):
    """A stream that wakes waiters on the events written to it."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[str] = []
        self.changed = asyncio.Event()

    def write(self, s: str) -> int:
        self.seen.append(s)
        self.changed.set()
        return super().write(s)

    def records(self) -> list[dict[str, Any]]:
        return [json.loads(line) for line in self.getvalue().splitlines() if line]

    async def until(self, event: str, **fields: Any) -> dict[str, Any]:
        while True:
            for r in self.records():
                if r["event"] == event and all(r.get(k) == v for k, v in fields.items()):
                    return r
            self.changed.clear()
            await asyncio.wait_for(self.changed.wait(), 30)


@pytest.fixture
def stream() -> Iterator[Lines]:
    out = Lines()
    events.enable("json", stream=out)
    try:
        yield out
    finally:
        events.disable()


@durable.step(name="ev.flaky", max_attempts=2, backoff=durable.Backoff(initial=0.001))
async def flaky(key: str) -> int:
    attempts[key] = attempts.get(key, 0) + 1
    if attempts[key] == 1:
        raise ConnectionError("first attempt fails")
    return attempts[key]


@durable.workflow(name="ev.order", queue="orders")
async def order(key: str) -> str:
    n = await flaky(key)
    approved = await durable.wait_for_signal(f"approve:{key}")
    return f"{n} {approved}"


@durable.workflow(name="ev.stuck")
async def stuck(key: str) -> None:
    await durable.wait_for_signal(f"never:{key}")


async def test_a_runs_events_as_json_lines(tmp_path: Path, stream: Lines) -> None:
    async with durable.Engine(str(tmp_path / "store")) as engine:
        handle = await order.options(run_id="ev-1").start("k1")
        await stream.until("suspend", run_id="ev-1")
        await engine.signal("approve:k1", "yes")
        assert await handle.result(timeout=30) == "2 yes"
        cancelled = await stuck.options(run_id="ev-2").start("k2")
        await stream.until("suspend", run_id="ev-2")
        assert await cancelled.cancel()
        await stream.until("terminate", run_id="ev-2")
    records = stream.records()  # every line parses as JSON
    run = [r for r in records if r.get("run_id") == "ev-1"]
    names = [r["event"] for r in run]
    for name in ("submit", "claim", "step_start", "retry", "step_end", "suspend", "resume"):
        assert name in names, (name, names)
    assert names[0] == "submit"
    assert names[-1] == "terminate"
    assert all(r["workflow"] == "ev.order" and r["queue"] == "orders" for r in run), run
    retry = next(r for r in run if r["event"] == "retry")
    assert retry["step"] == "ev.flaky"
    assert retry["position"] == 0
    assert retry["attempt"] == 1
    assert "ConnectionError" in retry["error"]
    end = next(r for r in run if r["event"] == "step_end")
    assert end["step"] == "ev.flaky"
    assert end["ok"] is True
    assert end["duration_ms"] >= 0
    suspend = next(r for r in run if r["event"] == "suspend")
    assert suspend["until"] == "signal"
    assert suspend["key"] == "approve:k1"
    assert suspend["position"] == 1
    signal = next(r for r in records if r["event"] == "signal")
    assert signal["key"] == "approve:k1"
    assert signal["outcome"] in ("delivered", "sent")
    resume = next(r for r in run if r["event"] == "resume")
    assert resume["delivery"] == 1
    assert resume["signal"] is True
    assert run[-1]["status"] == "succeeded"
    assert {"timestamp", "level", "logger"} <= set(run[-1])
    assert run[-1]["logger"] == "durable.events"
    ended = [r for r in records if r.get("run_id") == "ev-2" and r["event"] == "terminate"]
    assert [r["status"] for r in ended] == ["cancelled"]


async def test_info_level_leaves_out_per_step_events(tmp_path: Path) -> None:
    out = Lines()
    events.enable("json", level="INFO", stream=out)
    try:
        async with durable.Engine(str(tmp_path / "store")):
            await stuck.options(run_id="ev-3").start("k3")
            await out.until("suspend", run_id="ev-3")
    finally:
        events.disable()
    text = out.getvalue()
    assert "submit" in text
    assert "ev-3" in text
    assert "step_start" not in text
    assert "claim" not in text


def test_enable_rejects_an_unknown_format() -> None:
    with pytest.raises(ValueError, match="'console' or 'json'"):
        events.enable("xml")  # type: ignore[arg-type]


def test_disable_restores_silence() -> None:
    out = io.StringIO()
    events.enable("json", stream=out)
    assert events.enabled("step_start")
    events.disable()
    assert not events.enabled("step_start")
    assert not logging.getLogger("durable.events").handlers


APP = """
import asyncio, sys
import durable

@durable.step
async def one() -> int:
    return 1

@durable.workflow
async def flow() -> int:
    return await one() + await one()

async def main() -> None:
    if sys.argv[2] != "off":
        durable.events.enable(sys.argv[2])
    async with durable.Engine(sys.argv[1]):
        print(await flow(), flush=True)

asyncio.run(main())
"""


def _app(tmp_path: Path, mode: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    store = str(tmp_path / f"store-{mode}")
    return subprocess.run(
        [sys.executable, "-c", APP, store, mode],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=True,
    )


def test_silent_by_default_in_a_fresh_process(tmp_path: Path) -> None:
    proc = _app(tmp_path, "off")
    assert proc.stdout == "2\n"
    assert proc.stderr == ""


def test_json_on_stderr_in_a_fresh_process(tmp_path: Path) -> None:
    proc = _app(tmp_path, "json")
    assert proc.stdout == "2\n"
    lines = [json.loads(line) for line in proc.stderr.splitlines()]
    assert [r["event"] for r in lines if r["event"] == "step_end"] == ["step_end"] * 2
    assert [r["position"] for r in lines if r["event"] == "step_start"] == [0, 1]


def test_console_lines_in_a_fresh_process(tmp_path: Path) -> None:
    proc = _app(tmp_path, "console")
    assert proc.stdout == "2\n"
    assert "step_end" in proc.stderr
    assert "duration_ms=" in proc.stderr
