"""The worker loop: claim a job, process it, settle it (semantics 1.27).

A `Worker` turns one claimed job into its settlement:

- `Worker.process` returns (effects or None): ``ack_with(claim, effects)``;
- it raises `PermanentFailure`: ``dead_letter_with(claim, reason, effects)``;
- it raises any other `Exception`: ``nack_with(claim, str(error), effects)``,
  which retries the job or, on its last attempt, dead-letters it (the
  effects apply only then);
- `FailWith` ``(error, effects)`` carries effects on either failure path:
  the wrapped ``error`` decides which; its ``retry_after`` (seconds), when
  set, replaces the queue's backoff of the retry.

Processing is never interrupted by shutdown. A settlement that fails (most
often `ClaimLost`: the lease ran out and the job was requeued) is logged and
the loop goes on; a claim that fails ends the loop with its error. The job
is at least once either way, so ``process`` must be idempotent.

`run_worker` handles one job at a time; `run_worker_concurrent` up to
``concurrency`` at once, claiming batches sized to its free capacity. When
``shutdown`` is set both stop claiming, finish the jobs they hold, and
return. Cancelling a loop cancels the jobs it is running (their leases then
run out and the jobs are claimed again).

Several `run_worker_concurrent` loops of one process (one per partition of
a partitioned store) may share `Slots`: then at most ``Slots.limit`` jobs
run at once across all of them, each loop reserving slots before it claims.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable
from typing import Any, Protocol

from durable._logging import get_logger
from durable.store.queue.effects import SettlementEffects
from durable.store.queue.leases import Claim, LeaseHandle

__all__ = [
    "FailWith",
    "PermanentFailure",
    "Slots",
    "Worker",
    "WorkerQueue",
    "run_worker",
    "run_worker_concurrent",
]

log = get_logger("durable.worker")


class PermanentFailure(Exception):
    """Raise from `Worker.process` to dead-letter the job now, without retries.

    ``reason`` becomes the dead record's error; ``effects`` commit with the
    dead-letter.
    """

    def __init__(self, reason: str, effects: SettlementEffects | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.effects = effects

    def __str__(self) -> str:
        return self.reason


class FailWith(Exception):
    """Raise from `Worker.process` to fail the job and carry ``effects``.

    ``error`` decides the path: a `PermanentFailure` dead-letters the job
    (these ``effects`` replace its own), anything else nacks it (the effects
    apply only if that nack exhausts the job's attempts).
    """

    def __init__(
        self, error: Exception, effects: SettlementEffects, *, retry_after: float | None = None
    ) -> None:
        super().__init__(str(error))
        self.error = error
        self.effects = effects
        #: Seconds before the retry of a nack (None: the queue's backoff).
        self.retry_after = retry_after


class Worker(Protocol):
    """Processes claimed jobs; see the module docstring for the outcomes."""

    async def process(self, job: Claim, lease: LeaseHandle) -> SettlementEffects | None:
        """Do the job's work; ``lease`` extends the claim for long work."""
        ...


class WorkerQueue(Protocol):
    """The part of `Queue` the worker loops use."""

    async def claim(self, queue: str, /) -> Claim | None: ...

    async def claim_batch(
        self, queue: str, n: int, /, *, claimed: Callable[[int], None] | None = None
    ) -> list[Claim]: ...

    async def wait_for_jobs_on(
        self, queue: str, max_wait_seconds: float, /, *, until: asyncio.Future[Any] | None = None
    ) -> bool: ...

    async def ack_with(self, claim: Claim, effects: SettlementEffects, /) -> object: ...

    async def nack_with(
        self,
        claim: Claim,
        error: str,
        effects: SettlementEffects,
        /,
        *,
        retry_after: float | None = None,
    ) -> object: ...

    async def dead_letter_with(
        self, claim: Claim, reason: str, effects: SettlementEffects, /
    ) -> object: ...


# ------------------------------------------------------------------ settling


def _describe(error: BaseException) -> str:
    """The error text stored on the job: ``str(error)``, or its type if empty."""
    return str(error) or type(error).__name__


def _job_log(logger: Any, claim: Claim) -> Any:
    """``logger`` bound to the claim (built only when something is logged)."""
    return logger.bind(job=claim.id, attempt=claim.record.attempts)


async def _process_and_settle(
    queue: WorkerQueue, worker: Worker, claim: Claim, logger: Any
) -> None:
    """Process one claim and settle it; settlement errors are logged, not raised."""
    try:
        effects = await worker.process(claim, claim.lease)
    except Exception as e:
        effects, error, retry_after = None, e, None
        if isinstance(e, FailWith):
            effects, error, retry_after = e.effects, e.error, e.retry_after
        try:
            if isinstance(error, PermanentFailure):
                reason = _describe(error)
                if effects is None:
                    effects = error.effects
                _job_log(logger, claim).info("job failed permanently", reason=reason)
                await queue.dead_letter_with(claim, reason, effects or SettlementEffects())
            else:
                text = _describe(error)
                _job_log(logger, claim).info("job failed", error=text, exc_info=error)
                await queue.nack_with(
                    claim, text, effects or SettlementEffects(), retry_after=retry_after
                )
        except Exception as settle_error:
            _job_log(logger, claim).warning("job settlement failed", error=_describe(settle_error))
        return
    if effects is not None and not isinstance(effects, SettlementEffects):
        _job_log(logger, claim).error(
            "worker returned a non-SettlementEffects value", value=repr(effects)
        )
        try:
            await queue.nack_with(
                claim,
                f"worker returned {type(effects).__name__}, not SettlementEffects or None",
                SettlementEffects(),
            )
        except Exception as settle_error:
            _job_log(logger, claim).warning("job settlement failed", error=_describe(settle_error))
        return
    try:
        await queue.ack_with(claim, effects or SettlementEffects())
    except Exception as settle_error:
        _job_log(logger, claim).warning("job settlement failed", error=_describe(settle_error))


async def _wait_for_work(
    queue: WorkerQueue,
    name: str,
    poll_interval: float,
    stop: asyncio.Future[Any],
) -> None:
    """Wait for a wakeup on ``name`` (an insert), the poll interval or ``stop``.

    Not for a running job to finish: every transition that makes a job
    pending wakes the queue's waiters (or leaves a permit when none waits),
    so a job that finishes wakes the loop through what it makes pending,
    and one that makes nothing pending costs no claim pass. A failed wait
    ends the loop, like a failed claim."""
    await queue.wait_for_jobs_on(name, poll_interval, until=stop)


def _check(name: str, poll_interval: float) -> None:
    if not isinstance(name, str):
        raise TypeError(f"name must be the queue name (a str), not {type(name).__name__}")
    if not (isinstance(poll_interval, int | float) and math.isfinite(poll_interval)) or (
        poll_interval <= 0
    ):
        raise ValueError(
            f"poll_interval must be a positive number of seconds, got {poll_interval!r}"
        )


# --------------------------------------------------------------------- slots


class Slots:
    """A limit of ``limit`` jobs at once shared by several worker loops of one
    process (`run_worker_concurrent`): a loop reserves slots before it
    claims, and gives each back when its job settled."""

    __slots__ = ("_freed", "limit", "used")

    def __init__(self, limit: int) -> None:
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
            raise ValueError(f"a slot limit must be an int >= 1, got {limit!r}")
        #: Jobs that may run at once across the loops sharing these slots.
        self.limit = limit
        #: Slots reserved or running now.
        self.used = 0
        self._freed: asyncio.Event | None = None

    def take(self, wanted: int) -> int:
        """Reserve up to ``wanted`` slots; how many were reserved."""
        n = max(0, min(wanted, self.limit - self.used))
        self.used += n
        return n

    def give(self, n: int = 1) -> None:
        """Give ``n`` slots back (a job settled, or a claim got fewer jobs)."""
        if n <= 0:
            return
        self.used -= n
        if self._freed is not None:
            self._freed.set()
            self._freed = None

    def freed(self) -> asyncio.Event:
        """An event set the next time a slot is given back."""
        if self._freed is None:
            self._freed = asyncio.Event()
        return self._freed


# --------------------------------------------------------------------- loops


async def run_worker(
    queue: WorkerQueue,
    worker: Worker,
    *,
    name: str,
    poll_interval: float,
    shutdown: asyncio.Event,
) -> None:
    """Process jobs of queue ``name`` one at a time until ``shutdown`` is set.

    Claims with the queue's lease duration. When the queue is empty, waits
    for a new job, ``poll_interval`` seconds (of the queue's clock) or
    ``shutdown``, whichever comes first; that wait is the only thing
    shutdown interrupts. A claim error ends the loop with that error.
    """
    _check(name, poll_interval)
    logger = log.bind(queue=name)
    stop = asyncio.ensure_future(shutdown.wait())
    try:
        while not shutdown.is_set():
            claim = await queue.claim(name)
            if claim is not None:
                await _process_and_settle(queue, worker, claim, logger)
            else:
                await _wait_for_work(queue, name, poll_interval, stop)
    finally:
        stop.cancel()
        await asyncio.gather(stop, return_exceptions=True)
    logger.debug("worker stopped")


async def run_worker_concurrent(
    queue: WorkerQueue,
    worker: Worker,
    *,
    name: str,
    concurrency: int,
    poll_interval: float,
    shutdown: asyncio.Event,
    slots: Slots | None = None,
) -> None:
    """Process up to ``concurrency`` jobs of queue ``name`` at once until ``shutdown``.

    ``slots``: a limit shared with other loops of this process (`Slots`),
    which then bounds this loop too.

    Claims batches sized to the free capacity, with the queue's lease
    duration, and runs each job in its own task. On shutdown stops claiming
    and waits for every running job to settle, however long that takes. A
    claim error stops claiming too: the running jobs finish, then the error
    is raised. An unexpected error inside a job's task is logged.
    """
    _check(name, poll_interval)
    if isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency < 1:
        raise ValueError(f"concurrency must be an int >= 1, got {concurrency!r}")
    logger = log.bind(queue=name, concurrency=concurrency)
    stop = asyncio.ensure_future(shutdown.wait())
    running: set[asyncio.Task[None]] = set()

    def finished(task: asyncio.Task[None]) -> None:
        running.discard(task)
        if slots is not None:
            slots.give()
        if not task.cancelled() and (error := task.exception()) is not None:
            logger.error("job task crashed", error=_describe(error), exc_info=error)

    try:
        while not shutdown.is_set():
            free = concurrency - len(running)
            if slots is not None and free > 0:
                free = slots.take(free)  # reserved before the claim's await
                if free == 0:  # the other loops hold every slot
                    freed = asyncio.ensure_future(slots.freed().wait())
                    try:
                        await asyncio.wait(
                            {stop, freed, *running}, return_when=asyncio.FIRST_COMPLETED
                        )
                    finally:
                        freed.cancel()
                    continue
            if free > 0:
                if slots is None:
                    claims = await queue.claim_batch(name, free)
                else:
                    # The slots no job took go back as soon as the claim is
                    # decided, not after its wait: the other loops claim meanwhile.
                    reserved = [free]

                    def claimed(k: int, reserved: list[int] = reserved) -> None:
                        slots.give(reserved[0] - k)
                        reserved[0] = k

                    try:
                        claims = await queue.claim_batch(name, free, claimed=claimed)
                    except BaseException:
                        slots.give(reserved[0])
                        raise
                for claim in claims:
                    task = asyncio.create_task(
                        _process_and_settle(queue, worker, claim, logger),
                        name=f"durable-worker {name} {claim.id}",
                    )
                    running.add(task)
                    task.add_done_callback(finished)
                if len(claims) == free:
                    continue  # the queue may hold more: claim again, or wait for a slot
                await _wait_for_work(queue, name, poll_interval, stop)
            else:
                await asyncio.wait({stop, *running}, return_when=asyncio.FIRST_COMPLETED)
    except asyncio.CancelledError:
        for task in running:
            task.cancel()
        raise
    finally:
        stop.cancel()
        await asyncio.gather(stop, *running, return_exceptions=True)
    logger.debug("worker stopped")
