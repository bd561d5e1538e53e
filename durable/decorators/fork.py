"""``engine.fork``: a new run that reuses the first steps of another.

``await engine.fork(run_id, from_step=n)`` starts a new run of the same
workflow with the same arguments whose journal starts with the entries of
positions ``0 .. n-1`` of run ``run_id``: those steps (and waits, and
child runs) answer from the journal, and the workflow runs again from
position ``n``.

The source may be active or terminated: its invocation and journal are read
from the store (`durable.decorators.archive`). The copied entries commit in
the transaction that submits the new run, so a crash leaves either the
whole fork or nothing (values over the journal's inline limit are copied
into the new run's memo first). ``n`` may be 0 up to the number of
positions at the start of the source's journal that are complete (a result
or error, or a sleep's wake-up time); an in-flight step or an unanswered
wait cannot be copied.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from durable.decorators.archive import load_invocation, load_journal
from durable.decorators.invocation import decode_invocation
from durable.decorators.journal import SLEEP, Journal, encode_entry, entry_key, offload
from durable.decorators.registry import REGISTRY
from durable.decorators.submit import submit_run
from durable.engine.runs import validate_run_id
from durable.errors import InvalidArgument, RunNotFound, UnknownWorkflow

if TYPE_CHECKING:
    from durable.decorators.base import EngineBase
    from durable.decorators.handles import WorkflowHandle

__all__ = ["fork_run"]


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
    engine: EngineBase, run_id: str, from_step: int, new_run_id: str | None = None
) -> WorkflowHandle[Any]:
    """Start a fork of run ``run_id`` from position ``from_step``; see the
    module docstring. `RunNotFound` for an unknown run; `InvalidArgument`
    naming the run for a ``from_step`` out of range or a ``new_run_id``
    already in use."""
    validate_run_id(run_id)
    await engine.for_run(run_id).workflows.default.until_visible(run_id, None)
    payload = await load_invocation(engine, run_id)
    if payload is None:
        runtime = engine.for_run(run_id).workflows.default
        if runtime.status(run_id) is None:
            raise RunNotFound(run_id, "engine.fork()")
        raise InvalidArgument(
            f"cannot fork run {run_id!r}: the store holds no record of its invocation "
            "(it was started by a durable older than engine.fork)"
        )
    source = await load_journal(engine, run_id)
    n = _copyable(source, run_id, from_step)
    invocation = decode_invocation(payload, run_id)
    definition = REGISTRY.get(invocation.name)
    if definition is None:
        raise UnknownWorkflow(run_id, invocation.name)
    if new_run_id is not None:
        new_id = validate_run_id(new_run_id)
    else:  # minted into the source's partition (itself when unpartitioned)
        new_id = engine.co_located(engine.new_run_id(), run_id)
    if engine.for_run(new_id).workflows.default.status(new_id) is not None:
        raise InvalidArgument(
            f"cannot fork run {run_id!r} as {new_id!r}: a run with that id exists; "
            "pass another new_run_id"
        )
    memo = engine.for_run(new_id).workflows.default.memos.run_memo(new_id)
    records: dict[bytes, bytes] = {}
    for position in range(n):
        entry = source.get(position)
        assert entry is not None  # checked by _copyable
        if entry.ref:  # the source's memo holds the value: the fork's gets a copy
            ok, err = await source.values(position, entry)
            entry = await offload(memo, position, entry.replace(ok=ok, err=err, ref=False))
        records[entry_key(new_id, position)] = encode_entry(entry)
    submitted = await submit_run(engine, definition, payload, run_id=new_id, records=records)
    return engine.handle(submitted)
