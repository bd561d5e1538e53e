"""A process streaming from a step, for the streams kill -9 test.

    python streams_child.py STORE start RUN_ID    start the run; its step hangs mid-stream
    python streams_child.py STORE finish RUN_ID   work until the run ends, print its result

The workflow writes ``"begin"`` from its body, then runs the step
``streams.speak``, which writes ``tok0``, ``tok1``... to the stream
``out``: in a ``start`` process it writes `HUNG` tokens and then waits for
ever (the test kills it there), in a ``finish`` process `TOKENS` and
returns. The body then writes ``"end"``. Names are pinned: this file runs
as ``__main__`` here and is imported under its own name by the test.
"""

from __future__ import annotations

import asyncio
import json
import sys

import durable

HUNG = 12
TOKENS = 5
MODE: list[str] = []


@durable.step(name="streams.speak")
async def speak() -> int:
    count = HUNG if MODE[0] == "start" else TOKENS
    for i in range(count):
        await durable.write_stream("out", f"tok{i}")
        await asyncio.sleep(0.005)  # a model producing tokens
    if MODE[0] == "start":
        await asyncio.Event().wait()  # until killed
    return count


@durable.workflow(name="streams.talk")
async def talk() -> int:
    await durable.write_stream("out", "begin")
    count = await speak()
    await durable.write_stream("out", "end")
    return count


async def main(store: str, mode: str, run_id: str) -> None:
    MODE.append(mode)
    async with durable.Engine(store):
        handle = await talk.options(run_id=run_id).start()
        if mode == "start":
            print("started", flush=True)
            await asyncio.Event().wait()  # until killed
        print(json.dumps(await handle.result(timeout=60)))


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:]))
