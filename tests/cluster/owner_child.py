"""A member process for `test_owner_processes`: an `Ownership` on a local
directory with the wall clock, whose "store owner" opens a real `LogWriter`
and commits a tick every 20 ms while it owns (checking the ownership's
validity first and stopping the writer when it fails, as
`LogWriter.set_validity` makes the writer do). SIGTERM: release and exit 0.

With part A of issue 14 present, the writer's own validity check
(`LogWriter.set_validity`) and the directory's process lock
(`LocalObjectStore.try_lock`) are wired as the engine wires them.

Usage: ``owner_child.py DIR TTL HEARTBEAT [nolock]`` (``nolock``: liveness
by the ttl alone, as on object stores). Prints one line per event:
``standby <member>``, ``owner <member> <writer id hex>``, ``lost <member>
<reason>``, ``released <member>``.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import sys

from durable.cluster.owner import Ownership, State
from durable.errors import StoreError
from durable.store.log import LogWriter, WriteBatch
from durable.store.log.writer import LogOptions
from durable.store.objects import LocalObjectStore
from durable.store.objects.base import Guarantee


def say(*words: object) -> None:
    print(*words, flush=True)


def stop(writer: LogWriter, error: StoreError) -> None:
    """`LogWriter.stop` (part A of issue 14), or its equivalent until then."""
    method = getattr(writer, "stop", None)
    if method is not None:
        method(error)
    elif writer.failure is None:
        writer._fail(error, [])


class Owned:
    """The writer as the ownership sees it (`OwnerWriter`)."""

    def __init__(self, writer: LogWriter) -> None:
        self.writer = writer
        self.add_stop_callback = writer.add_stop_callback

    @property
    def failure(self) -> StoreError | None:
        return self.writer.failure

    def stop(self, error: StoreError) -> None:
        stop(self.writer, error)


async def main(directory: str, ttl: float, heartbeat: float, use_lock: bool) -> None:
    objects = LocalObjectStore(directory)
    writer: LogWriter | None = None
    ownership: Ownership

    async def on_acquire() -> Owned:
        nonlocal writer
        writer = await LogWriter.open(objects, LogOptions(checkpoint_on_close=False))
        if hasattr(writer, "set_validity"):
            writer.set_validity(ownership.validity)
        say("owner", ownership.member_id, writer.writer_id.hex())
        return Owned(writer)

    async def on_lose(reason: str) -> None:
        nonlocal writer
        say("lost", ownership.member_id, reason.replace("\n", " "))
        closing, writer = writer, None
        if closing is not None:
            await closing.close()

    async def on_release() -> None:
        nonlocal writer
        closing, writer = writer, None
        if closing is not None:
            await closing.close()

    process_lock = getattr(Guarantee, "PROCESS_LOCK", None)
    ownership = Ownership(
        objects,
        on_acquire=on_acquire,
        on_lose=on_lose,
        on_release=on_release,
        ttl=ttl,
        heartbeat=heartbeat,
        lock=objects.try_lock if use_lock and process_lock in objects.guarantees else None,
    )
    done = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, done.set)
    await ownership.start()
    if ownership.state is State.STANDBY:
        say("standby", ownership.member_id)
    while not done.is_set():
        current = writer
        if current is not None and current.failure is None:
            reason = ownership.validity()
            if reason is not None:
                stop(current, StoreError(f"self-fenced: {reason}"))
            else:
                # Fenced: the ownership hears of it through the writer.
                with contextlib.suppress(StoreError):
                    await current.commit(WriteBatch().put(b"tick", ownership.member_id.encode()))
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(done.wait(), 0.02)
    await ownership.release()
    say("released", ownership.member_id)


if __name__ == "__main__":
    asyncio.run(
        main(sys.argv[1], float(sys.argv[2]), float(sys.argv[3]), sys.argv[4:] != ["nolock"])
    )
