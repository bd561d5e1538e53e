"""Helpers of the queue-feature tests (rate limits, debounce): drive runs
that wait by deferral on a `MockClock`, one due time after another."""

from __future__ import annotations

import asyncio
from typing import Any

from decorator_helpers import LIMIT, deferrals

from durable.decorators.engine import Engine
from durable.decorators.handles import WorkflowHandle
from durable.decorators.progress import DEFERRED
from durable.engine import Terminated
from durable.store.clock import MockClock


def deferred(engine: Engine, run_id: str) -> int:
    """How many times run ``run_id``'s current job was deferred (0 once it ended)."""
    part = engine.for_run(run_id)
    pointer = part.workflows.default.view.pointer(run_id)
    if pointer is None:
        return 0
    history = part.queue.attempt_history(pointer.job_id)
    return sum((e.error or "").startswith(DEFERRED) for e in history)


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


async def ends_or_defers(engine: Engine, run_id: str, seen: int) -> None:
    """Wait until run ``run_id`` ends, or is deferred for the ``seen + 1``-th time."""
    runtime = engine.for_run(run_id).workflows.default
    end = asyncio.ensure_future(runtime.wait(run_id))
    defer = asyncio.ensure_future(deferrals(engine, run_id, seen + 1))
    try:
        await asyncio.wait_for(
            asyncio.wait([end, defer], return_when=asyncio.FIRST_COMPLETED), LIMIT
        )
    finally:
        for f in (end, defer):
            f.cancel()
        await asyncio.gather(end, defer, return_exceptions=True)


async def settled(engine: Engine, handles: list[WorkflowHandle[Any]]) -> None:
    """Wait until every run of ``handles`` has ended or waits on a deferral."""
    for h in handles:
        while not ended(engine, h.run_id) and due_at(engine, h.run_id) is None:
            await ends_or_defers(engine, h.run_id, deferred(engine, h.run_id))


async def drive(engine: Engine, clock: MockClock, handles: list[WorkflowHandle[Any]]) -> None:
    """Move the clock from one due time to the next until every run has ended."""
    await settled(engine, handles)
    while not all(ended(engine, h.run_id) for h in handles):
        due = [t for h in handles if (t := due_at(engine, h.run_id)) is not None]
        assert due, "runs neither ended nor wait for a time"
        clock.set(max(min(due), clock.now_ms()))
        for part in engine.every_partition():
            part.queue.promote_scheduled_now()
        # Wait for each run just woken to end or be deferred again.
        woken = [(h, deferred(engine, h.run_id)) for h in handles if not due_at(engine, h.run_id)]
        for h, seen in woken:
            if not ended(engine, h.run_id):
                await ends_or_defers(engine, h.run_id, seen)
        await settled(engine, handles)
