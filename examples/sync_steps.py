"""Plain ``def`` steps and jobs: blocking code in the engine's thread pool.

    python -m examples.sync_steps [DIR]

``checksum`` is an ordinary blocking function (it reads a file and hashes
it); ``@step`` runs its body in a thread of the engine's pool, journaled
and retried like an ``async def`` step, so the event loop stays free. The
workflow, which awaits its steps, is ``async def``. ``Engine(sync_threads=4)``
runs at most four bodies at once. A ``def`` job runs in the same pool.
"""

from __future__ import annotations

import asyncio
import hashlib
import threading
from pathlib import Path

from durable import Engine, job, step, workflow
from examples._store_dir import run_with_store


@step(max_attempts=3, timeout=30)
def checksum(path: str) -> str:
    """A blocking body: reads and hashes a file in a thread of the pool."""
    digest = hashlib.sha256(Path(path).read_bytes()).hexdigest()
    return f"{Path(path).name} {digest[:12]} ({threading.current_thread().name.split('_')[0]})"


@job
def count_lines(path: str) -> int:
    """A blocking job body, in the same pool."""
    with open(path) as f:
        return sum(1 for _ in f)


@workflow
async def checksums(paths: list[str]) -> list[str]:
    """The workflow awaits its (sync) steps: they run four at a time."""
    return list(await asyncio.gather(*(checksum(p) for p in paths)))


async def main(store: Path) -> None:
    files = []
    for i in range(6):
        file = store.parent / f"file{i}.txt"
        file.parent.mkdir(parents=True, exist_ok=True)
        file.write_text("line\n" * (i + 1))
        files.append(str(file))
    async with Engine(store, sync_threads=4):
        handle = await checksums.start(files)
        for line in await handle.result():
            print(line)
        print(f"lines in file5.txt: {await count_lines(files[5])}")


if __name__ == "__main__":
    run_with_store(main)
