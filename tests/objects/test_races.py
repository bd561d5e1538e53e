"""Race `create` on one name: exactly one winner per round, and its bytes stored.

Each racer writes a unique payload; a barrier lines the racers up before
every round. fsspec's own local and memory "exclusive create" fail these
tests (see STORAGE-BACKENDS.md, gotcha 2); ours must not.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import sys
import threading
from collections.abc import Iterator
from multiprocessing.queues import Queue
from multiprocessing.synchronize import Barrier
from typing import Any

import pytest

from durable.errors import ObjectExists
from durable.store.objects import MemoryObjectStore, ObjectStore, open_object_store
from durable.testing.cloud import StoreLocation

BARRIER_TIMEOUT = 60.0


def _payload(racer: int, round_: int) -> bytes:
    return f"racer {racer} round {round_} ".encode() * 16


def _name(round_: int) -> str:
    return f"race/{round_:06d}"


async def _race(
    store: ObjectStore, racer: int, rounds: int, wait: threading.Barrier | Barrier
) -> list[int]:
    """Race every round; return the rounds this racer won."""
    won = []
    for round_ in range(rounds):
        wait.wait(BARRIER_TIMEOUT)  # blocks this racer's loop, which runs nothing else
        try:
            await store.create(_name(round_), _payload(racer, round_))
        except ObjectExists:
            continue
        won.append(round_)
    return won


def _process_racer(
    location: tuple[str, dict[str, Any]],
    racer: int,
    rounds: int,
    barrier: Barrier,
    results: Queue[tuple[int, list[int]]],
) -> None:
    """The body of one racing process (imported by name in the spawned child)."""

    async def run() -> list[int]:
        store = await open_object_store(*location)
        try:
            return await _race(store, racer, rounds, barrier)
        finally:
            await store.close()

    results.put((racer, asyncio.run(run())))


async def _check(store: ObjectStore, wins: dict[int, list[int]], rounds: int) -> None:
    winners: dict[int, list[int]] = {r: [] for r in range(rounds)}
    for racer, won in wins.items():
        for round_ in won:
            winners[round_].append(racer)
    bad = {r: w for r, w in winners.items() if len(w) != 1}
    assert not bad, f"{len(bad)} of {rounds} rounds without exactly one winner: {bad}"
    for round_, (racer,) in winners.items():
        assert await store.get(_name(round_)) == _payload(racer, round_), round_
    assert len(await store.list("race/")) == rounds


@pytest.mark.slow
async def test_create_race_between_processes(shared_location: StoreLocation) -> None:
    """2 processes x 200 rounds on every backend processes can share."""
    racers, rounds = 2, 200
    location = (shared_location.url, dict(shared_location.options))
    ctx = multiprocessing.get_context("spawn")
    barrier = ctx.Barrier(racers)
    results: Queue[tuple[int, list[int]]] = ctx.Queue()
    procs = [
        ctx.Process(target=_process_racer, args=(location, i, rounds, barrier, results))
        for i in range(racers)
    ]
    for p in procs:
        p.start()
    try:
        wins = dict(await asyncio.to_thread(lambda: [results.get(timeout=120) for _ in procs]))
    finally:
        for p in procs:
            p.join(timeout=30)
            if p.is_alive():
                p.kill()
                p.join()
    assert [p.exitcode for p in procs] == [0] * racers
    store = await open_object_store(*location)
    try:
        await _check(store, wins, rounds)
    finally:
        await store.close()


@pytest.fixture
def tiny_switch_interval() -> Iterator[None]:
    """Make the GIL switch threads as often as possible, to provoke races."""
    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        yield
    finally:
        sys.setswitchinterval(old)


@pytest.mark.usefixtures("tiny_switch_interval")
def test_memory_create_race_between_threads() -> None:
    racers, rounds = 8, 2000
    store = MemoryObjectStore()
    barrier = threading.Barrier(racers)
    wins: dict[int, list[int]] = {}
    errors: list[BaseException] = []

    def racer(i: int) -> None:
        try:
            wins[i] = asyncio.run(_race(store, i, rounds, barrier))
        except BaseException as exc:
            errors.append(exc)
            barrier.abort()

    threads = [threading.Thread(target=racer, args=(i,)) for i in range(racers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    asyncio.run(_check(store, wins, rounds))
