"""Child process of test_fenced.py: an engine that another process fences.

``python fenced_child.py STORE``: opens an `Engine` on STORE (the wall
clock, default options), starts a run that waits for a signal, prints
``waiting`` once it is parked, then waits on ``handle.result(timeout=60)``.
Prints what that raised (``result: Fenced``) and what a later status read
did (raised, or returned once the engine took the store back), then exits 0.
"""

from __future__ import annotations

import asyncio
import sys

import durable


@durable.workflow
async def held(key: str) -> str:
    return str(await durable.wait_for_signal(key))


async def main(store: str) -> None:
    async with durable.Engine(store) as engine:
        handle = await held.start("fenced-child")
        await handle.waiting(timeout=30)
        print("waiting", flush=True)
        for label, call in (
            ("result", lambda: handle.result(timeout=60)),
            ("status", handle.status),
        ):
            try:
                await call()
                print(f"{label}: returned", flush=True)
            except Exception as e:
                print(f"{label}: {type(e).__name__}", flush=True)
        del engine


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1]))
