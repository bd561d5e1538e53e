"""A client process of the inbox tests (run as a script).

python inbox_child.py URL OPTIONS INPUT N

Prints ``ready`` and waits for a line on stdin (so that several children
start together), then submits runs ``r0`` .. ``r{N-1}`` with input INPUT through an
`InboxWriter` and prints one line per run: ``<run id> new|same|mismatch``.
"""

from __future__ import annotations

import asyncio
import json
import sys

from durable.cluster.inbox import InboxWriter
from durable.engine import RunSpec
from durable.errors import InputMismatch
from durable.store.clock import SystemClock
from durable.store.objects import open_object_store

QUEUE = "workflow-steps"


async def main(url: str, options: str, input: str, n: str) -> None:
    objects = await open_object_store(url, json.loads(options))
    writer = InboxWriter(objects, SystemClock())
    print("ready", flush=True)
    await asyncio.to_thread(sys.stdin.readline)  # the barrier
    for i in range(int(n)):
        run_id = f"r{i}"
        try:
            new = await writer.submit(QUEUE, RunSpec(input.encode(), run_id=run_id))
            answer = "new" if new else "same"
        except InputMismatch:
            answer = "mismatch"
        sys.stdout.write(f"{run_id} {answer}\n")
    sys.stdout.flush()
    await objects.close()


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:]))
