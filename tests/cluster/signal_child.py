"""A process of the kill -9 signal tests (run as a script).

python signal_child.py DIRECTORY POINT

Opens both partitions of the store in DIRECTORY (`signal_cluster`), starts
`RUN` (partition 0) waiting on `KEY` (home 1), then dies by SIGKILL at
POINT, printing ``dying`` just before:

- ``register``: after the register message was applied at the home,
  before the run's partition deleted its outbox record;
- ``deliver-before``: after the signal's commit at the home, before the
  deliver message is sent;
- ``deliver-after``: after the deliver message was applied (the run
  woken), before the home deleted its outbox record.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from typing import Any

from signal_cluster import SignalCluster, name_in

from durable.cluster.outbox import Outbox, OutboxRecord
from durable.cluster.requests import decode_request
from durable.store.clock import SystemClock
from durable.store.objects import LocalObjectStore

P = 2
RUN, KEY = name_in(0, P, "run"), name_in(1, P, "key")
#: The request kind and whether the kill comes after its send, per point.
POINTS = {
    "register": ("SignalRegisterRequest", True),
    "deliver-before": ("SignalDeliverRequest", False),
    "deliver-after": ("SignalDeliverRequest", True),
}


def die() -> None:
    print("dying", flush=True)
    os.kill(os.getpid(), signal.SIGKILL)


def kill_at(point: str) -> None:
    """Make `Outbox._send` SIGKILL this process at ``point``."""
    kind, after = POINTS[point]
    send = Outbox._send

    async def send_then_maybe_die(self: Outbox, record: OutboxRecord) -> Any:
        hit = type(decode_request(record.name, record.data)).__name__ == kind
        if hit and not after:
            die()
        result = await send(self, record)
        if hit:
            die()
        return result

    Outbox._send = send_then_maybe_die  # type: ignore[method-assign]


async def main(directory: str, point: str) -> None:
    cluster = SignalCluster(LocalObjectStore(directory), P, SystemClock())
    await cluster.open_all()
    a, h = cluster.parts[0], cluster.parts[1]
    if point == "register":
        kill_at(point)
    await a.start_waiting(RUN, KEY)
    await cluster.pump()
    kill_at(point)
    print("signal", (await h.runtime.signal(KEY, b"v")).value, flush=True)
    await cluster.pump()
    print("survived", flush=True)


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:]))
