"""What each inbox request does on the owner's runtime (`InboxApplier`).

`apply_request` performs a request with its done record's writes committed
in the transaction that performs the operation (the ``internal=`` of
`WorkflowRuntime.submit_member`, `signal`, `cancel`, `clear_signal`,
`GroupRetention.mark`, the effects of `Queue.requeue_dead_job`: a
requeue of a job that is no longer dead raises `InvalidState`, recorded in
its done record; and `WorkflowRuntime.forget_run`: a forget of a run that
is active raises `WrongRunState`, of an unknown run `RunNotFound`). A
submission the runtime answers without a write
(the run is active: a duplicate, or `InputMismatch`) commits the done record
alone, on the condition that the run record is still the one it checked, so
no later termination of the run can slip between the check and the record.

The messages partitions send each other about signal keys
(`durable.engine.signals`: register, unregister, deliver, reject, return)
are applied the same way, each in one commit with its done record (a
return, like a signal, buffers first and hands over after).

`follow_up` redoes, for a request found applied already, the part of the
operation that runs after its commit and that a crash may have cut short.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from durable.cluster.requests import (
    CancelRequest,
    ClearSignalRequest,
    ForgetRequest,
    GroupMarkRequest,
    Request,
    RequeueRequest,
    ScheduleRequest,
    SignalDeliverRequest,
    SignalRegisterRequest,
    SignalRejectRequest,
    SignalRequest,
    SignalReturnRequest,
    SignalUnregisterRequest,
    SubmitRequest,
)
from durable.engine import keys
from durable.engine.records import decode_run_record
from durable.engine.schedules import SCHEDULES_CHANGED_KEY, apply_change, schedule_key
from durable.engine.transitions import internal_effects
from durable.errors import InputMismatch, JobNotFound, ReadOnlyStore, RunNotFound
from durable.store.queue import Queue

if TYPE_CHECKING:
    from durable.engine.access import RunQueue
    from durable.engine.runtime import WorkflowRuntime

__all__ = ["apply_request", "change_schedule", "follow_up"]


async def apply_request(rt: WorkflowRuntime, request: Request, done: dict[bytes, bytes]) -> None:
    """Apply ``request`` on ``rt``, committing ``done`` with the operation."""
    if isinstance(request, SubmitRequest):
        await _submit(rt, request, done)
    elif isinstance(request, SignalRequest):
        await rt.signal(request.key, request.payload, internal=done)
    elif isinstance(request, CancelRequest):
        await rt.cancel(request.run_id, internal=done)
    elif isinstance(request, ClearSignalRequest):
        await rt.clear_signal(request.key, internal=done)
    elif isinstance(request, GroupMarkRequest):
        await rt.group_markers.mark(request.group_id, internal=done)
    elif isinstance(request, RequeueRequest):
        await _requeue(rt, request, done)
    elif isinstance(request, ForgetRequest):
        await _forget(rt, request, done)
    elif isinstance(request, ScheduleRequest):
        await _schedule(rt, request, done)
    elif isinstance(request, SignalRegisterRequest):
        await rt.signals.accept_waiter(request.key, request.waiter, internal=done)
    elif isinstance(request, SignalUnregisterRequest):
        await rt.signals.drop_waiter(request.key, request.waiter, internal=done)
    elif isinstance(request, SignalDeliverRequest):
        await rt.signals.take_delivery(request.key, request.waiter, request.payload, internal=done)
    elif isinstance(request, SignalRejectRequest):
        await rt.signals.take_rejection(request.key, request.waiter, internal=done)
    elif isinstance(request, SignalReturnRequest):
        await rt.signals.take_back(request.key, request.payload, internal=done)
    else:  # pragma: no cover - decode_request makes only the kinds above
        raise TypeError(f"unknown request {request!r}")


async def _submit(rt: WorkflowRuntime, request: SubmitRequest, done: dict[bytes, bytes]) -> None:
    """Submit the run; a duplicate or a clash writes only ``done`` (with the
    `InputMismatch` it raises), while the run record is still the one seen."""
    spec = request.spec
    key = keys.run_key(str(spec.run_id))
    while True:
        raw = rt.queue.kv.get(key)
        if raw is None:
            outcome = await rt.submit_member(
                spec, request.member, internal={**request.internal, **done}, once=request.once
            )
            if not outcome.newly_submitted:  # a step 0 of the id is still queued
                await rt.queue.commit_effects(internal_effects(done))
            return
        record = decode_run_record(raw, f"run record of {spec.run_id!r}")
        if not record.matches_input(spec.input):
            raise InputMismatch(record.run_id)  # recorded by the caller
        if await rt.queue.kv_compare_commit(key, raw, internal_effects(done)) is not None:
            return


async def _requeue(rt: WorkflowRuntime, request: RequeueRequest, done: dict[bytes, bytes]) -> None:
    """Requeue the dead job with ``done`` in its transaction; `JobNotFound`
    for an unknown job, `InvalidState` for one that is not dead."""
    queue = rt.queue
    if not isinstance(queue, Queue):  # pragma: no cover - the applier runs in the owner
        raise ReadOnlyStore(queue.writer.objects.url, "requeue a dead job")
    record = queue.job_record(request.job_id)
    if record is None:
        raise JobNotFound(request.job_id)
    await queue.requeue_dead_job(record, internal_effects(done))


async def _forget(rt: WorkflowRuntime, request: ForgetRequest, done: dict[bytes, bytes]) -> None:
    """Forget the run with ``done`` in the commit that deletes its records;
    `RunNotFound` for an unknown run, `WrongRunState` for an active one."""
    forget = rt.forget_run
    if forget is None:  # pragma: no cover - every engine's runtime has it
        raise ReadOnlyStore(rt.queue.writer.objects.url, "forget a run (no forget here)")
    if not await forget(request.run_id, done):
        raise RunNotFound(request.run_id, "forget")


async def _schedule(
    rt: WorkflowRuntime, request: ScheduleRequest, done: dict[bytes, bytes]
) -> None:
    """Change the schedule with ``done`` in the same commit (and the
    schedules' change marker, which wakes the owner's scheduler);
    `ScheduleNotFound` for a pause or resume of an absent schedule."""
    await change_schedule(
        rt.queue, request.schedule_id, request.op, request.record, request.at_ms, done
    )


async def change_schedule(
    queue: RunQueue,
    schedule_id: str,
    op: str,
    record: bytes | None,
    at_ms: int,
    internal: Mapping[bytes, bytes] | None = None,
) -> bool:
    """Apply schedule change ``op`` on the owner's ``queue`` in one commit
    with ``internal`` (`durable.engine.schedules.apply_change`); True if
    the schedule existed before. Retried while another commit changes the
    record between its read and this commit."""
    key = schedule_key(schedule_id)
    kv = queue.kv.internal()
    while True:
        raw = kv.get(key)
        new = apply_change(raw, op, record, at_ms, schedule_id)
        writes: dict[bytes, bytes | None] = {**(internal or {}), key: new}
        writes[SCHEDULES_CHANGED_KEY] = str(at_ms).encode()
        if await queue.kv_compare_commit(key, raw, internal_effects(writes)) is not None:
            return raw is not None


async def follow_up(rt: WorkflowRuntime, request: Request) -> None:
    """Redo what a crash after an applied request's commit may have cut short."""
    if isinstance(request, SignalRequest | SignalReturnRequest):
        await rt.signals.wake_buffered(request.key)
    elif isinstance(request, CancelRequest):
        raw = rt.queue.kv.get(keys.run_key(request.run_id))
        if raw is not None and decode_run_record(raw).cancel_requested:
            await rt.cancel(request.run_id)
