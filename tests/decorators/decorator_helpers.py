"""Helpers of the decorator tests: engines on the test's store, waiting on runs.

Waits use the store (a KV watch on the run's step pointer) or events set by
the workflows themselves; the wall clock only bounds them (`LIMIT`) so a
bug fails the test instead of hanging it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from durable.decorators.engine import Engine
from durable.decorators.journal import Journal
from durable.engine import keys
from durable.engine.runs import Running, RunStatus, Terminated
from durable.store.clock import MockClock
from durable.store.objects.base import ObjectStore

Factory = Callable[[], ObjectStore]

#: Wall-clock bound of every wait: only hit when something is broken.
LIMIT = 20.0


def make_engine(make_objects: Factory, clock: MockClock, **options: Any) -> Engine:
    """An engine on the test's store (enter it with ``async with``)."""
    return Engine(make_objects(), clock=clock, **options)


async def wait_parked(engine: Engine, run_id: str, step: int = 1) -> RunStatus:
    """Wait until run ``run_id`` is at step ``step`` or later and not running
    (suspended on a wait, or queued), or terminated; its status."""

    async def park() -> RunStatus:
        kv = engine.queue.kv
        key = keys.pointer_key(run_id)
        while True:
            status = engine.workflows.default.status(run_id)
            if status is not None and (
                isinstance(status.state, Terminated)
                or (status.current_step >= step and not isinstance(status.state, Running))
            ):
                return status
            fut = kv.watch(key)  # no await since the read: no write slips through
            try:
                await fut  # the next settlement of the run rewrites (or deletes) it
            finally:
                kv.unwatch(key, fut)

    return await asyncio.wait_for(park(), LIMIT)


def journal_of(engine: Engine, run_id: str) -> Journal:
    """The journal of run ``run_id`` as the store holds it now."""
    memo = engine.workflows.default.memos.run_memo(run_id)
    return Journal.load(engine.queue.kv.internal(), memo, run_id)


def journal_names(engine: Engine, run_id: str) -> list[tuple[int, str, str]]:
    """``(position, kind, name)`` of every journal entry of a run."""
    return [(p, e.kind, e.name) for p, e in journal_of(engine, run_id).entries()]


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
