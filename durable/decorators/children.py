"""Child workflows: a ``@workflow`` called inside a workflow.

The call takes the next journal position, like a step. The child is a run
of its own, on its workflow's queue, with an id derived from the parent's
id and the position (`child_run_id`), and headers naming its parent and
position. The parent journals the child's start (so a crash, or a cancel
of the parent, finds the child) and then starts it; both happen in a task
created at call time, so the children gathered by one workflow all start
in the same delivery.

The parent then waits durably, like ``wait_for_signal``, on the child's key
(`child_key`). When the child terminates, the runtime's terminal hook
(`durable.decorators.terminal`) signals that key; a signal sent before the parent waits
is buffered, so the order does not matter. The delivery that the signal
resumes reads the child's outcome and journals it before the workflow
runs (`resolve_child`): the child's result (or its exception, or
`RunCancelled`) is what the call returns (raises), then and on every
replay.

Cancelling a run cancels its children (`cancel_tree`): they are found in
its journal.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Coroutine, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from durable.cluster.manifest import co_located_id, partition_of
from durable.decorators.archive import load_journal
from durable.decorators.context import RunContext
from durable.decorators.current import engine_or_none
from durable.decorators.invocation import encode_invocation
from durable.decorators.journal import CHILD, Entry
from durable.decorators.outcome import read_result
from durable.decorators.run_timeout import cancelled_error
from durable.decorators.submit import submit_run
from durable.decorators.suspend import Abort
from durable.engine.runs import MAX_RUN_ID_LEN, Terminated
from durable.errors import InputMismatch

if TYPE_CHECKING:
    from durable.decorators.base import EngineBase
    from durable.decorators.registry import WorkflowDefinition

__all__ = [
    "HEADER_PARENT",
    "HEADER_POSITION",
    "call_child",
    "cancel_children",
    "cancel_tree",
    "child_key",
    "child_run_id",
    "resolve_child",
]

#: Header of a child run: its parent's run id.
HEADER_PARENT = "durable.parent_run_id"
#: Header of a child run: its position in the parent's journal.
HEADER_POSITION = "durable.parent_position"
_CHILD = frozenset({CHILD})


def child_run_id(
    parent_run_id: str, position: int, partitions: int | None = None, incarnation: int = 0
) -> str:
    """The run id of the child started at ``position`` of ``parent_run_id``:
    ``{parent}-c{position}``, or a digest of both when that is too long. In
    the parent's ``incarnation`` n > 0 (it continued as new n times:
    `durable.decorators.continuation`), ``{parent}-i{n}c{position}``, so the
    children of each incarnation have ids of their own.

    On a partitioned store (``partitions``; by default the current engine's
    count, None when unpartitioned) the id is minted into the parent's
    partition (`durable.cluster.manifest.co_located_id`), so the child's
    terminal signal to its parent is one local commit."""
    if partitions is None:
        engine = engine_or_none()
        partitions = engine.partition_count if engine is not None else None
    tag = f"i{incarnation}" if incarnation else ""
    run_id = f"{parent_run_id}-{tag}c{position}"
    if len(run_id) > MAX_RUN_ID_LEN:
        where = f"{parent_run_id}/{position}" + (f"/{incarnation}" if incarnation else "")
        digest = hashlib.sha256(where.encode()).hexdigest()
        run_id = f"c-{digest[:60]}"
    if partitions is None:
        return run_id
    home = partition_of(parent_run_id, partitions)
    return co_located_id(run_id, home, partitions, max_len=MAX_RUN_ID_LEN)


def child_key(run_id: str) -> str:
    """The signal key the parent of child run ``run_id`` waits on."""
    return f"durable.child:{run_id}"


def call_child(
    run: RunContext,
    definition: WorkflowDefinition,
    args: Sequence[Any],
    kwargs: Mapping[str, Any],
) -> Coroutine[Any, Any, Any]:
    """Start workflow ``definition`` as a child of ``run`` (the next position)
    and return the awaitable of its result."""
    position = run.next_position()
    entry = run.entry_at(position, _CHILD, definition.name, f"workflow {definition.name}")
    child = child_run_id(run.run_id, position, incarnation=run.incarnation)
    payload = encode_invocation(run.codec, definition.name, args, kwargs)
    start: asyncio.Task[None] | None = None
    if entry is None:
        start = asyncio.ensure_future(_start(run, position, definition, payload, child))
    elif not entry.resolved and run.engine.for_run(child).workflows.default.status(child) is None:
        # Journaled, then the process died before the child was submitted.
        start = asyncio.ensure_future(_submit(run, position, definition, payload, child))
    if start is not None:
        run.starts.add(start)
        start.add_done_callback(run.starts.discard)
    return _await_child(run, position, child, start)


async def _start(
    run: RunContext, position: int, definition: WorkflowDefinition, payload: bytes, child: str
) -> None:
    entry = Entry(definition.name, CHILD, key=child, time=run.clock.now_ms())
    await run.record(position, entry)
    await _submit(run, position, definition, payload, child)


async def _submit(
    run: RunContext, position: int, definition: WorkflowDefinition, payload: bytes, child: str
) -> None:
    headers = {HEADER_PARENT: run.run_id, HEADER_POSITION: str(position)}
    try:
        await submit_run(run.engine, definition, payload, run_id=child, headers=headers)
    except InputMismatch:  # the child's id holds a run with other arguments
        raise
    except Exception as e:
        raise Abort(f"run {run.run_id!r}: child run {child!r} could not be started: {e}", e) from e


async def _await_child(
    run: RunContext, position: int, child: str, start: asyncio.Task[None] | None
) -> Any:
    task = run.track()
    try:
        if start is not None:
            await asyncio.shield(start)  # the start completes even if this wait ends
        while True:  # a child wait has no deadline: it parks until the delivery suspends
            entry = run.journal.get(position)
            assert entry is not None, "a child's start is journaled before it is awaited"
            if entry.resolved:
                return await run.replay(position, entry)
            pending = entry.replace(suspended=run.delivery.step_number)
            await run.park(position, None, key=child_key(child), pending=pending)
    finally:
        run.untrack(task)


async def resolve_child(run: RunContext, position: int, entry: Entry) -> Entry:
    """Journal the outcome of the child run at ``position``, whose termination
    resumed this delivery (the runner calls it before the workflow runs);
    the entry unchanged if the child has not terminated after all."""
    child = entry.key or ""
    runtime = run.engine.for_run(child).workflows.default
    status = runtime.status(child)
    if status is None or not isinstance(status.state, Terminated):
        return entry
    end = await runtime.wait(child)
    assert end is not None
    result = await read_result(run.codec, runtime, end, child)
    if result.ok is not None:
        return await run.record(position, entry.replace(ok=result.ok))
    err = result.err
    if err is None:  # cancelled
        cancelled = cancelled_error(child, result.reason)
        err = run.codec.dumps_error(cancelled, what=f"the exception of child run {child!r}")
    return await run.record(position, entry.replace(err=err))


async def cancel_tree(engine: EngineBase, run_id: str) -> bool:
    """Cancel run ``run_id`` and, through its journal, its children (theirs
    too); False if the run itself was unknown or had terminated."""
    workflows = engine.for_run(run_id).workflows
    cancelled = await workflows.runtime_of(run_id).cancel(run_id)
    await cancel_children(engine, run_id)
    return cancelled


async def cancel_children(engine: EngineBase, run_id: str) -> None:
    """Cancel every child run in ``run_id``'s journal (and theirs)."""
    journal = await load_journal(engine, run_id)
    for child in journal.children():
        await cancel_tree(engine, child)
