"""A worker process of the scale-out tests (run as a script).

    python scaleout_worker.py URL OPTIONS SIDE TTL HEARTBEAT [FLAG ...]

Runs ``async with Engine(URL, ttl=TTL, heartbeat=HEARTBEAT) as engine:
await engine.serve()`` with the workload of `scaleout_app`, and notes in
the side channel SIDE (see `scaleout_app`):

- ``member``: the engine entered (``owner``: whether it owns the store);
- ``acquiring``: the membership decided to take the store (it opens it now);
- ``owner`` (with ``writer``, its log writer's id in hex) each time it
  becomes the owner, ``standby`` each time it goes back to serving as a
  standby after owning;
- ``lost`` (``message``: the log event, with the reason) when it lost the
  store; ``released`` when it wrote the release of the store to the owner
  chain (a graceful close); ``corrupt`` (``message``, naming the key) when
  its inbox applier moved a corrupt request aside;
- ``serve-returned`` once ``serve()`` returned (SIGTERM or SIGINT), and
  ``closed`` once the engine closed (drained, released);
- with ``commits``: ``commit`` (``seq``, and ``t0``, when the create began)
  for each log object it created: the engine then runs on an `ObjectStore`
  instance that notes them (`NotingStore`), not on the URL.

With ``partitions=P`` it is a member of the pool sharing a store of P
partitions (``Engine(URL, partitions=P)``) and notes, instead of ``owner``
and ``standby`` for the store, per partition (``p``): ``pool-member``
(``member``: its member id in the assignment table) once it joined;
``owner`` when it begins to open a partition the table gave it (its steps
may run from then on), ``owned`` once opened, and ``standby`` when it
stops owning it (lost: ``reason``; or drained and handed over:
``released``; or the open failed: ``failed``).

With ``submit=NAME:N:STEPS:PAUSE`` it also starts N `plain` runs of STEPS
steps through its own engine, all at once (run ids ``NAME-p<k>``), notes
``started`` for each and ``submitted`` once all are, then ``result`` for
each (see `scaleout_app.note_results`).

``DURABLE_SCALEOUT_LOG=INFO`` (or ``DEBUG``) logs durable's events to stderr.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))  # as a script: the workload beside it

import scaleout_app as app

from durable import Engine
from durable.cluster.pool import PoolMember
from durable.store.log.format import LOG_PREFIX, parse_seq
from durable.store.objects import open_object_store
from durable.testing import FaultyObjectStore


async def watch_roles(engine: Engine) -> None:
    """Note each change of ownership."""
    while True:
        await engine.wait_owner(owner=True)
        app.note("owner", writer=engine.queue.writer.writer_id.hex())  # type: ignore[attr-defined]
        await engine.wait_owner(owner=False)
        app.note("standby")


#: Log events noted in the side channel, by the start of their message.
NOTED = {
    "acquiring the store": "acquiring",
    "lost the store": "lost",
    "released the store": "released",
    "corrupt inbox request moved aside": "corrupt",
}


class NoteEvents(logging.Handler):
    """Notes the membership's and the inbox's log events of `NOTED`: so that
    a takeover's time splits into noticing the owner gone and opening the
    store, and the tests see why an owner lost the store."""

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        for start, ev in NOTED.items():
            if message.startswith(start):
                app.note(ev, message=message)


class NotingStore(FaultyObjectStore):
    """The store as is (no fault is scripted), noting each log object this
    process creates, once created: ``commit`` with its ``seq`` and ``t0``."""

    async def create(self, name: str, data: bytes) -> None:
        t0 = time.monotonic()
        await super().create(name, data)
        if name.startswith(LOG_PREFIX):
            app.note("commit", seq=parse_seq(name, LOG_PREFIX), t0=t0)


def note_partitions() -> None:
    """Make every `PoolMember` of this process note its member id and each
    change of a partition's ownership (see the module docstring), by
    wrapping the callbacks the engine hands it."""
    init = PoolMember.__init__

    def noting_init(
        self: PoolMember,
        objects: Any,
        partitions: int,
        *,
        on_acquire: Callable[[int], Awaitable[Any]],
        on_lose: Callable[[int, str], Awaitable[None]],
        on_release: Callable[[int], Awaitable[None]],
        **kwargs: Any,
    ) -> None:
        async def acquire(p: int) -> Any:
            app.note("owner", p=p)
            try:
                writer = await on_acquire(p)
            except BaseException as e:
                app.note("standby", p=p, failed=repr(e))
                raise
            app.note("owned", p=p)
            return writer

        async def lose(p: int, reason: str) -> None:
            app.note("standby", p=p, reason=reason)
            await on_lose(p, reason)

        async def release(p: int) -> None:
            await on_release(p)
            app.note("standby", p=p, released=True)

        init(
            self,
            objects,
            partitions,
            on_acquire=acquire,
            on_lose=lose,
            on_release=release,
            **kwargs,
        )
        app.note("pool-member", member=self.member_id)

    PoolMember.__init__ = noting_init  # type: ignore[method-assign]


async def submit(name: str, n: str, steps: str, pause: str) -> None:
    """Start N `plain` runs through this engine, then note their results."""
    handles = await asyncio.gather(
        *(
            app.plain.options(run_id=f"{name}-p{k}").start(k, int(steps), float(pause))
            for k in range(int(n))
        )
    )
    for handle in handles:
        app.note("started", run=handle.run_id)
    app.note("submitted", n=len(handles))
    await app.note_results(handles)


async def main(url: str, options: str, side: str, ttl: str, heartbeat: str, *flags: str) -> None:
    level = os.environ.get("DURABLE_SCALEOUT_LOG")
    fmt = f"%(relativeCreated)8d {os.getpid()} %(levelname)s %(message)s"
    if level:  # diagnosis: durable's log events to stderr, with the pid and time
        logging.basicConfig(level=level, format=fmt)
    app.open_channel(side)
    cluster = logging.getLogger("durable.cluster")
    cluster.setLevel(min(cluster.getEffectiveLevel(), logging.INFO))
    cluster.addHandler(NoteEvents())
    if not level:  # our handler turns durable's fallback off: its warnings to stderr
        warnings = logging.StreamHandler()
        warnings.setLevel(logging.WARNING)
        warnings.setFormatter(logging.Formatter(fmt))
        cluster.addHandler(warnings)
    named = dict(flag.split("=", 1) for flag in flags if "=" in flag)
    partitions = int(named["partitions"]) if "partitions" in named else None
    if partitions is not None:
        note_partitions()
    store: NotingStore | None = None
    if "commits" in flags:
        store = NotingStore(await open_object_store(url, json.loads(options)))
    engine = Engine(
        store or url,
        storage_options=None if store else json.loads(options),
        ttl=float(ttl),
        heartbeat=float(heartbeat),
        partitions=partitions,
    )
    async with engine:
        app.note("member", owner=engine.owner)
        tasks = [] if partitions is not None else [asyncio.create_task(watch_roles(engine))]
        if "submit" in named:
            tasks.append(asyncio.create_task(submit(*named["submit"].split(":"))))
        await engine.serve()
        app.note("serve-returned", owner=engine.owner)
        for task in tasks:
            task.cancel()
    if store is not None:
        await store.close()
    app.note("closed")


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:]))
