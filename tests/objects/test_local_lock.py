"""`ObjectStore.try_lock` on a local directory: ``flock``, released when the holder dies.

The ownership of issue 14 holds ``try_lock("cluster/owner.lock")`` while it
owns a local store, so that a standby learns at once that the owner is gone.
The process tests use real processes killed with SIGKILL.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from durable.errors import ObjectStoreError
from durable.store.objects import (
    FaultyObjectStore,
    LocalObjectStore,
    MemoryObjectStore,
    SimulatedCrash,
)
from durable.store.objects.base import Guarantee, ObjectStore

NAME = "cluster/owner.lock"

_CHILD = textwrap.dedent(
    """
    import asyncio, os, sys, time
    from durable.store.objects import LocalObjectStore

    def say(line: str) -> None:
        # One write(2) per line (atomic on a pipe): two processes share it.
        os.write(1, (line + "\\n").encode())

    async def main() -> None:
        lock = await LocalObjectStore(sys.argv[1]).try_lock(sys.argv[2])
        if sys.argv[3] == "fork" and lock is not None:
            pid = os.fork()
            if pid == 0:  # a child that outlives its parent, holding its files
                say("forked")  # after the at-fork hooks ran
                time.sleep(600)
                os._exit(0)
            say(str(pid))
        say("locked" if lock is not None else "refused")
        time.sleep(600)

    asyncio.run(main())
    """
)


class Child:
    """A process that takes the lock and waits to be killed."""

    def __init__(self, root: Path, mode: str = "") -> None:
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
        self.proc = subprocess.Popen(
            [sys.executable, "-c", _CHILD, str(root), NAME, mode or "-"],
            stdout=subprocess.PIPE,
            text=True,
            env=env,
        )
        self.grandchild: int | None = None
        assert self.proc.stdout is not None
        if mode == "fork":
            # The forked child's pid and "locked" from this process, and
            # "forked" from that child once its at-fork hooks ran (the lock
            # is not its to hold from then on), in any order.
            lines = [self.proc.stdout.readline().strip() for _ in range(3)]
            assert "forked" in lines, lines
            (pid,) = [line for line in lines if line.isdigit()]
            self.grandchild = int(pid)
            (self.said,) = [line for line in lines if line not in ("forked", pid)]
        else:
            self.said = self.proc.stdout.readline().strip()

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()
        assert self.proc.stdout is not None
        self.proc.stdout.close()

    def kill_grandchild(self) -> None:
        if self.grandchild is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.grandchild, signal.SIGKILL)  # init reaps it: not our child


@pytest.fixture
def children() -> Iterator[list[Child]]:
    made: list[Child] = []
    yield made
    for child in made:
        if child.proc.poll() is None:
            child.kill()
        child.kill_grandchild()


async def test_a_lock_held_by_a_live_process_is_refused_and_free_once_it_is_killed(
    tmp_path: Path, children: list[Child]
) -> None:
    store = LocalObjectStore(tmp_path)
    child = Child(tmp_path)
    children.append(child)
    assert child.said == "locked"
    assert await store.try_lock(NAME) is None  # the child lives: refused
    assert await store.try_lock(NAME) is None  # and again, not waiting
    child.kill()  # SIGKILL: no cleanup of its own
    lock = await store.try_lock(NAME)  # at once: the kernel released it
    assert lock is not None
    assert lock.held
    assert lock.name == NAME
    second = Child(tmp_path)  # now the parent holds it: another process is refused
    children.append(second)
    assert second.said == "refused"
    lock.release()
    await store.close()


async def test_a_forked_child_does_not_keep_its_parents_lock(
    tmp_path: Path, children: list[Child]
) -> None:
    child = Child(tmp_path, "fork")  # locks, then forks a child that lives on
    children.append(child)
    assert child.said == "locked"
    store = LocalObjectStore(tmp_path)
    assert await store.try_lock(NAME) is None
    child.kill()
    assert child.grandchild is not None
    os.kill(child.grandchild, 0)  # the forked child is still alive ...
    lock = await store.try_lock(NAME)  # ... and holds nothing
    assert lock is not None
    lock.release()


async def test_two_stores_on_one_directory_in_one_process_exclude_each_other(
    tmp_path: Path,
) -> None:
    a, b = LocalObjectStore(tmp_path), LocalObjectStore(tmp_path)
    lock = await a.try_lock(NAME)
    assert lock is not None
    assert await b.try_lock(NAME) is None
    assert await a.try_lock(NAME) is None  # the same store asking twice: refused too
    lock.release()
    assert not lock.held
    lock.release()  # a no-op once released
    again = await b.try_lock(NAME)
    assert again is not None
    assert await a.try_lock(NAME) is None
    await b.close()  # closing the store releases its locks
    assert not again.held
    last = await a.try_lock(NAME)
    assert last is not None
    await a.close()


async def test_the_lock_file_is_an_empty_object_and_locks_are_per_name(tmp_path: Path) -> None:
    store = LocalObjectStore(tmp_path / "not-yet")  # parent directories are made
    one = await store.try_lock(NAME)
    other = await store.try_lock("cluster/other.lock")
    assert one is not None
    assert other is not None
    assert await store.get(NAME) == b""
    one.release()
    other.release()
    assert await store.list("cluster/") == ["cluster/other.lock", NAME]


async def test_bad_lock_names_are_refused(tmp_path: Path) -> None:
    store = LocalObjectStore(tmp_path)
    with pytest.raises(ValueError, match="invalid object name"):
        await store.try_lock("../escape")
    await store.put("dir/x", b"1")
    with pytest.raises(ObjectStoreError, match="cannot lock 'dir'"):
        await store.try_lock("dir")


async def test_stores_without_locks_say_so() -> None:
    memory = MemoryObjectStore()
    assert await memory.try_lock(NAME) is None
    assert Guarantee.PROCESS_LOCK not in memory.guarantees
    assert Guarantee.PROCESS_LOCK in LocalObjectStore("/nonexistent").guarantees


async def test_a_crashed_faulty_store_releases_its_locks(tmp_path: Path) -> None:
    faulty = FaultyObjectStore(LocalObjectStore(tmp_path))
    lock = await faulty.try_lock(NAME)
    assert lock is not None
    assert await LocalObjectStore(tmp_path).try_lock(NAME) is None
    faulty.crash_after_writes(0)  # the simulated process dies
    assert not lock.held
    survivor = await LocalObjectStore(tmp_path).try_lock(NAME)
    assert survivor is not None
    with pytest.raises(SimulatedCrash):
        await faulty.try_lock(NAME)
    survivor.release()


def test_is_local_tells_which_stores_are_cheap_to_poll(tmp_path: Path) -> None:
    stores: list[ObjectStore] = [LocalObjectStore(tmp_path), MemoryObjectStore()]
    assert all(s.is_local for s in stores)
    faulty = FaultyObjectStore(MemoryObjectStore())
    assert faulty.is_local
    faulty.latency = 0.02  # a store behind a network is polled like a cloud one
    assert not faulty.is_local


async def test_try_lock_runs_off_the_event_loop(tmp_path: Path) -> None:
    store = LocalObjectStore(tmp_path)
    locks = await asyncio.gather(*(store.try_lock(NAME) for _ in range(8)))
    held = [lock for lock in locks if lock is not None]
    assert len(held) == 1  # concurrent tries: exactly one wins
    held[0].release()
