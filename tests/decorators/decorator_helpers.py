"""Helpers of the decorator tests: engines on the test's store, waiting on runs.

Waits use the store (`WorkflowHandle.waiting`, a KV watch on the run's step
pointer) or events set by the workflows themselves; the wall clock only
bounds them (`LIMIT`) so a bug fails the test instead of hanging it.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable
from typing import Any

from durable.cluster.applier import InboxApplier
from durable.decorators.archive import invocation_key, load_journal
from durable.decorators.engine import Engine
from durable.decorators.journal import Journal
from durable.decorators.partitioned import PartitionEngine
from durable.decorators.progress import DEFERRED, MAX_DEFERRAL
from durable.decorators.session import StoreSession
from durable.decorators.status import WorkflowStatus
from durable.engine import keys
from durable.store.clock import MockClock
from durable.store.objects.base import ObjectStore
from durable.store.queue.keys import history_key

Factory = Callable[[], ObjectStore]

#: Wall-clock bound of every wait: only hit when something is broken.
LIMIT = 20.0


#: ``DURABLE_TEST_PARTITIONS=8`` runs every `make_engine` engine on a store of 8 partitions.
PARTITIONS = (
    int(os.environ["DURABLE_TEST_PARTITIONS"])
    if os.environ.get("DURABLE_TEST_PARTITIONS")
    else None
)


def make_engine(make_objects: Factory, clock: MockClock, **options: Any) -> Engine:
    """An engine on the test's store (enter it with ``async with``); on a
    partitioned store when ``DURABLE_TEST_PARTITIONS`` is set."""
    if PARTITIONS is not None:
        options.setdefault("partitions", PARTITIONS)
    return Engine(make_objects(), clock=clock, **options)


async def wait_parked(engine: Engine, run_id: str, step: int = 1) -> WorkflowStatus:
    """Wait until run ``run_id`` exists and waits durably at step ``step`` or
    later (`WorkflowHandle.waiting`), or has terminated; its status."""

    async def park() -> WorkflowStatus:
        handle = engine.handle(run_id)
        await wait_started(engine, run_id)
        waiting = await handle.waiting()
        while waiting is not None and waiting.step < step:
            waiting = await handle.waiting(after=waiting)
        status = await handle.status()
        assert status is not None
        return status

    return await asyncio.wait_for(park(), LIMIT)


async def wait_started(engine: Engine, run_id: str) -> None:
    """Wait until the store knows run ``run_id`` (a child run starts in its
    parent's delivery): a KV watch on its step pointer, which its submission
    writes."""
    engine = engine.for_run(run_id)
    kv = engine.queue.kv
    key = keys.pointer_key(run_id)
    while engine.workflows.default.status(run_id) is None:
        fut = kv.watch(key)  # no await since the read: no write slips through
        try:
            await fut
        finally:
            kv.unwatch(key, fut)


async def deferrals(engine: Engine, run_id: str, count: int) -> None:
    """Wait until the delivery job of run ``run_id`` was deferred ``count``
    times (its attempt history says so): a watch on the history key."""
    engine = engine.for_run(run_id)

    async def seen() -> None:
        watchers = engine.queue.writer.watchers
        while True:
            pointer = engine.workflows.default.view.pointer(run_id)
            assert pointer is not None
            history = engine.queue.attempt_history(pointer.job_id)
            if sum((e.error or "").startswith(DEFERRED) for e in history) >= count:
                return
            key = history_key(pointer.job_id)
            fut = watchers.watch(key)  # no await since the read
            try:
                await fut
            finally:
                watchers.unwatch(key, fut)

    await asyncio.wait_for(seen(), LIMIT)


async def after_deferral(engine: Engine, run_id: str, count: int) -> None:
    """Wait for the ``count``-th deferral of run ``run_id``, then let its time pass."""
    await deferrals(engine, run_id, count)
    clock = engine.clock
    assert isinstance(clock, MockClock)
    clock.advance(MAX_DEFERRAL)
    engine.for_run(run_id).queue.promote_scheduled_now()


def promote_due(engine: Engine) -> int:
    """Promote the due scheduled jobs of every partition now (the scheduler
    would at its next tick); how many."""
    return sum(part.queue.promote_scheduled_now() for part in engine.every_partition())


async def abort_workflows(engine: Engine) -> None:
    """Stop every workflow worker at once, as a killed process would (the
    deliveries in flight keep their claims), in every partition."""
    await asyncio.gather(*(part.workflows.abort() for part in engine.every_partition()))


def kv_count(engine: Engine, prefix: bytes) -> int:
    """The KV keys under ``prefix`` in every partition."""
    return sum(part.queue.kv.count(prefix) for part in engine.every_partition())


async def sweep_memos(engine: Engine) -> int:
    """Sweep the run memos past their retention in every partition; how many went."""
    return sum([await part.workflows.default.sweep_memos() for part in engine.every_partition()])


def applier_of(engine: Engine, run_id: str) -> InboxApplier | None:
    """The inbox applier of the store (the partition) holding run ``run_id``,
    while ``engine`` owns it."""
    part = engine.for_run(run_id)
    session = part.store if isinstance(part, PartitionEngine) else engine._session
    return session._applier if isinstance(session, StoreSession) else None


def signal_records(engine: Engine) -> list[tuple[bytes, bytes]]:
    """The durable signal records (buffered values, waiter indexes) left in
    every partition (at most 10 per partition)."""
    return [
        entry
        for part in engine.every_partition()
        for entry in part.queue.kv.scan(b"workflow/signal-", limit=10).entries
    ]


async def journal_of(engine: Engine, run_id: str) -> Journal:
    """The journal of run ``run_id`` as the store holds it now (from its
    archive once the run has terminated and been archived)."""
    return await load_journal(engine, run_id)


async def journal_names(engine: Engine, run_id: str) -> list[tuple[int, str, str]]:
    """``(position, kind, name)`` of every journal entry of a run."""
    return [(p, e.kind, e.name) for p, e in (await journal_of(engine, run_id)).entries()]


async def archived(engine: Engine, run_id: str) -> None:
    """Wait until the terminal hook has archived run ``run_id`` (its
    invocation record leaves the KV in that commit)."""

    async def gone() -> None:
        kv = engine.for_run(run_id).queue.kv.internal()
        key = invocation_key(run_id)
        while kv.get(key) is not None:
            fut = kv.watch(key)  # no await since the read
            try:
                await fut
            finally:
                kv.unwatch(key, fut)

    await asyncio.wait_for(gone(), LIMIT)


async def result(handle: Any) -> Any:
    """``handle.result()``, bounded by `LIMIT` seconds of wall time."""
    return await asyncio.wait_for(handle.result(), LIMIT)


def failure_type(error: BaseException) -> str:
    """The type name of a workflow's exception: its own, or the one a
    `WorkflowFailed` stands for when it could not be rebuilt."""
    type_name = getattr(error, "type_name", None)
    if isinstance(type_name, str):
        return type_name.rpartition(".")[2]
    return type(error).__name__
