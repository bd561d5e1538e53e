"""What the multi-process benchmarks share (`bench_clients`, `bench_scale`).

Each benchmark spawns its processes (``multiprocessing``, start method
``spawn``), sends them commands over pipes (`Proc`) and has each count
its object-store calls (`CountingStore`) and its CPU (`Meter`) over
windows the parent opens and closes.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import os
import re
import time
from collections.abc import Callable, Iterable
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess
from typing import Any

from durable.store.objects.base import Guarantee, ObjectStore
from durable.testing import FaultyObjectStore

__all__ = ["CATEGORIES", "REPLY_TIMEOUT", "CountingStore", "Meter", "Proc", "category", "recv"]

#: Object-name prefixes that say what a request is for (the first that
#: matches), below a partition's prefix (``p003/``) if any.
CATEGORIES = (
    ("cluster/members/", "member"),
    ("cluster/owner/", "owner_chain"),
    ("cluster/assignment/", "assignment"),
    ("cluster.json", "manifest"),
    ("inbox/", "inbox"),
    ("log/", "log"),
    ("ckpt/", "ckpt"),
)
#: The partition prefix of a name in a partitioned store.
_PARTITION = re.compile(r"p\d{3}/")
#: Seconds a reply from a child may take before the benchmark gives up.
REPLY_TIMEOUT = 600.0


def category(name: str) -> str:
    """What a request on object (or prefix) ``name`` is for: see `CATEGORIES`."""
    if _PARTITION.match(name):
        name = name[5:]
    return next((c for p, c in CATEGORIES if name.startswith(p)), "other")


class CountingStore(FaultyObjectStore):
    """A `FaultyObjectStore` (``latency`` seconds per call) that also counts
    calls by ``<category>_<operation>`` of the name (`category`), and that
    can hide the host lock (as a bucket has none)."""

    def __init__(self, inner: ObjectStore, *, latency: float, host_lock: bool) -> None:
        super().__init__(inner, latency=latency)
        if not host_lock:
            self.guarantees = self.guarantees - {Guarantee.PROCESS_LOCK}
        self.by_category: collections.Counter[str] = collections.Counter()

    def _count(self, op: str, name: str) -> None:
        self.by_category[f"{category(name)}_{op}"] += 1

    async def get(self, name: str) -> bytes:
        """Counted `FaultyObjectStore.get`."""
        self._count("get", name)
        return await super().get(name)

    async def put(self, name: str, data: bytes) -> None:
        """Counted `FaultyObjectStore.put`."""
        self._count("put", name)
        await super().put(name, data)

    async def create(self, name: str, data: bytes) -> None:
        """Counted `FaultyObjectStore.create`."""
        self._count("create", name)
        await super().create(name, data)

    async def list(self, prefix: str) -> list[str]:
        """Counted `FaultyObjectStore.list`."""
        self._count("list", prefix)
        return await super().list(prefix)

    async def delete(self, names: Iterable[str]) -> None:
        """Counted `FaultyObjectStore.delete` (one call, whatever the count)."""
        doomed = [*names]
        self._count("delete", doomed[0] if doomed else "")
        await super().delete(doomed)


def _resolve(fut: asyncio.Future[None]) -> None:
    if not fut.done():
        fut.set_result(None)


async def recv(conn: Connection) -> Any:
    """The parent's next command, read without blocking the event loop."""
    loop = asyncio.get_running_loop()
    while not conn.poll():
        ready: asyncio.Future[None] = loop.create_future()
        loop.add_reader(conn.fileno(), _resolve, ready)
        try:
            await ready
        finally:
            loop.remove_reader(conn.fileno())
    return conn.recv()


async def until_first(tasks: set[asyncio.Task[None]]) -> None:
    """Wait for the first of a child's ``tasks`` (its command loop, its
    ``engine.serve()``) to end, cancel the others, and raise what a task
    that ended raised (a command that failed fails the child)."""
    done, pending = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    for task in pending:
        task.cancel()
    await asyncio.gather(*pending, return_exceptions=True)
    for task in done:
        task.result()


class Meter:
    """A process's object calls and CPU over a window opened by `begin`."""

    def __init__(self, store: CountingStore) -> None:
        self.store = store
        self.calls: collections.Counter[str] = collections.Counter()
        self.by_category: collections.Counter[str] = collections.Counter()
        self.cpu = 0.0
        self.t0 = 0.0

    def begin(self) -> None:
        """Open the window."""
        self.calls = collections.Counter(self.store.calls)
        self.by_category = collections.Counter(self.store.by_category)
        t = os.times()
        self.cpu, self.t0 = t.user + t.system, time.monotonic()

    def end(self) -> dict[str, Any]:
        """Close the window: ``seconds``, ``cpu_s``, ``calls`` by operation and
        ``by_category`` (``<category>_<operation>``) since `begin`."""
        t = os.times()
        return {
            "seconds": time.monotonic() - self.t0,
            "cpu_s": t.user + t.system - self.cpu,
            "calls": dict(self.store.calls - self.calls),
            "by_category": dict(self.store.by_category - self.by_category),
        }


class Proc:
    """A spawned child, ``target(*args, conn)``, and the parent's end ``conn``
    of its pipe."""

    def __init__(
        self, ctx: Any, role: str, target: Callable[..., None], args: tuple[Any, ...]
    ) -> None:
        self.role = role
        self.conn, child_conn = ctx.Pipe()
        self.proc: BaseProcess = ctx.Process(target=target, args=(*args, child_conn), daemon=True)
        self.proc.start()
        child_conn.close()

    def ready(self) -> Any:
        """Wait for the child's first message, ``("ready", value)``; the value."""
        word, value = self.recv()
        if word != "ready":
            raise RuntimeError(f"{self.role} (pid {self.proc.pid}) said {word!r}, not ready")
        return value

    def send(self, *cmd: Any) -> None:
        """Send a command (a tuple) to the child."""
        self.conn.send(cmd)

    def recv(self, timeout: float = REPLY_TIMEOUT) -> Any:
        """The child's next reply (`TimeoutError`, or `RuntimeError` if it died)."""
        if not self.conn.poll(timeout):
            raise TimeoutError(f"{self.role} (pid {self.proc.pid}) did not answer in {timeout} s")
        try:
            return self.conn.recv()
        except EOFError:
            code = self.proc.exitcode
            raise RuntimeError(f"{self.role} (pid {self.proc.pid}) died, exit {code}") from None

    def call(self, *cmd: Any) -> Any:
        """Send a command and wait for its reply."""
        self.send(*cmd)
        return self.recv()

    def stop(self) -> None:
        """Ask the child to leave (an owner drains and releases) and reap it."""
        if self.proc.is_alive():
            with contextlib.suppress(OSError, BrokenPipeError):
                self.send("stop")
            self.proc.join(60)
        self.kill()

    def kill(self) -> None:
        """SIGKILL the child if it still runs; reap it."""
        if self.proc.is_alive():
            self.proc.kill()
        self.proc.join(60)
        self.conn.close()
