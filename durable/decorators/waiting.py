"""`Waiting`: a run parked on a durable wait, seen from outside it.

A run is *waiting* once a delivery has ended on its durable waits: its
current step is then a scheduled queue job (the timer of a sleep, or a
signal wait with its timeout), written with the delivery's settlement.
`wait_until_waiting` (what `WorkflowHandle.waiting` calls) reads that from
the store and, until it holds, watches the run's step pointer (a KV watch:
every settlement of the run rewrites it, its termination deletes it), so a
caller waits without polling.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from durable.decorators.children import child_key
from durable.engine import keys
from durable.engine.runs import HEADER_SIGNAL_WAIT, Cancelling, Terminated
from durable.errors import InvalidArgument, RunNotFound
from durable.store.queue import JobStatus
from durable.store.queue.wakeups import wait_or_sleep

if TYPE_CHECKING:
    from durable.decorators.base import EngineBase
    from durable.engine.runtime import WorkflowRuntime

__all__ = ["Waiting", "waiting_now", "wait_until_waiting"]

_CHILD_PREFIX = child_key("")


@dataclass(frozen=True, slots=True)
class Waiting:
    """Where a run waits: it holds no worker until a signal or a time wakes it.

    With several waits gathered, the run waits on one signal key (the
    signals of its other waits are buffered until it waits on theirs) and
    wakes at the earliest deadline of them all, or at ``until_ms``.
    """

    #: The run's id.
    run_id: str
    #: The run's current step: the one the wake-up starts.
    step: int
    #: The signal key the run waits on (a child workflow's: `child_run_id`);
    #: None when only a time wakes it (``durable.sleep``).
    signal_key: str | None
    #: When the run wakes anyway (engine-clock epoch ms); a signal wait
    #: without a timeout reports a time ten years on.
    until_ms: int
    #: When the run started waiting (engine-clock epoch ms).
    since_ms: int

    @property
    def child_run_id(self) -> str | None:
        """The child run whose end the run waits for, or None."""
        key = self.signal_key
        if key is None or not key.startswith(_CHILD_PREFIX):
            return None
        return key[len(_CHILD_PREFIX) :]


def waiting_now(runtime: WorkflowRuntime, run_id: str) -> Waiting | None:
    """Where run ``run_id`` waits now, or None if it does not wait (it runs,
    is queued, is being cancelled, has terminated or is unknown)."""
    status = runtime.status(run_id)
    if status is None or isinstance(status.state, Terminated | Cancelling):
        return None
    pointer = runtime.view.pointer(run_id)
    if pointer is None or pointer.step_number == 0:  # step 0: a delayed start, not a wait
        return None
    job = runtime.queue.job_record(pointer.job_id)
    # A step that failed and waits for its retry is scheduled too, with attempts.
    if job is None or job.status is not JobStatus.SCHEDULED or job.attempts > 0:
        return None
    if job.run_at is None:
        return None
    return Waiting(
        run_id=run_id,
        step=pointer.step_number,
        signal_key=job.headers.get(HEADER_SIGNAL_WAIT),
        until_ms=job.run_at,
        since_ms=job.enqueued_at,
    )


async def wait_until_waiting(
    engine: EngineBase,
    run_id: str,
    timeout: float | None = None,  # noqa: ASYNC109
    after: Waiting | None = None,
) -> Waiting | None:
    """`WorkflowHandle.waiting`: return once run ``run_id`` waits (at a step
    after ``after.step`` if given); None once it has terminated instead.

    `RunNotFound` for an unknown run; `TimeoutError` after ``timeout``
    seconds of the engine's clock (None: no limit). Durable on return: the
    settlement that made the run wait is in the store.
    """
    if after is not None and after.run_id != run_id:
        raise InvalidArgument(f"after= describes run {after.run_id!r}, not {run_id!r}")
    engine = engine.for_run(run_id)
    runtime = engine.workflows.default
    clock = engine.clock
    deadline = None if timeout is None else clock.now_ms() + round(timeout * 1000)
    await runtime.until_visible(run_id, timeout)  # a client's run not applied yet
    kv = engine.queue.kv
    key = keys.pointer_key(run_id)
    floor = -1 if after is None else after.step
    while True:
        status = runtime.status(run_id)
        if status is None:
            raise RunNotFound(run_id, "handle.waiting()")
        if isinstance(status.state, Terminated):
            return None
        found = waiting_now(runtime, run_id)
        if found is not None and found.step > floor:
            await engine.queue.writer.flush()  # memory may be ahead of the store
            return found
        fut = kv.watch(key)  # no await since the read: no settlement slips through
        try:
            left = None if deadline is None else (deadline - clock.now_ms()) / 1000
            if not await wait_or_sleep(clock, fut, left):
                raise TimeoutError(f"run {run_id!r} did not wait within {timeout} s")
            fut.result()  # the store's error (it stopped): not a loop on a failed watch
        finally:
            kv.unwatch(key, fut)
