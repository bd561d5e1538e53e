"""kill -9 of a process in the middle of a step that streams (issue 19 point 1).

A child process (`streams_child.py`) starts a run whose body writes
``"begin"`` and whose step writes tokens to the stream ``out``; a client
`Engine` in this process reads the stream live. Once the reader has seen
tokens of the step (the step still runs: it hangs), the child is killed
with SIGKILL; a new process finishes the run, its step writing its tokens
again. The reader, which read across the kill, sees exactly what the
docs promise (docs/streams.md): ``"begin"`` once, the killed attempt's
tokens that reached the store, one `StreamDiscarded` marker naming that
attempt with their offset and count, the new attempt's tokens, ``"end"``.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from streams_child import TOKENS

import durable

CHILD = str(Path(__file__).with_name("streams_child.py"))
LIMIT = 60.0
pytestmark = pytest.mark.slow


async def test_a_killed_step_attempt_is_announced_to_readers(tmp_path: Path) -> None:
    store, run_id = tmp_path / "store", "talk-1"
    seen: list[Any] = []
    enough = asyncio.Event()
    proc = await asyncio.create_subprocess_exec(
        sys.executable, CHILD, str(store), "start", run_id, stdout=subprocess.PIPE
    )
    try:
        assert proc.stdout is not None
        line = await asyncio.wait_for(proc.stdout.readline(), LIMIT)
        assert line.strip() == b"started", "the child exited early"
        async with durable.Engine(store, role="client") as client:
            handle = client.handle(run_id)

            async def read() -> None:
                async for item in handle.read_stream("out"):
                    seen.append(item)
                    if len(seen) >= 6:  # "begin" and five tokens of the hung attempt
                        enough.set()

            reader = asyncio.create_task(read())
            await asyncio.wait_for(enough.wait(), LIMIT)
            os.kill(proc.pid, signal.SIGKILL)
            assert await asyncio.wait_for(proc.wait(), LIMIT) == -signal.SIGKILL
            done = await asyncio.create_subprocess_exec(
                sys.executable,
                CHILD,
                str(store),
                "finish",
                run_id,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
            )
            out, err = await asyncio.wait_for(done.communicate(), 2 * LIMIT)
            assert done.returncode == 0, err.decode()
            assert json.loads(out.decode().strip().splitlines()[-1]) == TOKENS
            await asyncio.wait_for(reader, LIMIT)  # ends: the run has ended
            assert await handle.stream_offset("out") == len(seen)
            again = [item async for item in handle.read_stream("out")]
    finally:
        if proc.returncode is None:
            os.kill(proc.pid, signal.SIGKILL)
            await proc.wait()
    assert again == seen  # a later reader sees the same items
    markers = [i for i, item in enumerate(seen) if isinstance(item, durable.StreamDiscarded)]
    assert len(markers) == 1, seen
    at = markers[0]
    killed = at - 1  # the tokens of the killed attempt that reached the store
    assert killed >= 5
    assert seen[0] == "begin"  # the body's write, replayed by the new process: once
    assert seen[1:at] == [f"tok{i}" for i in range(killed)]
    assert seen[at] == durable.StreamDiscarded(run_id, "out", "streams.speak", 1, 1, killed)
    assert seen[at + 1 :] == [*(f"tok{i}" for i in range(TOKENS)), "end"]
    print(f"the killed attempt had {killed} tokens durable; {len(seen)} items in all")
