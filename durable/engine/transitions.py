"""The effects of a run's transitions, built as plain data (no I/O).

A step transition is one transaction: the ack (or dead-letter, or
exhausting nack) of step n commits together with either the enqueue of
step n+1 and the rewritten step pointer (`advance`), or the terminal
records and the notification job (`terminate`). These functions only build
the `SettlementEffects`; the queue commits them with the settlement, so a
failed settlement redelivers the step, which builds them again.
"""

from __future__ import annotations

from collections.abc import Mapping

from durable.engine import keys
from durable.engine.outcomes import After, Immediate, OnSignal, Trigger
from durable.engine.records import (
    GroupMembership,
    MemberRecord,
    RunRecord,
    StepPointer,
    TerminalRecord,
    encode_member_record,
    encode_run_outcome,
    encode_run_record,
    encode_step_pointer,
    encode_terminal_record,
)
from durable.engine.runs import (
    HEADER_RUN_ID,
    HEADER_SIGNAL_DELIVERED,
    HEADER_SIGNAL_WAIT,
    HEADER_STEP,
    HEADER_TERMINAL,
    RESERVED_HEADER_PREFIX,
    RunOutcome,
    RunTermination,
)
from durable.store.queue import EnqueueOptions, SettlementEffects

__all__ = [
    "advance",
    "first_step",
    "internal_effects",
    "step_headers",
    "terminate",
    "user_headers",
]


def internal_effects(
    internal: Mapping[bytes, bytes | None] | None, effects: SettlementEffects | None = None
) -> SettlementEffects:
    """``effects`` (new if None) plus the KV writes of ``internal`` (a None
    value deletes its key): the writes under the reserved prefix that a layer
    built on the runtime commits with one of its operations (not checked
    against the prefix: never user keys)."""
    fx = effects if effects is not None else SettlementEffects()
    for key, value in (internal or {}).items():
        if value is None:
            fx.kv_delete(key)
        else:
            fx.kv_put(key, value)
    return fx


def user_headers(headers: Mapping[str, str]) -> dict[str, str]:
    """``headers`` without the runtime's reserved ones."""
    return {k: v for k, v in headers.items() if not k.startswith(RESERVED_HEADER_PREFIX)}


def step_headers(run_id: str, step: int, headers: Mapping[str, str]) -> dict[str, str]:
    """The headers of a step job: the user's plus the run id and step number."""
    return {**user_headers(headers), HEADER_RUN_ID: run_id, HEADER_STEP: str(step)}


def first_step(
    queue: str,
    record: RunRecord,
    payload: bytes,
    job_id: str,
    *,
    priority: int | None,
    max_attempts: int | None,
    run_at_ms: int | None,
    effects: SettlementEffects | None,
) -> tuple[EnqueueOptions, SettlementEffects]:
    """The options of step 0's enqueue and the records that commit with it."""
    options = EnqueueOptions(
        id_override=job_id,
        dedup_key=keys.step_dedup(record.run_id, 0),
        priority=priority,
        max_attempts=max_attempts,
        run_at=run_at_ms,
        headers=step_headers(record.run_id, 0, record.headers),
    )
    fx = SettlementEffects()
    if effects is not None:
        fx.enqueues.extend(effects.enqueues)
        fx.kv_puts.update(effects.kv_puts)
        fx.kv_deletes.extend(effects.kv_deletes)
    fx.kv_put(keys.run_key(record.run_id), encode_run_record(record))
    fx.kv_put(keys.pointer_key(record.run_id), encode_step_pointer(StepPointer(0, job_id)))
    if record.member is not None:
        fx.kv_put(
            keys.member_key(record.member.group_id, record.member.key),
            encode_member_record(MemberRecord(record.run_id)),
        )
    return options, fx


def advance(
    effects: SettlementEffects,
    *,
    queue: str,
    run_id: str,
    step: int,
    payload: bytes,
    when: Trigger,
    headers: Mapping[str, str],
    job_id: str,
    priority: int,
    max_attempts: int,
    now_ms: int,
    buffered_signal: bytes | None = None,
    index_waiter: bool = True,
) -> SettlementEffects:
    """Add the enqueue of step ``step + 1`` and its pointer to ``effects``.

    For an `OnSignal` trigger (semantics 2.10) the registration rides the
    same effects: with ``buffered_signal`` (a buffered signal the caller
    read for the key) the next step is claimable at once, its payload is
    recorded as delivered and the buffer deleted; without, the next step is
    scheduled at the timeout and the key's waiter index names its job
    (unless not ``index_waiter``: the key's home is another partition,
    which the caller sends a register message).
    """
    nxt = step + 1
    hdrs = step_headers(run_id, nxt, headers)
    run_at: int | None = None
    if isinstance(when, After):
        run_at = now_ms + round(when.delay * 1000)
    elif isinstance(when, OnSignal) and buffered_signal is not None:
        hdrs[HEADER_SIGNAL_DELIVERED] = "1"
        effects.kv_put(keys.signal_delivered_key(run_id, nxt), buffered_signal)
        effects.kv_delete(keys.signal_buffer_key(when.correlation_key))
    elif isinstance(when, OnSignal):
        run_at = now_ms + round(when.timeout * 1000)
        hdrs[HEADER_SIGNAL_WAIT] = when.correlation_key
        if index_waiter:
            effects.kv_put(keys.signal_wait_key(when.correlation_key), job_id.encode())
    else:
        assert isinstance(when, Immediate)
    effects.enqueue(
        queue,
        payload,
        EnqueueOptions(
            id_override=job_id,
            dedup_key=keys.step_dedup(run_id, nxt),
            priority=priority,
            max_attempts=max_attempts,
            run_at=run_at if run_at is not None and run_at > now_ms else None,
            headers=hdrs,
        ),
    )
    effects.kv_put(keys.pointer_key(run_id), encode_step_pointer(StepPointer(nxt, job_id)))
    return effects


def terminate(
    effects: SettlementEffects,
    *,
    queue: str,
    termination: RunTermination,
    outcome: RunOutcome,
    step_job_id: str,
    input_sha256: bytes | None,
    notify: bool,
    priority: int | None,
    max_attempts: int | None,
    marker_key: bytes | None = None,
    record_outcome: bool = False,
    member: GroupMembership | None = None,
) -> SettlementEffects:
    """Add a run's termination at step job ``step_job_id`` to ``effects``:
    records out, terminal record in (with the outcome when
    ``record_outcome``), the terminal marker (memo retention), and the
    notification job when the hook observes the outcome."""
    run_id = outcome.run_id
    effects.kv_delete(keys.run_key(run_id))
    effects.kv_delete(keys.pointer_key(run_id))
    record = TerminalRecord(termination, input_sha256, outcome if record_outcome else None)
    effects.kv_put(keys.outcome_key(run_id), encode_terminal_record(record))
    if marker_key is not None:
        effects.kv_put(marker_key, b"")
    if member is not None:  # the group's member record learns how the run ended
        effects.kv_put(
            keys.member_key(member.group_id, member.key),
            encode_member_record(MemberRecord(run_id, termination)),
        )
    if notify:
        effects.enqueue(
            queue,
            encode_run_outcome(outcome),
            EnqueueOptions(
                dedup_key=keys.notification_dedup(run_id, step_job_id),
                priority=priority,
                max_attempts=max_attempts,
                headers={HEADER_RUN_ID: run_id, HEADER_TERMINAL: "1"},
            ),
        )
    return effects
