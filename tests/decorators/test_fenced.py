"""A fenced engine fails its waits, then serves as a standby (issue 13 point
10, issue 14).

Another writer opening the store (``Engine(takeover=True)``, or a bare
`Queue`) fences this engine. Before, an idle fenced engine learnt it only at
its next write, so ``handle.result(timeout)`` slept on its KV watch for the
whole timeout. Now the queue's fence check (one read every
`OpenOptions.fence_check_interval` of the store's clock) stops the writer,
which fails every watcher with `Fenced`; calls until the engine has left the
store raise `Fenced`; then the engine serves as a standby: later calls go
through the store's inbox to the new owner.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest
from decorator_helpers import LIMIT, wait_parked

import durable
from durable.errors import Fenced, SelfFenced
from durable.store.clock import MockClock
from durable.store.log.format import LOG_PREFIX
from durable.store.objects import FaultyObjectStore, LocalObjectStore
from durable.store.queue import OpenOptions, Queue

#: The default `OpenOptions.fence_check_interval`, which an `Engine` uses.
INTERVAL = OpenOptions().fence_check_interval
CHILD = str(Path(__file__).with_name("fenced_child.py"))


@durable.workflow
async def approval(key: str) -> str:
    return str(await durable.wait_for_signal(key))


async def test_a_fenced_engines_pending_result_raises_then_it_serves_as_a_standby(
    tmp_path: Path, clock: MockClock
) -> None:
    assert INTERVAL is not None
    store = tmp_path / "store"
    first = durable.Engine(store, clock=clock)
    async with first:
        handle = await approval.start("fence-1")
        await wait_parked(first, handle.run_id)
        pending = asyncio.create_task(handle.result(timeout=60))
        await asyncio.sleep(0)  # the wait is registered on its KV watch
        async with durable.Engine(store, clock=MockClock(), takeover=True) as second:
            assert second.owner  # it fenced `first`
            await asyncio.sleep(0)
            assert not pending.done()  # idle: it has not written since
            clock.advance(INTERVAL)  # one fence check of the first engine
            started = time.monotonic()
            with pytest.raises(Fenced):
                await asyncio.wait_for(pending, LIMIT)
            assert time.monotonic() - started < 2.0
            # Then the first engine is a standby: later calls go to the new owner.
            await first.wait_owner(False, timeout=LIMIT)
            assert not first.owner
            assert await first.signal("fence-1", "approved") is durable.SignalOutcome.SENT
            assert await first.handle(handle.run_id).result(timeout=LIMIT) == "approved"
            status = await first.handle(handle.run_id).status()
            assert status is not None
            assert status.state == "succeeded"
    assert not first.running


async def test_a_second_worker_does_not_fence_a_live_owner(
    tmp_path: Path, clock: MockClock
) -> None:
    """Without ``takeover``, a second worker on the store waits as a standby
    and fences nobody: the owner's calls keep working."""
    store = tmp_path / "store"
    async with durable.Engine(store, clock=clock) as first:
        handle = await approval.start("fence-2")
        await wait_parked(first, handle.run_id)
        async with durable.Engine(store, clock=MockClock()) as second:
            assert first.owner
            assert not second.owner
            clock.advance(INTERVAL or 5.0)  # a fence check: nothing to find
            await asyncio.sleep(0)
            assert (await handle.status()) is not None  # no Fenced
            await second.signal("fence-2", "from the standby")
            assert await handle.result(timeout=LIMIT) == "from the standby"
        assert first.owner


async def test_closing_an_engine_whose_workers_stopped_on_fenced_is_clean(
    tmp_path: Path, clock: MockClock
) -> None:
    """The workers of a fenced engine end with `Fenced` at their next claim;
    leaving ``async with`` still stops the services, closes the store and
    raises nothing (every call has reported the fencing)."""
    store = tmp_path / "store"
    first = durable.Engine(store, clock=clock)
    await first.__aenter__()
    workers = list(first.workflows._workers.values())  # to see them stop
    assert workers
    other = await Queue.open(store, OpenOptions(clock=MockClock(), takeover=True))

    async def fenced_workers_stopped() -> None:
        while any(w.running for w in workers):
            clock.advance(1.0)  # fence check, then the workers' next poll and claim
            await asyncio.sleep(0)

    await asyncio.wait_for(fenced_workers_stopped(), LIMIT)
    await first.__aexit__(None, None, None)
    assert not first.running
    await other.close()


async def test_a_fenced_store_queue_fails_its_completion_waits(
    tmp_path: Path, clock: MockClock
) -> None:
    store = tmp_path / "store"
    q = await Queue.open(store, OpenOptions(clock=clock, fence_check_interval=1.0))
    try:
        job = await q.enqueue("q", b"")
        waiting = asyncio.create_task(q.wait_for_completion(job, timeout=60))
        await asyncio.sleep(0)
        other = await Queue.open(store, OpenOptions(clock=MockClock(), takeover=True))
        clock.advance(1.0)
        with pytest.raises(Fenced):
            await asyncio.wait_for(waiting, LIMIT)
        with pytest.raises(Fenced):
            q.kv.watch(b"later").result()  # a watch after the stop fails at once
        await other.close()
    finally:
        await q.close()


async def test_no_fence_check_without_an_interval(tmp_path: Path, clock: MockClock) -> None:
    store = tmp_path / "store"
    q = await Queue.open(store, OpenOptions(clock=clock, fence_check_interval=None))
    other = await Queue.open(store, OpenOptions(clock=MockClock(), takeover=True))
    clock.advance(3600)
    await asyncio.sleep(0)
    assert q.writer.failure is None  # only its next write finds out
    with pytest.raises(Fenced):
        await q.kv.put(b"k", b"v")
    await other.close()
    await q.close()


async def test_the_fence_check_does_not_mistake_its_own_write(
    tmp_path: Path, clock: MockClock
) -> None:
    q = await Queue.open(tmp_path / "store", OpenOptions(clock=clock))
    for _ in range(3):
        await q.kv.put(b"k", b"v")
        assert not await q.writer.check_fenced()
        clock.advance(OpenOptions().fence_check_interval or 0)
        await asyncio.sleep(0)
    assert q.writer.failure is None
    await q.close()


@pytest.mark.slow
def test_a_fenced_engine_in_another_process_raises_fenced_promptly(tmp_path: Path) -> None:
    """A real second process: the child waits on ``handle.result(timeout=60)``
    with the default interval and the wall clock; this process fences it."""
    assert INTERVAL is not None
    store = tmp_path / "store"
    with subprocess.Popen(
        [sys.executable, CHILD, str(store)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    ) as child:
        assert child.stdout is not None
        assert child.stderr is not None
        try:
            assert child.stdout.readline().strip() == "waiting"
            fenced_at = asyncio.run(_fence(store))
            lines = [child.stdout.readline().strip() for _ in range(2)]
            elapsed = time.monotonic() - fenced_at
            assert child.wait(timeout=LIMIT) == 0
        except BaseException:
            child.kill()
            print(child.stderr.read(), file=sys.stderr)
            raise
    assert lines[0] == "result: Fenced"
    # A later status read sees the fencing, or (the fencer closed at once, and
    # the fenced engine stands by and takes the store back: on the segment
    # medium within a lock poll) answers from the store again.
    assert lines[1] in ("status: Fenced", "status: returned")
    assert elapsed < INTERVAL + 5.0  # one check interval, not the 60 s timeout


async def _fence(store: Path) -> float:
    """Open the store as its writer (fencing the child); when that happened."""
    q = await Queue.open(store, OpenOptions(takeover=True))  # another process takes over
    fenced_at = time.monotonic()
    await q.close()
    return fenced_at


# ------------------------------------------- an owner woken from a pause


class PausedAfterCreate(FaultyObjectStore):
    """A local store whose owner "pauses" (past the ttl) right after the
    next log object it creates landed, once `armed`: its writer's validity
    check gives a reason from then on, as an owner's does whose heartbeat
    grew too old while it was stopped. The commit of that object passed the
    check before; what waited for it to be durable goes on after the pause."""

    def __init__(self, root: Path) -> None:
        super().__init__(LocalObjectStore(root))
        self.armed = False
        self.paused = False

    def validity(self) -> str | None:
        return "woken from a pause longer than the ttl" if self.paused else None

    async def create(self, name: str, data: bytes) -> None:
        await super().create(name, data)
        if self.armed and name.startswith(LOG_PREFIX):
            self.armed, self.paused = False, True


async def pause_after(store: PausedAfterCreate, act: Callable[[], Awaitable[None]]) -> None:
    """Open an engine on ``store`` (its writer checks ``store.validity``),
    ``act()``, and wait until the pause stopped its writer (`SelfFenced`)
    and the engine serves as a standby (the delivery has ended)."""
    # A long heartbeat: the engine does not take the store back meanwhile.
    async with durable.Engine(store, ttl=600.0, heartbeat=100.0) as engine:
        writer = engine.queue.writer  # type: ignore[attr-defined]
        writer.set_validity(store.validity)
        stopped = asyncio.Event()
        writer.add_stop_callback(lambda _: stopped.set())
        await act()
        await asyncio.wait_for(stopped.wait(), LIMIT)
        await engine.wait_owner(False, timeout=LIMIT)
        assert isinstance(writer.failure, SelfFenced)


async def test_an_owner_woken_from_a_pause_starts_no_step(tmp_path: Path) -> None:
    """The commit of a step's result passed the validity check, its log
    object landed, then the process paused past the ttl: the next step of
    the run, which starts once that commit is durable, must not start (a
    standby may own the store and run it). Before, only commits checked the
    ownership: the step body ran in a process that no longer owned the store."""
    store = PausedAfterCreate(tmp_path / "store")
    ran: list[str] = []

    @durable.step(name="paused.first")
    async def first() -> None:
        ran.append("first")
        store.armed = True  # its result's commit lands, then the pause

    @durable.step(name="paused.second")
    async def second() -> None:
        ran.append("second")

    @durable.workflow(name="paused.two_steps")
    async def two_steps() -> None:
        await first()
        await second()

    async def start() -> None:
        await two_steps.start()

    await pause_after(store, start)
    assert ran == ["first"]


async def test_an_owner_woken_from_a_pause_starts_no_job(tmp_path: Path) -> None:
    """The same for a ``@job`` (a single step of the engine's runtime): the
    submit's commit landed, then the process paused past the ttl; the job
    claimed after the pause must not run its body."""
    store = PausedAfterCreate(tmp_path / "store")
    ran: list[int] = []

    @durable.job(name="paused.job")
    async def paused_job(x: int) -> int:
        ran.append(x)
        return x

    async def submit() -> None:
        store.armed = True  # the submit's log object lands, then the pause
        await paused_job.submit(7)

    await pause_after(store, submit)
    assert ran == []
