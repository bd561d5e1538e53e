"""A worker process of the scale-out tests (run as a script).

    python scaleout_worker.py URL OPTIONS SIDE TTL HEARTBEAT

Runs ``async with Engine(URL, ttl=TTL, heartbeat=HEARTBEAT) as engine:
await engine.serve()`` with the workload of `scaleout_app`, and notes in
the side channel SIDE (see `scaleout_app`):

- ``member``: the engine entered (``owner``: whether it owns the store);
- ``acquiring``: the membership decided to take the store (it opens it now);
- ``owner`` (with ``writer``, its log writer's id in hex) each time it
  becomes the owner, ``standby`` each time it goes back to serving as a
  standby after owning;
- ``serve-returned`` once ``serve()`` returned (SIGTERM or SIGINT), and
  ``closed`` once the engine closed (drained, released).

``DURABLE_SCALEOUT_LOG=INFO`` (or ``DEBUG``) logs durable's events to stderr.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))  # as a script: the workload beside it

import scaleout_app as app

from durable import Engine


async def watch_roles(engine: Engine) -> None:
    """Note each change of ownership."""
    while True:
        await engine.wait_owner(owner=True)
        app.note("owner", writer=engine.queue.writer.writer_id.hex())  # type: ignore[attr-defined]
        await engine.wait_owner(owner=False)
        app.note("standby")


class NoteAcquiring(logging.Handler):
    """Notes ``acquiring`` when the membership decides to take the store
    (its log event), so that a takeover's time splits into noticing the
    owner gone and opening the store."""

    def emit(self, record: logging.LogRecord) -> None:
        if record.getMessage().startswith("acquiring the store"):
            app.note("acquiring")


async def main(url: str, options: str, side: str, ttl: str, heartbeat: str) -> None:
    level = os.environ.get("DURABLE_SCALEOUT_LOG")
    fmt = f"%(relativeCreated)8d {os.getpid()} %(levelname)s %(message)s"
    if level:  # diagnosis: durable's log events to stderr, with the pid and time
        logging.basicConfig(level=level, format=fmt)
    app.open_channel(side)
    cluster = logging.getLogger("durable.cluster")
    cluster.setLevel(min(cluster.getEffectiveLevel(), logging.INFO))
    cluster.addHandler(NoteAcquiring())
    if not level:  # our handler turns durable's fallback off: its warnings to stderr
        warnings = logging.StreamHandler()
        warnings.setLevel(logging.WARNING)
        warnings.setFormatter(logging.Formatter(fmt))
        cluster.addHandler(warnings)
    engine = Engine(
        url, storage_options=json.loads(options), ttl=float(ttl), heartbeat=float(heartbeat)
    )
    async with engine:
        app.note("member", owner=engine.owner)
        watcher = asyncio.create_task(watch_roles(engine))
        await engine.serve()
        app.note("serve-returned", owner=engine.owner)
        watcher.cancel()
    app.note("closed")


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:]))
