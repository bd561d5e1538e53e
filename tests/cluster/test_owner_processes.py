"""Ownership across real processes on a local directory, on the wall clock
(ttl 2 s, heartbeat 0.3 s): kill -9 of the owner, SIGSTOP past the ttl then
SIGCONT, graceful handover on SIGTERM, liveness by the ttl alone (as on
object stores); then, with the directory's process lock, a kill -9 noticed
at once. The children are `owner_child`."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from durable.store.log.format import LOG_PREFIX, decode_log
from durable.store.objects import LocalObjectStore
from durable.store.objects.base import Guarantee

CHILD = str(Path(__file__).with_name("owner_child.py"))
TTL, HB = 2.0, 0.3
SLACK = 1.5  # process scheduling on a busy 2-core machine
pytestmark = pytest.mark.slow


class Child:
    def __init__(self, directory: Path, *, lock: bool = False, ttl: float = TTL) -> None:
        self.proc = subprocess.Popen(
            [
                sys.executable,
                CHILD,
                str(directory),
                str(ttl),
                str(HB),
                *([] if lock else ["nolock"]),
            ],
            stdout=subprocess.PIPE,
            text=True,
        )

    def expect(self, word: str) -> list[str]:
        """The next line's words; it must start with ``word``."""
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline().split()
        assert line, f"the child exited before saying {word!r}"
        assert line[0] == word, line
        return line

    def signal(self, sig: int) -> None:
        os.kill(self.proc.pid, sig)

    def reap(self) -> int:
        if self.proc.poll() is None:
            self.proc.kill()
        code = self.proc.wait(timeout=30)
        assert self.proc.stdout is not None
        self.proc.stdout.close()
        return code


async def _writers_in_log_order(directory: Path) -> list[tuple[bytes, bool]]:
    objects = LocalObjectStore(directory)
    out = []
    for name in await objects.list(LOG_PREFIX):
        obj = decode_log(name, await objects.get(name))
        out.append((obj.writer, obj.marker))
    return out


def test_kill_9_sigstop_and_sigterm_hand_the_store_over(tmp_path: Path) -> None:
    store = tmp_path / "store"
    a = Child(store)
    b: Child | None = None
    c: Child | None = None
    try:
        writer_a = a.expect("owner")[2]
        b = Child(store)
        b.expect("standby")
        time.sleep(3 * HB)  # b watches a's heartbeats for a while: a is alive to it

        # SIGSTOP the owner past the ttl: b takes over; a wakes, commits nothing, steps down.
        a.signal(signal.SIGSTOP)
        stopped = time.monotonic()
        writer_b = b.expect("owner")[2]
        took = time.monotonic() - stopped
        assert TTL - HB <= took <= TTL + 2 * HB + SLACK, took
        a.signal(signal.SIGCONT)
        a.expect("lost")

        # kill -9 the owner: a (a standby again) takes over within ttl + 2 heartbeats.
        time.sleep(3 * HB)
        b.signal(signal.SIGKILL)
        killed = time.monotonic()
        writer_a2 = a.expect("owner")[2]
        took = time.monotonic() - killed
        assert TTL - HB <= took <= TTL + 2 * HB + SLACK, took

        # SIGTERM: a drains, releases; c takes over within about one heartbeat.
        c = Child(store)
        c.expect("standby")
        time.sleep(3 * HB)
        a.signal(signal.SIGTERM)
        termed = time.monotonic()
        writer_c = c.expect("owner")[2]
        took = time.monotonic() - termed
        assert took <= HB + SLACK, took
        a.expect("released")
        assert a.proc.wait(timeout=30) == 0
    finally:
        for child in (a, b, c):
            if child is not None:
                child.reap()

    # The log: each writer's objects follow its own open marker, none after the next one's.
    log = asyncio.run(_writers_in_log_order(store))
    order = [w.hex() for w, marker in log if marker]
    assert order == [writer_a, writer_b, writer_a2, writer_c]
    seen: list[str] = []
    for writer, marker in log:
        if marker:
            seen.append(writer.hex())
        assert writer.hex() == seen[-1], "an object of a fenced writer after a newer marker"


def test_on_a_local_dir_a_killed_owner_is_replaced_at_once_through_the_lock(
    tmp_path: Path,
) -> None:
    if getattr(Guarantee, "PROCESS_LOCK", None) not in LocalObjectStore(tmp_path).guarantees:
        pytest.skip("needs LocalObjectStore.try_lock (issue 14 part A)")
    store = tmp_path / "store"
    a = Child(store, lock=True, ttl=10 * TTL)  # the ttl is long: only the lock can be this quick
    b: Child | None = None
    c: Child | None = None
    try:
        a.expect("owner")
        b = Child(store, lock=True, ttl=10 * TTL)
        b.expect("standby")
        a.signal(signal.SIGKILL)
        killed = time.monotonic()
        b.expect("owner")
        assert time.monotonic() - killed <= HB + SLACK
        b.signal(signal.SIGKILL)
        killed = time.monotonic()
        c = Child(
            store, lock=True, ttl=10 * TTL
        )  # a new process after a crash: no ttl to wait either
        c.expect("owner")
        assert time.monotonic() - killed <= SLACK
    finally:
        for child in (a, b, c):
            if child is not None:
                child.reap()
