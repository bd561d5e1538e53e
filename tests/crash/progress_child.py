"""A process running a long or a poison workflow, for test_progress_kill9.py.

    python progress_child.py STORE LOG long RUN_ID STEPS   run `STEPS` steps
    python progress_child.py STORE LOG poison RUN_ID LIMIT a run that kills its process

Both start the run (or find it, after a kill) and work until it ends, then
print one JSON line: the result, or the error's type and fields. Each step
appends ``start RUN POSITION`` to LOG before its work and ``done RUN
POSITION`` after it (one ``write`` each, O_APPEND); the poison step appends
``boom RUN`` and then SIGKILLs its own process, every time it runs. Names
are pinned: this file runs as ``__main__``.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys

import durable

LOG: list[int] = []  # the log's file descriptor, once opened


def say(line: str) -> None:
    os.write(LOG[0], f"{line}\n".encode())


@durable.step(name="crash.progress.work")
async def work(position: int) -> int:
    run = durable.run_id()
    say(f"start {run} {position}")
    await asyncio.sleep(0.05)  # the "work": kills land in it
    say(f"done {run} {position}")
    return position


@durable.workflow(name="crash.progress.long")
async def long(steps: int) -> int:
    return sum([await work(i) for i in range(steps)])


@durable.step(name="crash.progress.boom")
async def boom() -> None:
    say(f"boom {durable.run_id()}")
    os.kill(os.getpid(), signal.SIGKILL)  # the process dies here, every time


@durable.workflow(name="crash.progress.poisoned")
async def poisoned() -> int:
    ready = await work(0)
    await boom()
    return ready


async def main(store: str, log: str, mode: str, run_id: str, number: str) -> None:
    LOG.append(os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644))
    if mode == "long":
        async with durable.Engine(store):
            handle = await long.options(run_id=run_id).start(int(number))
            print(json.dumps({"result": await handle.result(timeout=120)}))
        return
    async with durable.Engine(store, max_attempts_without_progress=int(number)):
        handle = await poisoned.options(run_id=run_id).start()
        try:
            await handle.result(timeout=120)
        except durable.RunStalled as e:
            fields = {"position": e.position, "attempts": e.attempts, "workflow": e.workflow}
            print(json.dumps({"error": type(e).__name__, **fields}))


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:]))
