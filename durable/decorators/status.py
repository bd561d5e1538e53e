"""`WorkflowStatus`: where a workflow run is, in the decorators' terms.

``handle.status()`` answers with one flat, frozen value: the run's state as
a plain string enum, the workflow's name, how many positions its journal
holds, the step it is in, what it waits on and, once it failed, the
exception's type and message. (The engine's own `durable.engine.RunStatus`,
with its delivery number, is still there: ``engine.workflows.default
.status(run_id)``.)

The states, exactly:

- ``PENDING``: the run's current delivery is in the queue, not claimed:
  just started, scheduled to start later (``run_at``), woken from a wait
  and about to resume, or waiting out the backoff of a failed delivery.
- ``RUNNING``: a worker holds the claim on the run's current delivery: its
  workflow function is executing (claims belong to the process that runs
  them, so only that process sees a run as RUNNING; a process that opens
  the store after a crash finds the claim requeued: PENDING).
- ``WAITING``: the run's last delivery ended on durable waits (a sleep, a
  signal, a child run: `Waiting` says which) and holds no worker.
- ``SUCCEEDED``, ``FAILED``, ``CANCELLED``: terminated.

A cancellation asked of a run that has not ended yet shows as
``cancel_requested``, beside the state it is in.

What a status reads: the run's records in the store's memory (run record,
step pointer, its queue job, or the terminal record), the number of its
journal entries (counted with two bisections of the ordered state, not
scanned: no entry is read) and its invocation record (for the workflow's
name). An object is read only for a run whose arguments took more than
`durable.decorators.journal.INLINE_MAX` bytes (the invocation, in the run
memo; likewise the child's, for a run waiting on such a child) and for a
terminated run whose records were archived (`durable.decorators.archive`:
the archive).
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from durable.decorators.archive import Archive, invocation_key, load_invocation, read_archive
from durable.decorators.context import executing_step
from durable.decorators.index import decode_entry, find_entry
from durable.decorators.invocation import decode_invocation
from durable.decorators.journal import journal_prefix
from durable.decorators.outcome import failure_text
from durable.decorators.waiting import Waiting, waiting_now
from durable.decorators.waits import SIGNAL_NAME, SLEEP_NAME
from durable.engine.runs import RunTermination, TerminalStatus, Terminated
from durable.errors import CodecError
from durable.store.queue import JobStatus

if TYPE_CHECKING:
    from durable.decorators.base import EngineBase

__all__ = ["Active", "WorkflowState", "WorkflowStatus", "ended", "read_status", "where_active"]


class WorkflowState(enum.StrEnum):
    """The state of a workflow run; a `str` whose value is the lowercase name
    (``state == "running"`` holds; ``WorkflowState("failed")`` parses one).

    See `durable.decorators.status` for what each state means exactly.
    """

    #: Queued, not claimed: starting, resuming, or between delivery retries.
    PENDING = "pending"
    #: A worker holds the claim on the run's delivery: its code executes.
    RUNNING = "running"
    #: Parked on durable waits (`WorkflowStatus.waiting`), holding no worker.
    WAITING = "waiting"
    #: Terminated: the workflow returned.
    SUCCEEDED = "succeeded"
    #: Terminated: the workflow raised, or the engine failed the run.
    FAILED = "failed"
    #: Terminated: the run was cancelled.
    CANCELLED = "cancelled"

    @property
    def terminated(self) -> bool:
        """True for ``SUCCEEDED``, ``FAILED`` and ``CANCELLED``."""
        return self in _TERMINAL


_TERMINAL = frozenset({WorkflowState.SUCCEEDED, WorkflowState.FAILED, WorkflowState.CANCELLED})
_ENDS = {
    TerminalStatus.SUCCEEDED: WorkflowState.SUCCEEDED,
    TerminalStatus.FAILED: WorkflowState.FAILED,
    TerminalStatus.CANCELLED: WorkflowState.CANCELLED,
}


@dataclass(frozen=True, slots=True)
class WorkflowStatus:
    """Where a workflow run is (``await handle.status()``)."""

    #: The run's id.
    run_id: str
    #: The workflow's name (``module.qualname`` or its pinned name); None for a
    #: run the store holds no invocation of (started through `durable.engine`).
    workflow: str | None
    #: PENDING, RUNNING, WAITING, SUCCEEDED, FAILED or CANCELLED.
    state: WorkflowState
    #: The positions the run's journal holds: every step that has finished
    #: (an ``at_most_once`` step: that has begun), every durable wait and
    #: child run that has begun. Replays answer these without running them.
    steps: int
    #: What the run is in: RUNNING, the step whose body runs (of several
    #: gathered ones, the one called first; None between steps); WAITING, the
    #: wait (``"durable.sleep"``, ``"durable.wait_for_signal"``, or the child's
    #: workflow name); None otherwise.
    current_step: str | None = None
    #: WAITING: the signal key it waits on and when it wakes anyway.
    waiting: Waiting | None = None
    #: FAILED: the exception's type name (``"Error"`` for a failure the engine
    #: recorded without one, such as a delivery out of attempts).
    error_type: str | None = None
    #: FAILED: the exception's message; CANCELLED: the reason given, if any.
    error: str | None = None
    #: A cancellation was asked and the run has not terminated yet.
    cancel_requested: bool = False
    #: The run's attributes (``.options(attributes=)``, ``durable.set_attributes``).
    attributes: Mapping[str, str] = field(default_factory=dict)
    #: The workflow's version in the code that started the run
    #: (`durable.decorators.versions`); None if not recorded.
    version: str | None = None
    #: How many times the run has continued as new (``durable.continue_as_new``;
    #: 0: never): it is in incarnation ``incarnation + 1``.
    incarnation: int = 0

    @property
    def terminated(self) -> bool:
        """True once the run has ended (SUCCEEDED, FAILED or CANCELLED)."""
        return self.state.terminated


async def read_status(engine: EngineBase, run_id: str) -> WorkflowStatus | None:
    """The `WorkflowStatus` of run ``run_id``; None if the store does not know it."""
    engine = engine.for_run(run_id)
    runtime = engine.workflows.default
    if runtime.status(run_id) is None and runtime.pending_input(run_id) is None:
        await runtime.catch_up(run_id)  # a client's view may not have seen it yet
    kv = engine.queue.kv.internal()
    # Everything up to the first await reads one state of the store's memory.
    status = runtime.status(run_id)
    if status is None:
        pending = runtime.pending_input(run_id)  # a client's run not applied yet
        if pending is None:
            return None
        return WorkflowStatus(
            run_id, decode_invocation(pending, run_id).name, WorkflowState.PENDING, 0
        )
    steps = kv.count(journal_prefix(run_id))
    found = find_entry(kv, run_id)
    indexed = None if found is None else decode_entry(run_id, found[1])
    attributes = {} if indexed is None else dict(indexed.attributes)
    version = None if indexed is None else indexed.version
    incarnation = 0 if indexed is None else indexed.incarnation
    if isinstance(status.state, Terminated):
        state, error_type, error = ended(status.state.termination)
        archive: Archive | None = None
        if steps == 0 and kv.get(invocation_key(run_id)) is None:
            archive = await read_archive(engine, run_id)  # archived, or not ours
            steps = len(archive.journal)
        return WorkflowStatus(
            run_id,
            await _workflow_name(engine, run_id, archive),
            state,
            steps,
            error_type=error_type,
            error=error,
            attributes=attributes,
            version=version,
            incarnation=incarnation,
        )
    active = await where_active(engine, run_id)
    return WorkflowStatus(
        run_id,
        await _workflow_name(engine, run_id),
        active.state,
        steps,
        current_step=active.current_step,
        waiting=active.waiting,
        cancel_requested=active.cancel_requested,
        attributes=attributes,
        version=version,
        incarnation=incarnation,
    )


def ended(termination: RunTermination) -> tuple[WorkflowState, str | None, str | None]:
    """A terminated run's state, and its error's type and message: FAILED,
    the exception's; CANCELLED, the reason given (no type); else None."""
    state = _ENDS[termination.status]
    if state is WorkflowState.FAILED:
        error_type, error = failure_text(termination.error)
        return state, error_type, error
    if state is WorkflowState.CANCELLED:
        return state, None, termination.error
    return state, None, None


@dataclass(frozen=True, slots=True)
class Active:
    """Where a run that has not terminated is (`where_active`)."""

    #: PENDING, RUNNING or WAITING.
    state: WorkflowState
    #: As `WorkflowStatus.current_step`.
    current_step: str | None
    #: As `WorkflowStatus.waiting`.
    waiting: Waiting | None
    #: A cancellation was asked.
    cancel_requested: bool


async def where_active(engine: EngineBase, run_id: str) -> Active:
    """Where active run ``run_id`` of ``engine``'s partition is: its queue
    job claimed (RUNNING, in which step), parked on durable waits
    (WAITING, on what), or neither (PENDING); read from memory, but for a
    waited-on child's invocation over the inline limit."""
    runtime = engine.workflows.default
    record = runtime.view.run_record(run_id)
    pointer = runtime.view.pointer(run_id)
    job = None if pointer is None else engine.queue.job_record(pointer.job_id)
    cancel_requested = record is not None and record.cancel_requested
    if job is not None and job.status is JobStatus.CLAIMED:
        running = executing_step(engine, run_id)
        return Active(WorkflowState.RUNNING, running, None, cancel_requested)
    waiting = waiting_now(runtime, run_id)
    if waiting is None:
        return Active(WorkflowState.PENDING, None, None, cancel_requested)
    current = await _waits_on(engine, waiting)
    return Active(WorkflowState.WAITING, current, waiting, cancel_requested)


async def _workflow_name(
    engine: EngineBase, run_id: str, archive: Archive | None = None
) -> str | None:
    """The workflow name in run ``run_id``'s invocation record; None if it has none."""
    payload = await load_invocation(engine, run_id, archive)
    if payload is None:
        return None
    try:
        return decode_invocation(payload, run_id).name
    except CodecError:  # not a @workflow's invocation
        return None


async def _waits_on(engine: EngineBase, waiting: Waiting) -> str:
    """The name of what ``waiting`` waits for: a sleep, a signal, or a child
    run (its workflow's name)."""
    if waiting.signal_key is None:
        return SLEEP_NAME
    child = waiting.child_run_id
    if child is None:
        return SIGNAL_NAME
    return await _workflow_name(engine, child) or SIGNAL_NAME
