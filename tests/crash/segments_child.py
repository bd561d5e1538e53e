"""A writer process on the segment medium with small segments (run as a script).

python segments_child.py ROOT SEGMENT_BYTES   # awaited commits forever, as
                                              # log_child.py's "commit" mode
"""

from __future__ import annotations

import asyncio
import sys

from log_child import commit_forever

from durable.store.objects import SegmentObjectStore


async def main(root: str, segment_bytes: str) -> None:
    await commit_forever(SegmentObjectStore(root, segment_bytes=int(segment_bytes)))


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:]))
