"""``engine.fork``: a new run that reuses the first steps of another.

``await engine.fork(run_id, from_step=n)`` starts a new run of the same
workflow with the same arguments whose journal starts with the entries of
positions ``0 .. n-1`` of run ``run_id``: those steps (and waits, and
child runs) answer from the journal, and the workflow runs again from
position ``n``. The copied entries are written in one commit before the
new run is submitted, so its first delivery sees all of them.

``n`` may be 0 up to the number of positions at the start of the source's
journal that are complete (a result or error, or a sleep's wake-up time);
an in-flight step or an unanswered wait cannot be copied.

The new run's invocation comes from the source run's queued delivery
(an active run) or from the invocation a fork records for its run, under
``workflow/invocations/{run_id}`` (so forks can be forked after they end).
The queue keeps no input of an ordinary terminated run, so forking one
raises `InvalidArgument` saying so.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from durable.decorators.invocation import decode_invocation
from durable.decorators.journal import SLEEP, Entry, Journal, encode_entry, entry_key
from durable.decorators.registry import REGISTRY
from durable.decorators.submit import submit_run
from durable.engine.runs import RESERVED_KV_PREFIX, validate_run_id
from durable.errors import InvalidArgument, UnknownWorkflow
from durable.store.log.batch import WriteBatch

if TYPE_CHECKING:
    from durable.decorators.engine import Engine
    from durable.decorators.handles import WorkflowHandle

__all__ = ["fork_run", "invocation_key"]


def invocation_key(run_id: str) -> bytes:
    """The KV key where a fork records its run's invocation."""
    return RESERVED_KV_PREFIX + b"invocations/" + run_id.encode()


async def _source_invocation(engine: Engine, run_id: str) -> bytes:
    runtime = engine.workflows.default
    view = runtime.view
    if view.run_record(run_id) is None and view.terminal_record(run_id) is None:
        raise InvalidArgument(f"cannot fork run {run_id!r}: no such run in this store")
    stored = engine.queue.kv.get(invocation_key(run_id))
    if stored is not None:
        return stored
    pointer = view.pointer(run_id)
    if pointer is not None:
        job = await engine.queue.view.get_job(pointer.job_id)
        if job is not None:
            return job.payload
    raise InvalidArgument(
        f"cannot fork run {run_id!r}: it has terminated and the store no longer holds its "
        "arguments (fork a run while it is active, or a run that is itself a fork)"
    )


def _copyable(journal: Journal, run_id: str, from_step: object) -> int:
    """``from_step``, checked against what the journal of ``run_id`` holds."""
    complete = 0
    while (entry := journal.get(complete)) is not None and (entry.resolved or entry.kind == SLEEP):
        complete += 1
    if (
        isinstance(from_step, bool)
        or not isinstance(from_step, int)
        or not (0 <= from_step <= complete)
    ):
        raise InvalidArgument(
            f"cannot fork run {run_id!r} from step {from_step!r}: from_step must be an int "
            f"from 0 to {complete} (the positions of its journal that are complete)"
        )
    return from_step


async def fork_run(
    engine: Engine, run_id: str, from_step: int, new_run_id: str | None = None
) -> WorkflowHandle[Any]:
    """Start a fork of run ``run_id`` from position ``from_step``; see the
    module docstring. `InvalidArgument` naming the run for an unknown run,
    a ``from_step`` out of range or a ``new_run_id`` already in use."""
    validate_run_id(run_id)
    payload = await _source_invocation(engine, run_id)
    runtime = engine.workflows.default
    source = Journal.load(engine.queue.kv.internal(), runtime.memos.run_memo(run_id), run_id)
    n = _copyable(source, run_id, from_step)
    invocation = decode_invocation(payload, run_id)
    definition = REGISTRY.get(invocation.name)
    if definition is None:
        raise UnknownWorkflow(run_id, invocation.name)
    new_id = validate_run_id(new_run_id) if new_run_id is not None else engine.queue.next_job_id()
    view = runtime.view
    if view.run_record(new_id) is not None or view.terminal_record(new_id) is not None:
        raise InvalidArgument(
            f"cannot fork run {run_id!r} as {new_id!r}: a run with that id exists; "
            "pass another new_run_id"
        )
    kv = engine.queue.kv.internal()
    batch = WriteBatch()
    for position in range(n):
        entry = source.get(position)
        assert entry is not None  # checked by _copyable
        if entry.ref:  # inline what the source offloaded to its run memo
            ok, err = await source.values(position, entry)
            entry = Entry(entry.name, entry.kind, ok, err, entry.time, entry.key, entry.suspended)
        kv.stage_put(batch, entry_key(new_id, position), encode_entry(entry))
    kv.stage_put(batch, invocation_key(new_id), payload)
    await kv.commit(batch)
    submitted = await submit_run(engine, definition, payload, run_id=new_id)
    return engine.handle(submitted)
