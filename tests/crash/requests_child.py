"""A worker process serving requests, for the requests' kill -9 test.

    python requests_child.py STORE LOG hold P    own the store; each step holds until killed
    python requests_child.py STORE LOG serve P   own the store and serve until killed

(P: the store's partition count, 0 for an unpartitioned store.)

The workflow receives ``work`` requests and answers each with the result
of a step. The step appends ``start VALUE`` to LOG before its work and
``done VALUE`` after it (one ``write`` each, O_APPEND); in a ``hold``
worker it never finishes, so the test's kill lands in it. Names are
pinned: this file runs as ``__main__`` here and is imported under its own
name by the test.
"""

from __future__ import annotations

import asyncio
import os
import sys

import durable

LOG: list[int] = []  # the log's file descriptor, once opened
HOLD: list[bool] = []


def say(line: str) -> None:
    os.write(LOG[0], f"{line}\n".encode())


@durable.step(name="reqkill.work")
async def work(value: int) -> int:
    say(f"start {value}")
    if HOLD[0]:
        await asyncio.Event().wait()  # until killed
    say(f"done {value}")
    return value * 2


@durable.workflow(name="reqkill.served")
async def served(count: int) -> list[int]:
    answers = []
    for _ in range(count):
        req = await durable.receive("work")
        assert req is not None
        answer = await work(req.value)
        await req.reply(answer)
        answers.append(answer)
    return answers


async def main(store: str, log: str, mode: str, partitions: str) -> None:
    LOG.append(os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644))
    HOLD.append(mode == "hold")
    async with durable.Engine(store, partitions=int(partitions) or None) as engine:
        await engine.wait_owner()
        say("ready")
        await asyncio.Event().wait()  # until killed


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:]))
