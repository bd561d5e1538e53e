"""`WorkflowRunner`: one delivery of a workflow run, as a `durable.engine.StepRunner`.

Every delivery of a run carries the run's invocation. The runner decodes
it, finds the workflow by name (an unknown name fails the run with
`UnknownWorkflow`, which names the module to import), checks the stored
arguments against the function's signature (arguments that no longer fit
fail the run at once with `ArgumentMismatch`), loads the run's journal,
fails a run whose attempts keep ending without progress (`RunStalled`;
see `durable.decorators.progress`), journals what ended the wait the run
resumes from (the signal that woke it, or a child's outcome; a signal
wait woken before its own deadline, for another wait's, stays unresolved
and waits again) and calls the function inside a `RunContext`. The
function runs until it:

- returns: the run succeeds with the encoded result (`Succeed`);
- raises: the run fails with the encoded exception (`Fail`; see
  `durable.decorators.outcome`); a non-determinism fails it even if the
  workflow caught the error;
- calls ``durable.continue_as_new``: the run starts its next incarnation
  (``Continue`` with the new invocation, at once, its settlement resetting
  the journal; `durable.decorators.continuation`), even if the workflow
  caught the exception;
- is quiescent on durable waits: the waits it reached are parked and
  nothing else runs (`durable.decorators.parking`); the delivery ends with
  ``Continue`` carrying the same invocation and one trigger for all of them;
- suspends at once (`Suspend`: a new step while the engine drains);
- cannot journal (`Abort`): the delivery fails transiently and the queue
  redelivers it;
- meets a stored payload this engine cannot verify (`UntrustedPayload`: an
  argument, or a replayed result, signal or exception): the run is
  *released*, not failed: the delivery fails transiently, an error naming
  the run is logged, and the run's progress mark moves to this attempt, so
  however often an engine without the right key releases it, an engine
  with it can still run it.

Steps gathered with a wait therefore finish, and are journaled, before the
delivery suspends. When the delivery ends, what is still in flight (the
parked waits, code outside steps and waits) is cancelled and runs again on
replay, and the child starts begun in it complete. Meanwhile the runner
keeps the delivery's lease alive, and a cancellation of the run cancels
the function (and the run's children) at once.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any, NoReturn

from durable import events
from durable._logging import get_logger
from durable.decorators.children import cancel_children, resolve_child
from durable.decorators.context import RunContext
from durable.decorators.continuation import ContinueAsNew, continuation_writes
from durable.decorators.debounce import begin
from durable.decorators.invocation import decode_invocation
from durable.decorators.journal import CHILD, FLUSH_WITHIN, SIGNAL, Journal
from durable.decorators.keyed_concurrency import acquire
from durable.decorators.lease_keeper import LEASE, LeaseKeeper
from durable.decorators.outcome import encode_failure
from durable.decorators.progress import DEFERRED, Verdict, check_progress, mark_progress
from durable.decorators.ratelimit import admit
from durable.decorators.registry import REGISTRY
from durable.decorators.run_limits import limits_of
from durable.decorators.run_timeout import Deadline, clamp, deadline_of, timeout_reason
from durable.decorators.suspend import Abort, Suspend
from durable.decorators.waits import resolve_signal
from durable.engine.delivery import Step
from durable.engine.outcomes import (
    After,
    Cancel,
    Continue,
    Fail,
    Immediate,
    OnSignal,
    StepError,
    StepOutcome,
    Succeed,
    Trigger,
)
from durable.errors import (
    DurableError,
    UnknownWorkflow,
    UntrustedPayload,
)

if TYPE_CHECKING:
    from durable.decorators.base import EngineBase

__all__ = ["LEASE", "WorkflowRunner"]

log = get_logger("durable.decorators")


class WorkflowRunner:
    """Runs deliveries of workflow runs; see the module docstring."""

    def __init__(self, engine: EngineBase, draining: asyncio.Event) -> None:
        self._engine = engine
        self._draining = draining

    async def run_step(self, step: Step) -> StepOutcome:
        """Run one delivery of a workflow run (in a span, when traced)."""
        tracing = events.TRACING
        if tracing is None:
            return await self._run_step(step)
        with tracing.run_span(step.run_id, step.step_number, step.headers):
            outcome = await self._run_step(step)
            tracing.annotate(outcome=type(outcome).__name__)
            return outcome

    async def _run_step(self, step: Step) -> StepOutcome:
        engine = self._engine
        codec = engine.codec
        kv = engine.queue.kv.internal()
        try:
            invocation = decode_invocation(step.payload, step.run_id)
            definition = REGISTRY.get(invocation.name)
            if definition is None:
                raise UnknownWorkflow(step.run_id, invocation.name)
            events.bind(workflow=invocation.name, queue=definition.queue)
            events.emit(
                "claim", run_id=step.run_id, delivery=step.step_number, attempt=step.attempts
            )
            if events.TRACING is not None:
                events.TRACING.annotate(workflow=invocation.name)
            # Permanent: the code changed under a queued run.
            invocation.check_fits(definition.fn, step.run_id)
            journal = Journal.load(kv, step.run_memo, step.run_id)
            # Before anything of the run's own is decoded or run: a poison
            # run stops here, a stalled one waits first.
            verdict = check_progress(
                kv,
                journal,
                step,
                invocation.name,
                engine.max_attempts_without_progress,
                lambda: engine.queue.view.attempt_history(step.job_id),
            )
        except DurableError as e:
            return Fail(encode_failure(codec, step.run_id, e))
        if verdict.defer is not None:
            _defer(step, verdict)
        # Admission of a run's beginning (a `StepError` deferral while it must
        # wait): a debounced run's time and last arguments, then the rate limit.
        begun = await begin(engine, step, invocation.name)
        if begun is not step:
            step = begun
            try:
                invocation = decode_invocation(step.payload, step.run_id)
                invocation.check_fits(definition.fn, step.run_id)
            except DurableError as e:
                return Fail(encode_failure(codec, step.run_id, e))
        if definition.rate_limit is not None and step.step_number == 0 and not len(journal):
            await admit(engine, step, definition.name, definition.rate_limit)
        # The queue does not flush a claim (it rides the next flush): make it
        # durable before anything of the run is decoded or run, or a process
        # that dies at once would not count the attempt. No commit of its own;
        # at most one log object per delivery (shared by claims made together).
        # A job's first claim in the process that made it pending may ride
        # the run's next commit (its first journal entry, or the terminal
        # record), flushed within `FLUSH_WITHIN` at the latest: a crash that
        # loses it leaves the job pending, and the next process, for which
        # it is no fresh claim, counts every attempt from then on.
        if step.fresh:
            engine.queue.writer.flush_within(FLUSH_WITHIN)
        else:
            await engine.queue.writer.flush()
        deadline = deadline_of(step.headers)
        if deadline is not None and deadline.passed(engine.clock.now_ms()):
            return await _time_out(engine, step.run_id, deadline)
        per_key = limits_of(invocation.name).concurrency_per_key
        if per_key is not None:  # a run with a concurrency key waits for a slot
            waiting = await acquire(engine, step, invocation.name, per_key, deadline)
            if waiting is not None:
                return waiting
        try:
            args, kwargs = invocation.decode_args(codec, step.run_id, definition.fn)
        except UntrustedPayload as e:
            await _release(engine, step, e)
        except DurableError as e:
            return Fail(encode_failure(codec, step.run_id, e))
        run = RunContext(engine, step, journal, self._draining)
        run.definition = definition
        run.incarnation = invocation.incarnation
        if step.step_number > 0:
            events.emit(
                "resume",
                run_id=step.run_id,
                delivery=step.step_number,
                signal=step.signal is not None,
            )
        try:
            await _resume(run)
        except Abort as a:
            await _abort(run, a)
        return await _Delivery(run, definition.fn, args, kwargs, deadline).execute()


async def _time_out(engine: EngineBase, run_id: str, deadline: Deadline) -> Cancel:
    """Cancel run ``run_id``, past its ``deadline``, and its children
    (`durable.decorators.run_timeout`)."""
    log.warning("workflow run timed out", run_id=run_id, timeout=deadline.timeout)
    await cancel_children(engine, run_id)
    return Cancel(timeout_reason(deadline))


async def _release(engine: EngineBase, step: Step, error: UntrustedPayload) -> NoReturn:
    """Leave the run where it is: a payload this engine cannot verify is no
    fault of the run. The delivery fails transiently (the queue retries it
    after its backoff) and moves the run's progress mark, so the attempts
    an engine without the right key takes are not counted against the run."""
    log.error(
        "workflow run released: a stored payload cannot be verified with this Engine's "
        "signing_key; an Engine with the key that signed it will run it",
        run_id=step.run_id,
        what=error.what,
        reason=error.reason,
    )
    await mark_progress(engine.queue.kv.internal(), step)
    raise StepError.transient(f"run {step.run_id!r} released: {error}") from error


async def _abort(run: RunContext, abort: Abort) -> NoReturn:
    """End the delivery transiently for ``abort`` (released, when a payload
    could not be verified)."""
    if isinstance(abort.__cause__, UntrustedPayload):
        await _release(run.engine, run.delivery, abort.__cause__)
    raise StepError.transient(abort.reason) from abort.__cause__


def _defer(step: Step, verdict: Verdict) -> NoReturn:
    """Put the delivery back for ``verdict.defer`` seconds without running it:
    its last attempt was cut short with no progress (see
    `durable.decorators.progress`)."""
    log.warning(
        "workflow run deferred: its last attempts ended without progress",
        run_id=step.run_id,
        attempts_without_progress=verdict.stalled,
        seconds=verdict.defer,
    )
    raise StepError.transient(
        f"{DEFERRED} run {step.run_id!r} waits {verdict.defer:g} s: {verdict.stalled} "
        "attempt(s) in a row ended without progress",
        retry_after=verdict.defer,
    )


async def _resume(run: RunContext) -> None:
    """Journal what ended the wait that the previous delivery suspended on
    (its entry names that delivery's step), before the workflow replays:
    the signal that woke this delivery is only known to it."""
    step = run.delivery
    for position, entry in run.journal.entries():
        if entry.suspended != step.step_number - 1 or entry.resolved:
            continue
        if entry.kind == SIGNAL:
            if step.signal is None and run.clock.now_ms() < entry.time:
                return  # woken for another parked wait's deadline: this one waits again
            await resolve_signal(run, position, entry, step.signal)
        elif entry.kind == CHILD and step.signal is not None:
            await resolve_child(run, position, entry)
        return


class _Delivery:
    """The function of one delivery, with its lease and cancellation."""

    def __init__(
        self,
        run: RunContext,
        fn: Any,
        args: list[Any],
        kwargs: dict[str, Any],
        deadline: Deadline | None = None,
    ) -> None:
        self.ctx = run
        self.fn = fn
        self.args = args
        self.kwargs = kwargs
        self.deadline = deadline

    async def execute(self) -> StepOutcome:
        """Run the function; the delivery's outcome.

        The delivery ends on the first of: the function returns or raises,
        the run is asked to cancel, the lease is lost, the run's deadline
        passes, the delivery suspends (its parked waits decide). Only the
        function is a task from the start: the lease keeper is a timer
        (`LeaseKeeper`), the cancellation a callback on the token, and the
        parking decision's task starts when the first wait parks (most
        deliveries never park).
        """
        run = self.ctx
        step = run.delivery
        loop = asyncio.get_running_loop()
        ended: asyncio.Future[None] = loop.create_future()

        def end(_: object = None) -> None:
            if not ended.done():
                ended.set_result(None)

        main = loop.create_task(
            self.fn(*self.args, **self.kwargs), context=run.context(), name=f"workflow {run.run_id}"
        )
        # Read by `outcome`; marked retrieved here for a delivery stopped (the
        # engine lost its store, shut down) just as the function ended.
        main.add_done_callback(_retrieved)
        main.add_done_callback(end)
        keeper = LeaseKeeper(run, end)
        helpers: list[asyncio.Task[Any]] = []
        parking: asyncio.Task[Suspend] | None = None

        def start_parking() -> None:
            nonlocal parking
            parking = loop.create_task(run.parking.until_suspended(), name=f"parking {run.run_id}")
            parking.add_done_callback(end)
            helpers.append(parking)

        run.parking.when_parked(start_parking)
        unwatch = step.cancel_token.on_fire(end)
        expiry = None
        if self.deadline is not None:  # a run with a timeout: its deadline ends the delivery
            expiry = loop.create_task(_until(run, self.deadline), name=f"deadline {run.run_id}")
            expiry.add_done_callback(end)
            helpers.append(expiry)
        try:
            await ended
        except BaseException:  # the worker itself is cancelled: stop everything
            await _cancel(main, *helpers, *run.inflight)
            raise
        finally:
            keeper.stop()
            unwatch()
            run.parking.when_parked(_no_parking)
        suspension = parking is not None and parking.done() and not parking.cancelled()
        expired = expiry is not None and expiry.done() and not expiry.cancelled()
        if main.done():
            if helpers:
                await _cancel(*helpers)
            await self.settle()
            return await self.outcome(main)
        await _cancel(*helpers)
        await _cancel(main)
        await self.settle()
        if step.cancel_token.is_cancelled():
            await cancel_children(run.engine, run.run_id)
            return Cancel("cancelled")
        if expired and self.deadline is not None:
            return await _time_out(run.engine, run.run_id, self.deadline)
        if suspension and parking is not None:
            try:
                decided = parking.result()
            except Exception as e:
                raise StepError.transient(f"run {run.run_id!r}: parking failed: {e}") from e
            return await self.suspend(decided)
        raise StepError.transient(f"run {run.run_id!r}: the delivery's lease was lost")

    async def settle(self) -> None:
        """Cancel the steps and waits still in flight; finish the child starts."""
        run = self.ctx
        await _cancel(*run.inflight)
        while run.starts:
            await asyncio.gather(*run.starts, return_exceptions=True)

    async def suspend(self, s: Suspend) -> StepOutcome:
        """End the delivery on ``s``: journal the entry of the wait it
        suspends on, then ``Continue`` with its trigger."""
        run = self.ctx
        if run.nondeterminism is not None:
            return Fail(encode_failure(run.codec, run.run_id, run.nondeterminism))
        if s.position is not None and s.entry is not None:
            try:
                await run.journal.write(s.position, s.entry)
            except Exception as e:
                raise StepError.transient(f"run {run.run_id!r}: journal write failed: {e}") from e
        events.emit("suspend", run_id=run.run_id, position=s.position, **_trigger(s.trigger))
        outcome = Continue(run.delivery.payload, s.trigger)
        if self.deadline is not None:  # wake at the run's deadline at the latest
            outcome = clamp(outcome, self.deadline, run.clock.now_ms())
        return outcome

    async def renew(self, request: ContinueAsNew) -> StepOutcome:
        """End the delivery by starting the run's next incarnation
        (`durable.decorators.continuation`): ``Continue`` with the new
        invocation, now, its settlement resetting the journal."""
        run = self.ctx
        if run.nondeterminism is not None:
            return Fail(encode_failure(run.codec, run.run_id, run.nondeterminism))
        try:
            internal = await continuation_writes(run, request)
        except Exception as e:
            raise StepError.transient(f"run {run.run_id!r}: continue-as-new failed: {e}") from e
        events.emit("continue_as_new", run_id=run.run_id, incarnation=request.incarnation)
        return Continue(request.payload, Immediate(), internal)

    async def outcome(self, main: asyncio.Task[Any]) -> StepOutcome:
        """The outcome of the function's finished task."""
        run = self.ctx
        codec = run.codec
        try:
            result = main.result()
        except Suspend as s:
            return await self.suspend(s)
        except Abort as a:
            await _abort(run, a)
        except ContinueAsNew as c:
            return await self.renew(run.continued or c)
        except (Exception, asyncio.CancelledError) as e:
            if run.continued is not None:  # the first continue_as_new decides
                return await self.renew(run.continued)
            error: BaseException = run.nondeterminism or e
            return Fail(encode_failure(codec, run.run_id, error))
        if run.continued is not None:
            return await self.renew(run.continued)
        if run.nondeterminism is not None:
            return Fail(encode_failure(codec, run.run_id, run.nondeterminism))
        try:
            data = codec.dumps(result, what=f"the result of run {run.run_id!r}")
        except Exception as e:
            return Fail(encode_failure(codec, run.run_id, e))
        return Succeed(data)


def _trigger(trigger: Trigger) -> dict[str, Any]:
    """The fields of a suspend event for ``trigger``."""
    if isinstance(trigger, OnSignal):
        return {"until": "signal", "key": trigger.correlation_key, "timeout": trigger.timeout}
    if isinstance(trigger, After):
        return {"until": "time", "seconds": trigger.delay}
    return {"until": "next delivery"}


def _no_parking() -> None:
    """A wait parked after its delivery ended: nothing decides for it."""


def _retrieved(task: asyncio.Task[Any]) -> None:
    """Mark ``task``'s exception, if any, as retrieved."""
    if not task.cancelled():
        task.exception()


async def _cancel(*tasks: asyncio.Task[Any]) -> None:
    """Cancel ``tasks`` and wait until they have stopped."""
    current = asyncio.current_task()
    pending = [t for t in tasks if t is not current and not t.done()]
    for t in pending:
        t.cancel()
    await asyncio.gather(*pending, return_exceptions=True)


async def _until(run: RunContext, deadline: Deadline) -> None:
    """Return at ``deadline`` on the engine's clock."""
    await run.clock.sleep(max(deadline.at_ms - run.clock.now_ms(), 0) / 1000)
