"""Key signals on a partitioned store (`Engine(url, partitions=8)`).

A key-only ``engine.signal(key, value)`` reaches the run waiting in
``durable.wait_for_signal(key)`` whatever partition the run is in, with the
buffering and timeouts of one store. Run ids and keys are chosen so the
key's home is, or is not, the run's partition; both orders (a wait then its
signal, a signal then its wait), the timeout (a later signal is buffered
for the next waiter), a second waiter, a child's result to its parent (a
key at home with the child, so nothing crosses), a client engine's signal,
and a restart with a registration on its way.
"""

from __future__ import annotations

import asyncio
import itertools
from typing import Any

import pytest
from decorator_helpers import LIMIT, Factory, wait_parked

import durable
from durable.cluster.manifest import partition_of
from durable.cluster.outbox import OUTBOX_PREFIX
from durable.decorators.children import child_key, child_run_id
from durable.decorators.partitioned import signal_home
from durable.engine import keys
from durable.engine.signals import SignalOutcome
from durable.store.clock import MockClock

P = 8


@durable.workflow
async def awaits(key: str, limit: float) -> Any:
    return await durable.wait_for_signal(key, timeout=limit)


@durable.workflow
async def parent_of_a_child() -> Any:
    return await awaits("never", 0.5)


def engine_on(make_objects: Factory, clock: MockClock, **options: Any) -> durable.Engine:
    """A worker (or client) engine on the test's store of `P` partitions."""
    return durable.Engine(make_objects(), clock=clock, partitions=P, **options)


def named(partition: int, stem: str) -> str:
    """The first ``{stem}-{i}`` whose partition (by hash) is ``partition``."""
    return next(
        f"{stem}-{i}" for i in itertools.count() if partition_of(f"{stem}-{i}", P) == partition
    )


#: A run's partition, and a key homed elsewhere / at home with it.
A, H = 2, 5
RUN = named(A, "run")
AWAY = named(H, "key")
AT_HOME = named(A, "key")


def signal_records(engine: durable.Engine, key: str) -> dict[bytes, bytes]:
    """The signal records of ``key``'s home partition."""
    kv = engine.for_key(key).queue.kv
    return dict(kv.scan(b"workflow/signal-", limit=100).entries)


def outbox_of(engine: durable.Engine, partition_of_id: str) -> list[bytes]:
    """The outbox records of the partition of ``partition_of_id``."""
    kv = engine.for_run(partition_of_id).queue.kv
    return [k for k, _ in kv.scan(OUTBOX_PREFIX, limit=100).entries]


async def result(handle: durable.WorkflowHandle) -> Any:
    return await asyncio.wait_for(handle.result(), LIMIT)


def test_keys_are_homed_by_hash_and_a_childs_key_with_the_child() -> None:
    assert signal_home(AWAY, P) == H
    assert signal_home(AT_HOME, P) == A
    child = child_run_id(RUN, 0, P)
    assert signal_home(child_key(child), P) == partition_of(child, P) == A


@pytest.mark.parametrize("key", [AWAY, AT_HOME], ids=["away", "at-home"])
async def test_a_wait_then_its_signal(make_objects: Factory, clock: MockClock, key: str) -> None:
    async with engine_on(make_objects, clock) as engine:
        handle = await awaits.options(run_id=RUN).start(key, 3600)
        await wait_parked(engine, RUN)
        assert await engine.signal(key, {"ok": 1}) is SignalOutcome.DELIVERED
        assert await result(handle) == {"ok": 1}
        assert signal_records(engine, key) == {}
        assert outbox_of(engine, key) == []
        assert outbox_of(engine, RUN) == []


@pytest.mark.parametrize("key", [AWAY, AT_HOME], ids=["away", "at-home"])
async def test_a_signal_then_its_wait(make_objects: Factory, clock: MockClock, key: str) -> None:
    async with engine_on(make_objects, clock) as engine:
        assert await engine.signal(key, "early") is SignalOutcome.BUFFERED
        assert signal_records(engine, key) != {}
        handle = await awaits.options(run_id=RUN).start(key, 3600)
        assert await result(handle) == "early"
        assert signal_records(engine, key) == {}


async def test_a_key_at_home_with_the_run_sends_no_message(
    make_objects: Factory, clock: MockClock
) -> None:
    """The waiter index is in the run's own partition, as on one store."""
    async with engine_on(make_objects, clock) as engine:
        handle = await awaits.options(run_id=RUN).start(AT_HOME, 3600)
        await wait_parked(engine, RUN)
        assert outbox_of(engine, RUN) == []
        wait = engine.for_run(RUN).queue.kv.get(keys.signal_wait_key(AT_HOME))
        pointer = engine.for_run(RUN).workflows.default.view.pointer(RUN)
        assert pointer is not None
        assert wait == pointer.job_id.encode()
        assert await engine.signal(AT_HOME, 1) is SignalOutcome.DELIVERED
        assert await result(handle) == 1


async def test_after_a_timeout_a_signal_is_buffered_for_the_next_waiter(
    make_objects: Factory, clock: MockClock
) -> None:
    async with engine_on(make_objects, clock) as engine:
        first = await awaits.options(run_id=RUN).start(AWAY, 60)
        await wait_parked(engine, RUN)
        clock.advance(60)
        engine.for_run(RUN).queue.promote_scheduled_now()
        assert await result(first) is None
        assert await engine.signal(AWAY, "late") is SignalOutcome.BUFFERED
        second = await awaits.options(run_id=named(A, "second")).start(AWAY, 60)
        assert await result(second) == "late"
        assert signal_records(engine, AWAY) == {}


async def test_a_second_waiter_in_another_partition_fails(
    make_objects: Factory, clock: MockClock
) -> None:
    async with engine_on(make_objects, clock) as engine:
        first = await awaits.options(run_id=RUN).start(AWAY, 3600)
        await wait_parked(engine, RUN)
        second_id = named(A, "second")
        second = await awaits.options(run_id=second_id).start(AWAY, 3600)
        with pytest.raises(durable.WorkflowError, match="a waiter is already registered"):
            await result(second)
        assert await engine.signal(AWAY, "for the first") is SignalOutcome.DELIVERED
        assert await result(first) == "for the first"


async def test_a_child_result_reaches_its_parent_in_its_partition(
    make_objects: Factory, clock: MockClock
) -> None:
    """A child's key is at home with the child (its parent's partition):
    its terminal signal and the parent's wait stay local."""
    async with engine_on(make_objects, clock) as engine:
        handle = await parent_of_a_child.options(run_id=RUN).start()
        await wait_parked(engine, RUN)
        child = child_run_id(RUN, 0, P)
        await wait_parked(engine, child)
        clock.advance(1)
        assert engine.for_run(child).queue.promote_scheduled_now() == 1
        assert await result(handle) is None
        assert outbox_of(engine, RUN) == []


async def test_a_client_engines_signal_reaches_a_run_in_another_partition(
    make_objects: Factory, clock: MockClock
) -> None:
    async with engine_on(make_objects, clock) as engine:
        handle = await awaits.options(run_id=RUN).start(AWAY, 3600)
        await wait_parked(engine, RUN)
        async with durable.Engine(make_objects(), clock=clock, role="client") as client:
            assert await client.signal(AWAY, "from a client") is SignalOutcome.SENT
        assert await result(handle) == "from a client"


async def test_a_wait_registered_before_a_restart_gets_its_signal_after(
    make_objects: Factory, clock: MockClock
) -> None:
    async with engine_on(make_objects, clock) as engine:
        handle = await awaits.options(run_id=RUN).start(AWAY, 3600)
        await wait_parked(engine, RUN)
    async with engine_on(make_objects, clock) as engine:
        assert await engine.signal(AWAY, "after") is SignalOutcome.DELIVERED
        assert await result(engine.handle(handle.run_id)) == "after"
