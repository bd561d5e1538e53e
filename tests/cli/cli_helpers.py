"""Helpers of the CLI tests: the store they read, the CLI as a process."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import cli_flows as flows
import pytest

from durable import Engine

REPO = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent


@dataclass(frozen=True)
class Built:
    """What `built` made: the store and the ids in it."""

    url: str
    dead_job: str


async def build(url: str, storage_options: Mapping[str, Any] | None = None) -> Built:
    """Runs ``r-ok`` (succeeded, with a child and a published key),
    ``r-fails`` (failed after 2 attempts), ``r-waits`` (waiting on signal
    ``k-1``); a dead job on queue ``cli-mail``; KV keys ``app/a`` (text) and
    ``app/b`` (binary)."""
    async with Engine(url, storage_options=storage_options) as engine:
        ok = await flows.ok.options(run_id="r-ok").start(3)
        fails = await flows.fails.options(run_id="r-fails").start(4)
        waits = await flows.waits.options(run_id="r-waits").start("k-1")
        assert await ok.result() == 18
        with pytest.raises(ValueError, match="bad input 4"):
            await fails.result()
        await waits.waiting()
        queue = engine.queue
        job_id = await queue.enqueue("cli-mail", b"hello")
        claim = await queue.claim("cli-mail")
        assert claim is not None
        await queue.dead_letter(claim, "smtp down")
        await queue.kv.put(b"app/a", b"alpha")
        await queue.kv.put(b"app/b", b"\xff\x00")
    return Built(url, job_id)


def cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """``python -m durable ARGS`` as a real process (cwd: this directory, so
    ``--import cli_flows`` finds the workflows)."""
    environ = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), str(HERE)])}
    environ.update(env or {})
    return subprocess.run(
        [sys.executable, "-m", "durable", *args],
        capture_output=True,
        text=True,
        cwd=HERE,
        env=environ,
        timeout=60,
        check=False,
    )
