"""Helpers of the queue-feature tests (rate limits, debounce): drive runs
that wait by deferral on a `MockClock`, one due time after another."""

from __future__ import annotations

import asyncio
from typing import Any

from decorator_helpers import LIMIT

from durable.decorators.engine import Engine
from durable.decorators.handles import WorkflowHandle
from durable.engine import Terminated, keys
from durable.store.clock import MockClock
from durable.store.queue.keys import history_key


def due_at(engine: Engine, run_id: str) -> int | None:
    """When run ``run_id``'s scheduled job is due (None: ended, or not scheduled)."""
    part = engine.for_run(run_id)
    pointer = part.workflows.default.view.pointer(run_id)
    job = part.queue.job_record(pointer.job_id) if pointer is not None else None
    return job.run_at if job is not None and job.status.name == "SCHEDULED" else None


def ended(engine: Engine, run_id: str) -> bool:
    """True once run ``run_id`` has terminated."""
    status = engine.for_run(run_id).workflows.default.status(run_id)
    return status is not None and isinstance(status.state, Terminated)


async def until_scheduled(engine: Engine, run_id: str) -> None:
    """Wait until run ``run_id`` has ended or its current job waits for a time
    (deferred, or parked on a durable wait): watches on its step pointer and
    on its job's attempt history, set before each look."""
    part = engine.for_run(run_id)
    kv, watchers = part.queue.kv, part.queue.writer.watchers

    async def look() -> None:
        while True:
            pointer = part.workflows.default.view.pointer(run_id)
            moved = kv.watch(keys.pointer_key(run_id))  # no await since the read
            history = history_key(pointer.job_id) if pointer is not None else None
            retried = watchers.watch(history) if history is not None else None
            try:
                if ended(engine, run_id) or due_at(engine, run_id) is not None:
                    return
                futs = [moved] if retried is None else [moved, retried]
                await asyncio.wait(futs, return_when=asyncio.FIRST_COMPLETED)
            finally:
                kv.unwatch(keys.pointer_key(run_id), moved)
                if history is not None and retried is not None:
                    watchers.unwatch(history, retried)

    await asyncio.wait_for(look(), LIMIT)


async def settled(engine: Engine, handles: list[WorkflowHandle[Any]]) -> None:
    """Wait until every run of ``handles`` has ended or waits on a deferral."""
    for h in handles:
        await until_scheduled(engine, h.run_id)


async def drive(engine: Engine, clock: MockClock, handles: list[WorkflowHandle[Any]]) -> None:
    """Move the clock from one due time to the next until every run has ended."""
    await settled(engine, handles)
    while not all(ended(engine, h.run_id) for h in handles):
        due = [t for h in handles if (t := due_at(engine, h.run_id)) is not None]
        assert due, "runs neither ended nor wait for a time"
        clock.set(max(min(due), clock.now_ms()))
        for part in engine.every_partition():
            part.queue.promote_scheduled_now()
        await settled(engine, handles)  # each run just woken ends, or waits again
