"""The workload of the scale-out process tests, and their side channel.

Imported by every process of a test: the workers (`scaleout_worker`) run
its workflows, the clients (`scaleout_client`) start, signal and cancel
them, and the driver (the test) reads the side channel and checks. Every
workflow and step name is pinned, so all processes agree whatever module
name they import this by.

**The side channel** is one file outside the store, shared by every
process of a test and opened ``O_APPEND``: one JSON line per event, written
with one ``write`` and fsynced before the code that wrote it goes on, so
its order is the order of the events across processes. Every event carries
``pid`` and ``t`` (``time.monotonic()``, one clock for every process of the
machine). A step body writes ``start`` when it begins and ``done`` before
it returns, with the run, the step's label and ``e``, the id of this
execution (``<pid>.<count>``), which the step also returns: a run's result
names the execution of each of its steps whose result was journaled.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import time
from collections.abc import Iterable
from typing import Any

import durable
from durable import WorkflowHandle, step, workflow
from durable.errors import DurableError

#: Steps of the `plain` runs the clients start.
PLAIN_STEPS = 3
#: Seconds a signalled run waits for its signal (long: the tests send it).
SIGNAL_WAIT = 600.0


class SideChannel:
    """Appends events to the side channel; see the module docstring."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        self._ids = itertools.count(1)

    def note(self, ev: str, **fields: Any) -> None:
        """Append one event; durable (fsynced) on return."""
        line = json.dumps(
            {"ev": ev, "pid": os.getpid(), "t": time.monotonic(), **fields},
            separators=(",", ":"),
        )
        os.write(self.fd, line.encode() + b"\n")
        os.fsync(self.fd)

    def execution(self) -> str:
        """A new execution id of this process."""
        return f"{os.getpid()}.{next(self._ids)}"


_channel: SideChannel | None = None


def open_channel(path: str | os.PathLike[str]) -> SideChannel:
    """Open the side channel of this process (every note goes there)."""
    global _channel
    _channel = SideChannel(path)
    return _channel


def note(ev: str, **fields: Any) -> None:
    """Append one event to this process's side channel."""
    assert _channel is not None, "open_channel() first"
    _channel.note(ev, **fields)


def read_events(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """Every complete event of the side channel at ``path``, in order."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        return []
    end = data.rfind(b"\n") + 1
    return [json.loads(line) for line in data[:end].split(b"\n") if line]


class Tail:
    """Reads the events appended to the side channel since the last read."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = path
        self._offset = 0
        #: Every event read so far.
        self.events: list[dict[str, Any]] = []

    def new(self) -> list[dict[str, Any]]:
        """The events appended since the last call."""
        try:
            with open(self.path, "rb") as f:
                f.seek(self._offset)
                data = f.read()
        except FileNotFoundError:
            return []
        end = data.rfind(b"\n") + 1
        self._offset += end
        events = [json.loads(line) for line in data[:end].split(b"\n") if line]
        self.events += events
        return events

    def wait_for(self, match: Any, timeout: float = 30.0, poll: float = 0.005) -> dict[str, Any]:
        """The first new event for which ``match(event)`` is true; `AssertionError`
        after ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        while True:
            for event in self.new():
                if match(event):
                    return event
            if time.monotonic() > deadline:
                raise AssertionError(f"no matching event in {timeout} s")
            time.sleep(poll)


# ------------------------------------------------------------ the workload


@step(name="scaleout.bump")
async def bump(x: int, label: str, pause: float = 0.0) -> dict[str, Any]:
    """``x + 1``, noting its execution in the side channel; takes ``pause`` s."""
    assert _channel is not None
    e = _channel.execution()
    run = durable.run_id()
    note("start", run=run, step=label, e=e)
    if pause:
        await asyncio.sleep(pause)
    note("done", run=run, step=label, e=e)
    return {"x": x + 1, "e": e}


@workflow(name="scaleout.plain")
async def plain(x: int, steps: int = 2, pause: float = 0.0) -> dict[str, Any]:
    """``steps`` steps in a row; the result is ``x + steps`` and the executions."""
    executions = {}
    for i in range(steps):
        out = await bump(x, f"s{i}", pause)
        x, executions[f"s{i}"] = out["x"], out["e"]
    return {"x": x, "e": executions}


@workflow(name="scaleout.signalled")
async def signalled(x: int, pause: float = 0.0) -> dict[str, Any]:
    """A step; a wait for the signal ``sig:<run id>``; a step. The result
    holds ``x + 2``, the signal's value and the executions."""
    a = await bump(x, "before", pause)
    value = await durable.wait_for_signal(signal_key(durable.run_id()), timeout=SIGNAL_WAIT)
    b = await bump(a["x"], "after", pause)
    return {"x": b["x"], "signal": value, "e": {"before": a["e"], "after": b["e"]}}


def signal_key(run_id: str) -> str:
    """The key a `signalled` run waits on."""
    return f"sig:{run_id}"


async def note_results(handles: Iterable[WorkflowHandle[Any]]) -> None:
    """Wait for each run's result and note it (``result``, with ``value``
    or ``error``: the exception's type name)."""

    async def one(handle: WorkflowHandle[Any]) -> None:
        try:
            value = await handle.result()
        except DurableError as e:
            note("result", run=handle.run_id, error=type(e).__name__)
        else:
            note("result", run=handle.run_id, value=value)

    await asyncio.gather(*(one(h) for h in handles))
