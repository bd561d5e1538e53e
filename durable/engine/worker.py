"""The runtime's queue worker: runs each claimed step and settles its outcome.

For a step job (semantics 2.7): read the run record (a cancellation
request settles the run as cancelled without running the step), call the
runner, then settle by this precedence:

| runner result | settlement | run |
|---|---|---|
| `Cancel(reason)`, even if cancelled from outside | ack + terminate | cancelled; effects kept |
| anything, when cancelled from outside | ack + terminate | cancelled; effects discarded |
| `Continue` | ack + enqueue the next step | active; effects applied |
| `Succeed` / `Fail` | ack + terminate | succeeded / failed; effects applied |
| permanent `StepError` | dead-letter + terminate | failed; effects discarded |
| transient `StepError`, last attempt | exhausting nack + terminate | failed; effects discarded |
| transient `StepError`, attempts left | nack: retry with backoff | active; effects discarded |

A transient `StepError` with ``retry_after`` is retried that many seconds
later instead of after the queue's backoff.

Before a termination it performs, the worker writes the run result record
to the run memo. A notification job (terminal header) is handed to the
terminal hook.

Signals (`durable.engine.signals`): a step that waited for one gets it as
``Step.signal`` at its claim; a ``continue_on_signal`` registers its wait
(or consumes a buffered signal) in its settlement, and a second waiter on a
key fails its run like a permanent error.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from durable import events
from durable._logging import get_logger
from durable.engine.delivery import KvReadHandle, Step
from durable.engine.effects import EffectsHandle, TerminalEffects
from durable.engine.outcomes import (
    Cancel,
    Continue,
    Fail,
    OnSignal,
    StepError,
    StepErrorKind,
    StepOutcome,
    Succeed,
)
from durable.engine.records import (
    RunRecord,
    RunResultRecord,
    decode_run_outcome,
    encode_run_outcome,
    encode_run_result,
)
from durable.engine.replay import ReplayRecord
from durable.engine.runs import (
    HEADER_RUN_ID,
    HEADER_STEP,
    HEADER_TERMINAL,
    RunOutcome,
    RunTermination,
    TerminalStatus,
    validate_run_id,
)
from durable.engine.signals import Registration, signal_cleanup_keys
from durable.engine.transitions import advance, internal_effects, user_headers
from durable.errors import DurableError, InconsistentRunState, SignalWaiterExists
from durable.store.queue import (
    Claim,
    FailWith,
    JobRecord,
    LeaseHandle,
    PermanentFailure,
    SettlementEffects,
)

if TYPE_CHECKING:
    from durable.engine.runtime import WorkflowRuntime

__all__ = ["INLINE_OUTCOME_MAX", "StepWorker"]

#: Outcomes up to this many encoded bytes are kept in the terminal record
#: (no object write of their own); larger ones go to the run memo.
INLINE_OUTCOME_MAX = 4096

log = get_logger("durable.engine")


class _Termination:
    """How a run ends, before it is turned into effects."""

    __slots__ = ("error", "kind", "result", "status")

    def __init__(
        self,
        status: TerminalStatus,
        *,
        result: bytes | None = None,
        error: str | None = None,
        kind: StepErrorKind | None = None,
    ) -> None:
        self.status = status
        self.result = result
        self.error = error
        self.kind = kind


class StepWorker:
    """Processes the jobs of a runtime's queue (a `durable.store.queue.Worker`)."""

    def __init__(self, runtime: WorkflowRuntime) -> None:
        self.rt = runtime

    async def process(self, job: Claim, lease: LeaseHandle) -> SettlementEffects:
        """Run one claimed job of the runtime's queue; see the module docstring."""
        rec = job.record
        if rec.headers.get(HEADER_TERMINAL) == "1":
            return await self._notify(rec)
        run_id, step = self._parse(rec)
        record = self.rt.view.run_record(run_id)
        if record is None:
            raise PermanentFailure(
                str(InconsistentRunState(run_id, step, "its run record is gone"))
            )
        if record.cancel_requested:
            return await self._terminate(rec, record, step, _Termination(TerminalStatus.CANCELLED))
        # After the cancel check, so a cancelled run consumes no buffered signal.
        try:
            signal = await self.rt.signals.resolve(rec, run_id, step)
        except SignalWaiterExists as e:  # rejected by the key's home partition
            end = _Termination(TerminalStatus.FAILED, error=str(e), kind=StepErrorKind.PERMANENT)
            fx = await self._terminate(rec, record, step, end)
            raise PermanentFailure(str(e), effects=fx) from None
        delivery = Step(
            run_id=run_id,
            step_number=step,
            payload=rec.payload,
            headers=user_headers(rec.headers),
            job_id=rec.id,
            attempts=rec.attempts,
            max_attempts=max(rec.max_attempts, 1),  # the queue reads 0 as 1
            # The step's own token: it fires with the claim's (an external
            # cancel), but the runner firing it cancels only its own work.
            cancel_token=job.cancel_token.child(),
            lease=lease,
            memo=self.rt.memos.step_memo(run_id, step),
            run_memo=self.rt.memos.run_memo(run_id),
            effects=EffectsHandle(),
            kv=KvReadHandle(self.rt.queue.kv.get),
            signal=signal,
            fresh=job.fresh,
        )
        error: StepError | None = None
        replay = self.rt.options.step_output_replay
        stored = await self.rt.replays.get(run_id, step, rec.payload) if replay else None
        outcome: StepOutcome | None
        if stored is not None:  # a redelivery after a crash: no second run
            outcome = stored.adjusted(self.rt.clock.now_ms())
            delivery.effects.restore(stored.puts, stored.deletes)
            delivery.effects.seal()
        else:
            # The claim may be old: a process paused past its ownership
            # (SIGSTOP) starts no step body once another may own the store
            # (raises before the body; the settlement then fails the same way).
            self.rt.queue.kv.check_writable()
            try:
                outcome = await self.rt.runner.run_step(delivery)
            except Exception as e:
                error = StepError.from_exception(e)
                outcome = None
            finally:
                delivery.effects.seal()
            if error is None and not isinstance(outcome, StepOutcome):
                # A bug in the runner: no retry fixes it, and the run ends
                # with the dead-letter like any permanent error.
                error = StepError.permanent(
                    f"run {run_id!r} step {step}: the runner returned {outcome!r}, "
                    "not a StepOutcome"
                )
                outcome = None
        external = job.cancel_token.is_cancelled()  # the claim's: fired from outside only
        if replay and stored is None and error is None and not external:
            assert outcome is not None
            puts, deletes = delivery.effects.staged()
            replayed = ReplayRecord(self.rt.clock.now_ms(), outcome, puts, deletes)
            await self.rt.replays.put(run_id, step, rec.payload, replayed)
        # No await from this read of the signal records to the settlement's
        # commit (see durable.engine.signals).
        registration: Registration | None = None
        if not external and isinstance(outcome, Continue) and isinstance(outcome.when, OnSignal):
            try:
                registration = self.rt.signals.register(
                    outcome.when.correlation_key, run_id, outcome.payload
                )
            except SignalWaiterExists as e:
                error, outcome = StepError.permanent(str(e)), None

        if isinstance(outcome, Cancel):
            fx = delivery.effects.apply_to(SettlementEffects())
            end = _Termination(TerminalStatus.CANCELLED, error=outcome.reason)
            return await self._terminate(rec, record, step, end, fx)
        if external:
            return await self._terminate(rec, record, step, _Termination(TerminalStatus.CANCELLED))
        if error is not None:
            end = _Termination(TerminalStatus.FAILED, error=error.message, kind=error.kind)
            if error.kind is StepErrorKind.PERMANENT:
                fx = await self._terminate(rec, record, step, end)
                raise PermanentFailure(error.message, effects=fx)
            # The effects apply only if this nack exhausts the step's attempts.
            last = delivery.is_last_attempt()
            fx = await self._terminate(rec, record, step, end, write_result=last)
            if not last:
                events.emit(
                    "retry",
                    run_id=run_id,
                    queue=self.rt.options.queue_name,
                    delivery=step,
                    attempt=rec.attempts,
                    retry_in=error.retry_after,
                    error=error.message,
                )
            raise FailWith(error, fx, retry_after=error.retry_after)
        fx = delivery.effects.apply_to(SettlementEffects())
        if isinstance(outcome, Continue):
            internal_effects(dict(outcome.internal), fx)  # the layer's own records
            for key in signal_cleanup_keys(rec.headers, run_id, step):
                fx.kv_delete(key)
            next_job = self.rt.queue.next_job_id()
            fx = advance(
                fx,
                queue=self.rt.options.queue_name,
                run_id=run_id,
                step=step,
                payload=outcome.payload,
                when=outcome.when,
                headers=rec.headers,
                job_id=next_job,
                priority=rec.priority,
                max_attempts=rec.max_attempts,
                now_ms=self.rt.clock.now_ms(),
                buffered_signal=registration.buffered if registration else None,
                index_waiter=not (registration is not None and registration.remote),
            )
            if registration is not None and registration.remote:
                assert isinstance(outcome.when, OnSignal)
                wait_key = outcome.when.correlation_key
                fx = self.rt.signals.registration_effects(fx, wait_key, run_id, next_job)
            if registration is not None and registration.recheck:
                assert isinstance(outcome.when, OnSignal)
                self.rt.signals.recheck_after_commit(run_id, outcome.when.correlation_key, next_job)
            return fx
        if isinstance(outcome, Succeed):
            end = _Termination(TerminalStatus.SUCCEEDED, result=outcome.result)
            return await self._terminate(rec, record, step, end, fx)
        if isinstance(outcome, Fail):
            end = _Termination(TerminalStatus.FAILED, error=outcome.reason)
            return await self._terminate(rec, record, step, end, fx)
        raise AssertionError(f"unreachable: {outcome!r}")  # checked after the runner

    # ------------------------------------------------------------- helpers

    @staticmethod
    def _parse(rec: JobRecord) -> tuple[str, int]:
        run_id = rec.headers.get(HEADER_RUN_ID, "")
        step_text = rec.headers.get(HEADER_STEP, "")
        try:
            validate_run_id(run_id)
            step = int(step_text)
            if step < 0 or not step_text.isdigit():
                raise ValueError(step_text)
        except (DurableError, ValueError):
            raise PermanentFailure(
                f"job {rec.id!r} is not a step of a run (headers {HEADER_RUN_ID}={run_id!r}, "
                f"{HEADER_STEP}={step_text!r})"
            ) from None
        return run_id, step

    async def _terminate(
        self,
        rec: JobRecord,
        record: RunRecord,
        step: int,
        end: _Termination,
        effects: SettlementEffects | None = None,
        *,
        write_result: bool = True,
    ) -> SettlementEffects:
        """The termination effects; writes the run result record first."""
        rt = self.rt
        termination = RunTermination(
            status=end.status,
            final_step=step,
            terminated_at_ms=rt.clock.now_ms(),
            error=end.error,
            error_kind=end.kind,
        )
        outcome = RunOutcome(
            run_id=record.run_id,
            status=end.status,
            final_step=step,
            result=end.result,
            error=end.error,
            headers=record.headers,
        )
        # A small outcome rides the terminating settlement in the terminal
        # record; a larger one goes to the run memo first.
        inline = write_result and len(encode_run_outcome(outcome)) <= INLINE_OUTCOME_MAX
        if write_result and not inline:
            await rt.memos.put_outcome(
                record.run_id, encode_run_result(RunResultRecord(termination, outcome))
            )
        if write_result:  # else a nack with attempts left: not (yet) a termination
            events.emit(
                "terminate",
                run_id=record.run_id,
                queue=rt.options.queue_name,
                delivery=step,
                status=end.status.value,
                error=end.error,
            )
        fx = effects if effects is not None else SettlementEffects()
        for key in signal_cleanup_keys(rec.headers, record.run_id, step):
            fx.kv_delete(key)  # the delivered-signal record goes with the step
        return rt.termination_effects(
            record,
            termination,
            outcome,
            step_job_id=rec.id,
            priority=rec.priority,
            max_attempts=rec.max_attempts,
            effects=fx,
            record_outcome=inline,
        )

    async def _notify(self, rec: JobRecord) -> SettlementEffects:
        """Hand a terminal notification to the hook; its effects ride the ack."""
        try:
            outcome = decode_run_outcome(rec.payload, f"notification {rec.id!r}")
        except DurableError as e:
            raise PermanentFailure(str(e)) from None
        staged = TerminalEffects()
        try:
            await self.rt.hook.on_termination(outcome, staged)
        except Exception as e:
            error = StepError.from_exception(e)
            if error.kind is StepErrorKind.PERMANENT:
                raise PermanentFailure(error.message) from e
            raise error from e
        finally:
            staged.seal()
        return staged.apply_to(SettlementEffects())
