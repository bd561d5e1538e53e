"""A process running a decorated workflow, for the decorators' kill -9 test.

    python decorators_child.py STORE LOG start RUN_ID   start the run, work until killed
    python decorators_child.py STORE LOG finish RUN_ID  work until the run ends, print it

The workflow runs `STEPS` steps in order. Each step appends ``start RUN
POSITION`` to LOG before its work and ``done RUN POSITION`` after it (one
``write`` each, O_APPEND), so the log shows every execution, including
those a kill cut short. Names are pinned: this file runs as ``__main__``
here and is imported under its own name by the test.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys

import durable

STEPS = 8
LOG: list[int] = []  # the log's file descriptor, once opened


def say(line: str) -> None:
    os.write(LOG[0], f"{line}\n".encode())


@durable.step(name="crash.work")
async def work(position: int) -> str:
    run = durable.run_id()
    say(f"start {run} {position}")
    await asyncio.sleep(0.03)  # the "work": kills land in it
    say(f"done {run} {position}")
    return f"{position}"


@durable.workflow(name="crash.pipeline")
async def pipeline(steps: int) -> str:
    return "-".join([await work(i) for i in range(steps)])


async def main(store: str, log: str, mode: str, run_id: str) -> None:
    LOG.append(os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644))
    async with durable.Engine(store):
        handle = await pipeline.options(run_id=run_id).start(STEPS)
        if mode == "start":
            say("ready")
            await asyncio.Event().wait()  # until killed
        print(json.dumps(await handle.result(timeout=60)))


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:]))
