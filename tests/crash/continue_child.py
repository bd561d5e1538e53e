"""A process running a workflow that continues as new, for the kill -9 test.

    python continue_child.py STORE LOG start RUN_ID   start the run, work until killed
    python continue_child.py STORE LOG finish RUN_ID  work until the run ends, print it

The workflow runs `INCARNATIONS` incarnations of two steps each, then ends.
Each step appends ``start RUN INCARNATION POSITION`` to LOG before its work
and ``done RUN INCARNATION POSITION`` after it; the workflow body appends
``cont RUN INCARNATION`` just before it calls ``durable.continue_as_new``
(again on a replay). One ``write`` each, O_APPEND. Names are pinned: this
file runs as ``__main__`` here and is imported under its own name by the test.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys

import durable

INCARNATIONS = 6
LOG: list[int] = []  # the log's file descriptor, once opened


def say(line: str) -> None:
    os.write(LOG[0], f"{line}\n".encode())


@durable.step(name="crash.continue.work")
async def work(incarnation: int, position: int) -> int:
    run = durable.run_id()
    say(f"start {run} {incarnation} {position}")
    await asyncio.sleep(0.03)  # the "work": kills land in it
    say(f"done {run} {incarnation} {position}")
    return 10 * incarnation + position


@durable.workflow(name="crash.continue.loop")
async def loop(incarnation: int = 0, total: int = 0) -> int:
    total += await work(incarnation, 0)
    total += await work(incarnation, 1)
    if incarnation + 1 < INCARNATIONS:
        say(f"cont {durable.run_id()} {incarnation}")
        durable.continue_as_new(incarnation + 1, total=total)
    return total


def expected() -> int:
    """The run's result."""
    return sum(10 * i + p for i in range(INCARNATIONS) for p in (0, 1))


async def main(store: str, log: str, mode: str, run_id: str) -> None:
    LOG.append(os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644))
    async with durable.Engine(store):
        handle = await loop.options(run_id=run_id).start()
        if mode == "start":
            await asyncio.Event().wait()  # until killed
        result = await handle.result(timeout=60)
        status = await handle.status()
        assert status is not None
        print(json.dumps([result, status.incarnation]))


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:]))
