"""A process for `test_manifest`'s race: opens manifests on local directories.

Reads lines ``DIR P`` from stdin; for each, runs ``open_manifest`` on the
directory with ``partitions=P`` and prints ``ok P`` or ``mismatch STORED
REQUESTED``. Prints ``ready`` first, so the parent can start every round
once all processes have imported.
"""

from __future__ import annotations

import asyncio
import sys

from durable.cluster.manifest import open_manifest
from durable.errors import PartitionMismatch
from durable.store.objects import LocalObjectStore


async def main() -> None:
    print("ready", flush=True)
    for line in sys.stdin:
        directory, partitions = line.split()
        try:
            manifest = await open_manifest(LocalObjectStore(directory), int(partitions))
        except PartitionMismatch as e:
            print("mismatch", e.stored, e.requested, flush=True)
        else:
            assert manifest is not None
            print("ok", manifest.partitions, flush=True)


if __name__ == "__main__":
    asyncio.run(main())
