"""Submitting workflow runs (`submit_run`).

A run is submitted to the runtime of its workflow's queue with the encoded
invocation as its payload (`durable.decorators.invocation`); the same
commit records the invocation outside the queue
(`durable.decorators.archive`), so it outlives the run's jobs. A run id
names one run: starting an id that is running, or that has terminated,
with the same arguments returns that run (nothing runs again); with other
arguments it raises `InputMismatch`.

The same commit indexes the run (`durable.decorators.index`): its
workflow's name, version (`durable.decorators.versions`), start time and
``attributes``.

The queue never ends a run by its attempts (`QUEUE_ATTEMPTS`): a crash of
a progressing run costs it nothing, and a poison run is failed by the
runner (`durable.decorators.progress`).
"""

from __future__ import annotations

import datetime as _dt
from collections.abc import Mapping
from typing import TYPE_CHECKING

from durable import events
from durable.decorators.archive import invocation_record
from durable.decorators.attributes import start_attributes
from durable.decorators.context import journaled_here
from durable.decorators.index import IndexEntry, index_records
from durable.decorators.keyed_concurrency import co_locate, key_headers
from durable.decorators.moves import across_moves
from durable.decorators.progress import QUEUE_ATTEMPTS
from durable.decorators.ratelimit import home_id
from durable.decorators.registry import DEFAULT_QUEUE
from durable.decorators.run_limits import limits_of
from durable.decorators.run_timeout import deadline_headers
from durable.engine.records import input_digest
from durable.engine.runs import RunOptions, RunSpec, validate_run_id
from durable.errors import InputMismatch

if TYPE_CHECKING:
    from durable.decorators.base import EngineBase
    from durable.decorators.registry import WorkflowDefinition

__all__ = ["submit_run"]


async def submit_run(
    engine: EngineBase,
    definition: WorkflowDefinition,
    payload: bytes,
    *,
    run_id: str | None = None,
    priority: int | None = None,
    headers: Mapping[str, str] | None = None,
    run_at: int | _dt.datetime | None = None,
    records: Mapping[bytes, bytes] | None = None,
    attributes: Mapping[str, str] | None = None,
    timeout: float | None = None,  # noqa: ASYNC109 (the run's, not this call's)
    concurrency_key: str | None = None,
) -> str:
    """Submit a run of ``definition`` with the encoded invocation ``payload``;
    its run id (see the module docstring for a known id). ``records``: more
    reserved KV writes to commit with the submission (a fork's journal);
    ``attributes``: the run's attributes (`durable.decorators.attributes`);
    ``timeout``: seconds it has to end (default: its workflow's;
    `durable.decorators.run_timeout`); ``concurrency_key``: the key whose
    slots it takes (`durable.decorators.keyed_concurrency`). A run without
    an id of a workflow with a concurrency key or a rate limit gets one in
    the partition that counts them (the key's, else the workflow's home)."""
    await journaled_here()  # from a run: what it journaled is durable first
    if run_id is None and concurrency_key is not None:
        run_id = co_locate(engine, definition.name, concurrency_key)
    elif run_id is None and definition.rate_limit is not None:
        run_id = home_id(engine, definition.name)  # durable.decorators.ratelimit
    if run_id is None:
        run_id = engine.new_run_id()
    else:
        validate_run_id(run_id)
    checked = start_attributes(attributes or {}, f"run {run_id!r}")
    headers = dict(headers or {})
    if timeout is None:
        timeout = limits_of(definition.name).timeout
    if timeout is not None:  # the deadline is fixed now: a restart does not move it
        headers.update(deadline_headers(timeout, engine.clock.now_ms(), run_at))
    if concurrency_key is not None:
        headers.update(key_headers(definition.name, concurrency_key))
    if events.TRACING is not None:  # the caller's trace context rides the run's headers
        events.TRACING.inject(headers)
    options = RunOptions(
        headers=headers,
        priority=priority,
        max_attempts_per_step=QUEUE_ATTEMPTS,  # the runner bounds them (progress)
        run_at=run_at,
    )
    known: str = run_id

    async def submit(part: EngineBase, _: float | None) -> str:
        return await _submit(part, definition, payload, known, options, checked, records)

    # Idempotent (the id is fixed): again on the next mode after a move.
    return await across_moves(engine, run_id, None, submit)


async def _submit(
    engine: EngineBase,
    definition: WorkflowDefinition,
    payload: bytes,
    run_id: str,
    options: RunOptions,
    attributes: dict[str, str],
    records: Mapping[bytes, bytes] | None,
) -> str:
    """`submit_run` on the mode of the run's store now (``engine``: its partition)."""
    runtime = engine.workflows.runtime_for(definition.queue)
    view = runtime.view
    terminal = view.terminal_record(run_id) if view.run_record(run_id) is None else None
    if terminal is not None:
        digest = terminal.input_sha256
        if digest is not None and digest != input_digest(payload):
            raise InputMismatch(run_id)
        return run_id
    internal = await invocation_record(runtime.memos, run_id, payload)
    internal.update(records or {})
    queue = None if definition.queue == DEFAULT_QUEUE else definition.queue
    entry = IndexEntry(
        run_id,
        definition.name,
        engine.clock.now_ms(),
        attributes,
        queue=queue,
        version=definition.version,
    )
    internal.update(index_records(entry))
    outcome = await runtime.submit(
        RunSpec(payload, run_id=run_id, options=options), internal=internal, once=True
    )
    new = outcome.newly_submitted
    events.emit("submit", run_id=run_id, workflow=definition.name, queue=definition.queue, new=new)
    return outcome.run_id
