"""A writer process for the crash and fencing tests (run as a script).

python log_child.py ROOT commit   # awaited commits forever; prints "ack N" after each
python log_child.py ROOT fence    # opens, commits one key, prints "ready", waits for a
                                  # line on stdin, commits again, prints the outcome
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Callable, Coroutine
from typing import Any

from durable.errors import Fenced
from durable.store.log import LogOptions, LogWriter, WriteBatch
from durable.store.objects import ObjectStore, open_object_store


async def commit_forever(objects: ObjectStore) -> None:
    w = await LogWriter.open(objects, LogOptions(checkpoint_max_objects=50))
    n = int(w.state.get(b"next") or b"0")

    async def one(i: int) -> None:
        batch = WriteBatch().put(b"k%08d" % i, b"v%d" % i).put(b"next", b"%d" % (i + 1))
        await w.commit(batch)
        sys.stdout.write(f"ack {i}\n")
        sys.stdout.flush()

    await keep_committing(one, n, asyncio.Event())


async def keep_committing(
    one: Callable[[int], Coroutine[Any, Any, None]], n: int, stop: asyncio.Event
) -> None:
    """Call ``one(n)``, ``one(n + 1)``... with up to 8 calls in flight (so
    that commits share groups) until ``stop`` is set; then wait for those."""
    inflight: set[asyncio.Task[None]] = set()
    while not stop.is_set():
        while len(inflight) < 8:
            t = asyncio.create_task(one(n))
            inflight.add(t)
            t.add_done_callback(inflight.discard)
            n += 1
        await asyncio.wait(inflight, return_when=asyncio.FIRST_COMPLETED)
    await asyncio.gather(*inflight)


async def fence(objects: ObjectStore, tag: str) -> None:
    # A second writer takes over: on the segment medium past the first's live lock.
    w = await LogWriter.open(objects, takeover=True)
    await w.commit(WriteBatch().put(b"writer-" + tag.encode(), b"1"))
    print("ready", flush=True)
    await asyncio.to_thread(sys.stdin.readline)
    try:
        await w.commit(WriteBatch().put(b"late-" + tag.encode(), b"1"))
        print("committed", flush=True)
    except Fenced:
        print("fenced", flush=True)


async def main(url: str, options: str, mode: str, *rest: str) -> None:
    objects = await open_object_store(url, json.loads(options))
    if mode == "commit":
        await commit_forever(objects)
    else:
        await fence(objects, rest[0])
    await objects.close()


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:]))
