"""Run control for incidents: ``engine.resume``, ``engine.forget`` and their bulk forms.

**Resume.** ``await engine.resume(run_id)`` continues a FAILED or CANCELLED
run under the same run id: like ``engine.fork`` onto the run itself, the
positions at the start of its journal that *succeeded* (a step's result, a
sleep's wake-up time, a signal's value, a child's result) are kept and
answer from the journal; the first position that failed or never finished,
and every position after it, are dropped, so the step that failed runs
again (with its full retry budget) and the workflow continues from there.
A failed child run at that position is not re-run by its parent (its id is
fixed): resume the child first. The resubmission is one commit: the new
first step, the dropped journal entries deleted, the old terminal record
and its retention marker deleted, and for an archived run its invocation,
kept journal entries and published values restored to the store's memory.
A run in any other state is refused with `WrongRunState`; from a client
engine the resubmission goes through the store's inbox like a start.

**Forget.** ``await engine.forget(run_id)`` deletes a terminated run and
everything it stored: its memo objects (archive, offloaded values,
outcome) first, then in one commit its terminal record, retention marker,
invocation record, journal, published values, progress mark, delivered
signals and index entry. Child runs are runs of their own (forget them by
filter). An active run is refused (`WrongRunState`). The owner forgets
directly; a client engine writes a forget request into the store's inbox
and returns once the owner's done record shows it applied (`forget_request`,
an error the owner recorded raised here), so it works against a live
deployment and waits while no owner runs.

**In bulk**, by the filters of ``engine.runs`` (`durable.decorators.listing`):
``cancel_runs``, ``resume_runs`` and ``forget_runs`` act on every matching
run the action applies to (active runs for cancel, failed or cancelled for
resume, terminated for forget) and return how many; ``dry_run=True`` only
counts them.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from durable.cluster.client import ClientRuntime
from durable.decorators.archive import (
    invocation_key,
    load_invocation,
    load_journal,
    read_archive,
    run_keys,
)
from durable.decorators.index import decode_entry, find_entry
from durable.decorators.journal import SLEEP, entry_key, journal_prefix
from durable.decorators.listing import RunFilter, list_runs
from durable.decorators.progress import QUEUE_ATTEMPTS, progress_key
from durable.decorators.publish import published_prefix
from durable.decorators.registry import DEFAULT_QUEUE, REGISTRY
from durable.decorators.status import WorkflowState
from durable.decorators.streams import stream_prefix
from durable.engine import keys
from durable.engine.runs import RunOptions, RunSpec, TerminalStatus, Terminated, validate_run_id
from durable.errors import (
    InvalidArgument,
    RequestFailed,
    RunNotFound,
    UnknownWorkflow,
    WrongRunState,
)
from durable.store.log.batch import WriteBatch

if TYPE_CHECKING:
    from durable.decorators.base import EngineBase
    from durable.decorators.handles import WorkflowHandle
    from durable.decorators.journal import Journal

__all__ = ["bulk", "forget_request", "forget_run", "resume_run"]

_RESUMABLE = frozenset({TerminalStatus.FAILED, TerminalStatus.CANCELLED})
_ACTS_ON = {
    "cancel": frozenset({WorkflowState.PENDING, WorkflowState.RUNNING, WorkflowState.WAITING}),
    "resume": frozenset({WorkflowState.FAILED, WorkflowState.CANCELLED}),
    "forget": frozenset({WorkflowState.SUCCEEDED, WorkflowState.FAILED, WorkflowState.CANCELLED}),
}


def _state_name(engine: EngineBase, run_id: str) -> str:
    status = engine.workflows.default.status(run_id)
    if status is None:
        return "unknown"
    if isinstance(status.state, Terminated):
        return status.state.termination.status.value
    return "active"


def kept_positions(journal: Journal) -> int:
    """How many positions at the start of ``journal`` a resume keeps: those
    that succeeded (see the module docstring)."""
    n = 0
    while (entry := journal.get(n)) is not None and (
        entry.kind == SLEEP or (entry.resolved and entry.err is None)
    ):
        n += 1
    return n


async def resume_run(engine: EngineBase, run_id: str) -> WorkflowHandle[Any]:
    """Resume failed or cancelled run ``run_id``; see the module docstring."""
    validate_run_id(run_id)
    part = engine.for_run(run_id)
    runtime = part.workflows.default
    await runtime.until_visible(run_id, None)
    status = runtime.status(run_id)
    if status is None:
        raise RunNotFound(run_id, "engine.resume()")
    if not isinstance(status.state, Terminated) or (
        status.state.termination.status not in _RESUMABLE
    ):
        raise WrongRunState(
            run_id, "engine.resume()", _state_name(part, run_id), "failed or cancelled"
        )
    kv = part.queue.kv.internal()
    found = find_entry(kv, run_id)
    queue = None
    if found is not None:
        queue = decode_entry(run_id, found[1]).queue or DEFAULT_QUEUE
    payload = await load_invocation(engine, run_id)
    if payload is None:
        raise InvalidArgument(
            f"cannot resume run {run_id!r}: the store holds no record of its invocation "
            "(it was not started by a @workflow of this durable)"
        )
    if queue is None:  # not indexed: its workflow must be known here
        from durable.decorators.invocation import decode_invocation

        name = decode_invocation(payload, run_id).name
        definition = REGISTRY.get(name)
        if definition is None:
            raise UnknownWorkflow(run_id, name)
        queue = definition.queue
    journal = await load_journal(engine, run_id)
    keep = kept_positions(journal)
    records: dict[bytes, bytes | None] = {}
    in_kv = dict(kv.snapshot(journal_prefix(run_id)))
    if in_kv:
        for key in in_kv:
            if int(key[len(journal_prefix(run_id)) :]) >= keep:
                records[key] = None
    else:  # archived: what is kept comes back to the store's memory
        archive = await read_archive(engine, run_id)
        for position, stored in archive.journal.items():
            if position < keep:
                records[entry_key(run_id, position)] = stored
        if archive.invocation is not None:
            records[invocation_key(run_id)] = archive.invocation
        for name, value in archive.published.items():
            records[published_prefix(run_id) + name.encode()] = value
        for suffix, value in archive.streams.items():
            records[stream_prefix(run_id) + suffix] = value
    records[progress_key(run_id)] = None
    # The old end goes in the same commit: its terminal record, and its
    # retention marker (whose sweep would otherwise clear the resumed run).
    records[keys.outcome_key(run_id)] = None
    at_ms = status.state.termination.terminated_at_ms
    if marker := part.workflows.runtime_for(queue, spawn=False).marker_key(run_id, at_ms):
        records[marker] = None
    outcome = await runtime.outcome(run_id)
    headers = dict(outcome.headers) if outcome is not None else {}
    options = RunOptions(headers=headers, max_attempts_per_step=QUEUE_ATTEMPTS)
    await part.workflows.runtime_for(queue).submit(
        RunSpec(payload, run_id=run_id, options=options), internal=records, once=False
    )
    return engine.handle(run_id)


async def forget_run(
    engine: EngineBase, run_id: str, internal: Mapping[bytes, bytes] | None = None
) -> bool:
    """Delete terminated run ``run_id`` and everything it stored (with the KV
    puts ``internal`` in the same commit); False if the store does not know
    it. See the module docstring."""
    validate_run_id(run_id)
    part = engine.for_run(run_id)
    runtime = part.workflows.default
    await runtime.until_visible(run_id, None)
    status = runtime.status(run_id)
    if status is None:
        return False
    if not isinstance(status.state, Terminated):
        raise WrongRunState(run_id, "engine.forget()", "active", "terminated")
    if isinstance(runtime, ClientRuntime):
        await forget_request(runtime, run_id, None)
        return True
    kv = part.queue.kv.internal()
    kv.check_writable()  # ReadOnlyStore from a store that is not open, before any delete
    await runtime.memos.clear_run(run_id)
    at_ms = status.state.termination.terminated_at_ms
    batch = WriteBatch()
    doomed = {keys.outcome_key(run_id), *run_keys(part, run_id)}
    doomed.update(k for k, _ in kv.snapshot(keys.signal_delivered_key(run_id, 0)[:-1]))
    found = find_entry(kv, run_id)
    queues = {DEFAULT_QUEUE}
    if found is not None:
        queues.add(decode_entry(run_id, found[1]).queue or DEFAULT_QUEUE)
    for queue in queues:
        marker = part.workflows.runtime_for(queue, spawn=False).marker_key(run_id, at_ms)
        if marker is not None:
            doomed.add(marker)
    for key in doomed:
        kv.stage_delete(batch, key)
    for key, value in (internal or {}).items():
        kv.stage_put(batch, key, value)
    await kv.commit(batch)
    return True


async def forget_request(runtime: ClientRuntime, run_id: str, timeout: float | None) -> bool:  # noqa: ASYNC109
    """Ask the owner to forget run ``run_id`` through the inbox and wait up
    to ``timeout`` seconds (None: no limit) for its done record: True once
    applied, False when the time passed first (the request stays queued for
    the owner). The error the owner recorded is raised here:
    `WrongRunState` (the run is active), `RunNotFound`, or `RequestFailed`."""
    posted = await runtime.post_forget(run_id)
    done = await runtime.wait_done(posted, timeout)
    if done is None:
        return False
    if done.error_type == "WrongRunState":
        raise WrongRunState(run_id, "engine.forget()", "active", "terminated")
    if done.error_type == "RunNotFound":
        raise RunNotFound(run_id, "engine.forget()")
    if done.error is not None:
        raise RequestFailed(f"forget of run {run_id!r}", done.error_type, done.error)
    return True


async def bulk(
    engine: EngineBase,
    partitions: list[EngineBase],
    action: str,
    f: RunFilter,
    *,
    dry_run: bool = False,
) -> int:
    """Apply ``action`` (``"cancel"``, ``"resume"`` or ``"forget"``) to every
    run ``f`` admits that it applies to; how many (``dry_run``: only count)."""
    acts_on = _ACTS_ON[action]
    states = acts_on if f.states is None else f.states & acts_on
    if not states:
        return 0
    f = RunFilter(states, f.workflows, f.started_after_ms, f.started_before_ms, f.attributes)
    count, cursor, refresh = 0, None, True
    while True:
        page = await list_runs(engine, partitions, f, limit=200, cursor=cursor, refresh=refresh)
        refresh = False
        client = bool(page.runs) and isinstance(
            engine.for_run(page.runs[0].run_id).workflows.default, ClientRuntime
        )
        if action == "forget" and not dry_run and client:
            # A client's forgets are inbox requests: send them all, then wait.
            done = await asyncio.gather(*(forget_run(engine, r.run_id) for r in page.runs))
            count += sum(done)
            if page.cursor is None:
                return count
            cursor = page.cursor
            continue
        for run in page.runs:
            if dry_run:
                count += 1
            elif action == "cancel":
                count += await engine.handle(run.run_id).cancel()
            elif action == "resume":
                await resume_run(engine, run.run_id)
                count += 1
            else:
                count += await forget_run(engine, run.run_id)
        if page.cursor is None:
            return count
        cursor = page.cursor
