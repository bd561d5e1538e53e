"""Reopen a queue in a new process, report it as JSON, ack the follow-up job.

python queue_inspect.py URL OPTIONS_JSON
"""

from __future__ import annotations

import asyncio
import json
import sys

from durable.store.queue import Queue


async def main(url: str, options: str) -> None:
    q = await Queue.open(url, storage_options=json.loads(options))
    big = await q.get_job("b-big")
    follow = await q.claim("next")
    report = {
        "pending": q.stats("work").pending,
        "done": q.stats("work").done,
        "kv": (q.kv.get(b"result/small") or b"").decode(),
        "big_payload_ok": big is not None and big.payload == b"B" * 300_000,
        "follow_up": None if follow is None else follow.payload.decode(),
    }
    if follow is not None:
        await q.ack(follow)
    await q.close()
    print(json.dumps(report))


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:]))
