"""A process running two-step workflows, for the lazy journal's kill -9 test.

    python writes_child.py STORE TRACE start RUNS   start RUNS runs, work until killed
    python writes_child.py STORE TRACE finish RUNS  start (again), await every run, print results

Each run's first step returns a fresh uuid4; its second step appends
``RUN UUID`` to TRACE (one ``write``, O_APPEND, outside the store) with the
value it was given. A step-1 result the second step acted on must be the one
the journal keeps, whatever kill lands between them. Names are pinned: this
file runs as ``__main__`` here.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import uuid

import durable

TRACE: list[int] = []  # the trace's file descriptor, once opened


@durable.step(name="writes.mint")
async def mint() -> str:
    return uuid.uuid4().hex


@durable.step(name="writes.use")
async def use(value: str) -> str:
    os.write(TRACE[0], f"{durable.run_id()} {value}\n".encode())
    return value


@durable.workflow(name="writes.pair")
async def pair() -> str:
    return await use(await mint())


def run_ids(runs: int) -> list[str]:
    """The ids of the runs, in start order."""
    return [f"pair-{i}" for i in range(runs)]


async def main(store: str, trace: str, mode: str, runs: str) -> None:
    TRACE.append(os.open(trace, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644))
    async with durable.Engine(store):
        # Idempotent: the finishing process starts the runs the kill cut off.
        handles = [await pair.options(run_id=r).start() for r in run_ids(int(runs))]
        if mode == "start":
            await asyncio.Event().wait()  # until killed
        results = await asyncio.gather(*(h.result(timeout=120) for h in handles))
        print(json.dumps(dict(zip(run_ids(int(runs)), results, strict=True))))


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:]))
