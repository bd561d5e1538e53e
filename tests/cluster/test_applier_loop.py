"""The applier's loop: it applies requests as they arrive, `wake` starts a
pass at once, it stops by itself when the store's writer stops, and its
pacing (pure arithmetic, tested without time) backs off when idle."""

from __future__ import annotations

import asyncio
from pathlib import Path

from cluster_helpers import KEY, QUEUE, Factory, Opener

from durable.cluster.applier import (
    LOCAL_PACING,
    OBJECT_STORE_PACING,
    InboxPacing,
    _error_delay,
    default_pacing,
)
from durable.cluster.inbox import InboxWriter
from durable.engine import RunSpec
from durable.engine import keys as engine_keys
from durable.store.clock import MockClock
from durable.store.objects import LocalObjectStore, MemoryObjectStore
from durable.store.objects.base import ObjectStore
from durable.store.pacing import Pacing
from durable.testing import FaultyObjectStore, capture_logs


async def test_the_running_applier_applies_requests_as_they_arrive(
    make_objects: Factory, clock: MockClock, owner_of: Opener
) -> None:
    owner = await owner_of(make_objects())
    kv = owner.queue.kv
    w = InboxWriter(make_objects(), clock)
    owner.applier.start()
    assert owner.applier.running
    started = kv.watch(engine_keys.run_key("r1"))
    assert await w.submit(QUEUE, RunSpec(b"in", run_id="r1"))
    await asyncio.wait_for(started, 30)
    buffered = kv.watch(engine_keys.signal_buffer_key(KEY))
    await w.signal(QUEUE, KEY, b"later")
    await asyncio.wait_for(buffered, 30)
    await owner.applier.stop()
    assert not owner.applier.running
    assert await make_objects().list("inbox/") == []


class Listings(FaultyObjectStore):
    """Sets `listed` when a LIST of the inbox has answered."""

    def __init__(self, inner: ObjectStore) -> None:
        super().__init__(inner)
        self.listed = asyncio.Event()

    async def list(self, prefix: str) -> list[str]:
        names = await super().list(prefix)
        self.listed.set()
        return names


async def test_wake_starts_a_pass_at_once(
    make_objects: Factory, clock: MockClock, owner_of: Opener
) -> None:
    store = Listings(make_objects())
    owner = await owner_of(make_objects(), applier_store=store)
    owner.applier.pacing = InboxPacing(busy=600.0, idle=600.0)  # only a wake brings a pass
    owner.applier.start()
    await asyncio.wait_for(store.listed.wait(), 30)  # the first pass saw an empty inbox
    started = owner.queue.kv.watch(engine_keys.run_key("r1"))
    assert await InboxWriter(make_objects(), clock).submit(QUEUE, RunSpec(b"in", run_id="r1"))
    owner.applier.wake()
    await asyncio.wait_for(started, 5)  # not ten minutes
    await owner.applier.stop()


async def test_the_loop_ends_when_the_stores_writer_stops(
    make_objects: Factory, clock: MockClock, owner_of: Opener
) -> None:
    owner = await owner_of(make_objects())
    await InboxWriter(make_objects(), clock).signal(QUEUE, KEY, b"x")
    await owner.queue.close()
    with capture_logs() as logs:
        owner.applier.start()
        await asyncio.wait_for(owner.applier.join(), 30)
    assert not owner.applier.running
    assert any(e["event"] == "inbox applier stops: the store's writer stopped" for e in logs)
    assert len(await make_objects().list("inbox/")) == 1  # left for the next owner


def test_the_default_pacing_follows_the_store(tmp_path: Path) -> None:
    assert default_pacing(LocalObjectStore(tmp_path)) is LOCAL_PACING
    assert default_pacing(MemoryObjectStore()) is LOCAL_PACING
    # A wrapper without latency (here, or the benchmark's counting store) is
    # as cheap to poll as the directory it wraps: it used to get the object
    # stores' 0.2 s pace, so a client's one-step run took ~200 ms, not ~20.
    assert default_pacing(FaultyObjectStore(LocalObjectStore(tmp_path))) is LOCAL_PACING
    remote = FaultyObjectStore(MemoryObjectStore(), latency=0.02)
    assert default_pacing(remote) is OBJECT_STORE_PACING


def test_the_pacing_backs_off_when_idle_and_returns_to_busy() -> None:
    pacing = OBJECT_STORE_PACING
    waits, interval = [], pacing.busy
    for _ in range(7):
        interval = pacing.next_interval(interval, found=False)
        waits.append(interval)
    assert waits == [0.4, 0.8, 1.6, 3.2, 5.0, 5.0, 5.0]
    assert pacing.next_interval(5.0, found=True) == 0.2
    local = LOCAL_PACING
    assert local.next_interval(local.busy, found=False, quiet_for=local.linger / 2) == local.busy
    assert local.next_interval(local.busy, found=False) == 2 * local.busy


async def test_an_idle_applier_backs_off_to_20_passes_a_second(
    make_objects: Factory, clock: MockClock, owner_of: Opener
) -> None:
    """Issue 14 point 3: listing a local inbox every 2 ms for ever cost
    14-20% of a core in an idle owner; once quiet for the linger, it lists
    every 50 ms, and a request brings back the busy pace."""
    store = Listings(make_objects())  # no latency: local pacing
    owner = await owner_of(make_objects(), applier_store=store)
    assert owner.applier.pacing is LOCAL_PACING
    owner.applier.start()
    await asyncio.sleep(LOCAL_PACING.linger + 0.2)
    lists = store.calls["list"]
    await asyncio.sleep(0.5)
    lists = store.calls["list"] - lists
    assert 3 <= lists <= 15  # 0.5 s / 50 ms = 10 (at 2 ms: 250)
    started = owner.queue.kv.watch(engine_keys.run_key("r1"))
    assert await InboxWriter(make_objects(), clock).submit(QUEUE, RunSpec(b"in", run_id="r1"))
    await asyncio.wait_for(started, 30)  # noticed at the next pass, within 50 ms
    await owner.applier.stop()


def test_failed_passes_back_off_from_50_ms_to_5_s() -> None:
    waits = [_error_delay(LOCAL_PACING, n) for n in (1, 2, 3, 10, 10_000)]
    assert waits == [0.05, 0.1, 0.2, 5.0, 5.0]
    assert _error_delay(Pacing(busy=8.0, idle=9.0), 1) == 8.0  # never below busy
