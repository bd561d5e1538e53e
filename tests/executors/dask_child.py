"""A workflow whose steps run on a Dask cluster of worker processes, for the
executors' process tests (`test_dask_processes.py`); also a process running
it, for the engine kill -9 test.

    python dask_child.py STORE SIDE SCHEDULER start RUN_ID   start the run, wait until killed
    python dask_child.py STORE SIDE SCHEDULER finish RUN_ID  work until the run ends, print it

(``start-wide`` and ``finish-wide`` do the same with `wide`.) `pipeline`
calls ``quick`` at positions 0 and 1, ``held`` at 2 and ``quick`` at 3,
every one on executor ``"dask"``; `wide` calls ``quick`` at 0, then
gathers ``held`` at 1 and 2 (one per worker of a two-worker cluster). Each execution of a body
leaves a file in the directory SIDE (outside the store), named
``STEP.POSITION.PID.TOKEN.started`` (and ``.done`` at its end), so the test
counts executions across processes, including those a kill cut short.
``held`` blocks until the file ``SIDE/release`` exists. Names are pinned:
this file runs as ``__main__`` in the child (its bodies then travel by
value) and is imported under its own name by the test.
"""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import sys
import time
from pathlib import Path

import durable


def mark(side: str, step: str, position: int, phase: str) -> Path:
    """Leave ``SIDE/STEP.POSITION.PID.TOKEN.PHASE`` (the token: ``started``'s
    file; one per execution); the path of the started file."""
    pid = os.getpid()
    path = Path(side, f"{step}.{position}.{pid}.{secrets.token_hex(4)}.{phase}")
    path.touch()  # the name says it all: a reader never sees it half written
    return path


def executions(side: Path, step: str, position: int, phase: str = "started") -> list[int]:
    """The worker pids of the executions of ``step`` at ``position`` that
    reached ``phase``, in no particular order."""
    return [int(p.name.split(".")[2]) for p in side.glob(f"{step}.{position}.*.{phase}")]


def wait_released(release: Path) -> None:
    """Return once ``release`` exists (the test, another process, creates it:
    no event crosses processes; bounded so a broken test cannot hold a worker)."""
    deadline = time.monotonic() + 60
    while not release.exists() and time.monotonic() < deadline:
        time.sleep(0.01)


@durable.step(executor="dask", name="dask_child.quick")
async def quick(side: str, position: int) -> int:
    """A step that runs at once."""
    mark(side, "quick", position, "started")
    return position + 1


@durable.step(
    executor="dask",
    name="dask_child.held",
    max_attempts=3,
    backoff=durable.Backoff(initial=0),
    retry_on=KeyError,  # not what a lost worker raises: WorkerLost is retried regardless
)
async def held(side: str, position: int, x: int) -> int:
    """A step that blocks until ``SIDE/release`` exists (a file: the test is
    another process); attempted again when its worker is lost."""
    started = mark(side, "held", position, "started")
    wait_released(Path(side, "release"))  # blocks this worker thread: the body's own
    started.with_suffix(".done").touch()
    return x * 10


@durable.workflow(name="dask_child.pipeline")
async def pipeline(side: str, x: int) -> list[int]:
    """``[1, 2, x * 10, 4]``, the body of every step on the cluster."""
    first, second = await quick(side, 0), await quick(side, 1)
    return [first, second, await held(side, 2, x), await quick(side, 3)]


@durable.workflow(name="dask_child.wide")
async def wide(side: str, x: int) -> list[int]:
    """``[1, x * 10, x * 10]``: two ``held`` steps at once, after a quick one."""
    first = await quick(side, 0)
    return [first, *await asyncio.gather(held(side, 1, x), held(side, 2, x))]


async def main(store: str, side: str, scheduler: str, mode: str, run_id: str) -> None:
    from distributed import Client

    workflow = wide if mode.endswith("-wide") else pipeline
    async with (
        Client(scheduler, asynchronous=True) as client,
        durable.Engine(store, executors={"dask": client}),
    ):
        handle = await workflow.options(run_id=run_id).start(side, 7)
        if mode.startswith("start"):
            await asyncio.Event().wait()  # until killed
        print(json.dumps(await handle.result(timeout=60)))


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:]))
