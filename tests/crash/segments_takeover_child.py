"""A writer process that takes the segment log over (run as a script).

python segments_takeover_child.py ROOT SEGMENT_BYTES TAG

Opens ``ROOT`` on the segment medium with ``takeover=True`` (as an engine
whose ownership protocol judged the lock's holder gone), then commits
forever, up to 8 commits at a time, each putting ``<TAG>-<n>``; prints
"ack TAG N" once commit N is durable, and "fenced TAG" (then exits) when a
later writer took the log over.
"""

from __future__ import annotations

import asyncio
import sys

from log_child import keep_committing

from durable.errors import Fenced
from durable.store.log import LogOptions, LogWriter, WriteBatch
from durable.store.objects import SegmentObjectStore


async def main(root: str, segment_bytes: str, tag: str) -> None:
    objects = SegmentObjectStore(root, segment_bytes=int(segment_bytes))
    # No checkpoints: the whole log stays, so a reader can compare every record.
    options = LogOptions(checkpoint_max_objects=10**9, checkpoint_min_bytes=10**12)
    w = await LogWriter.open(objects, options, takeover=True)
    print(f"open {tag}", flush=True)
    fenced = asyncio.Event()

    async def one(i: int) -> None:
        try:
            await w.commit(WriteBatch().put(f"{tag}-{i}".encode(), b"v%d" % i))
        except Fenced:
            fenced.set()
            return
        sys.stdout.write(f"ack {tag} {i}\n")
        sys.stdout.flush()

    await keep_committing(one, 0, fenced)
    print(f"fenced {tag}", flush=True)


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:]))
