"""Durable signals (semantics 2.10): a run waits for an external event.

A step returning `StepOutcome.continue_on_signal` registers a *waiter* for
a correlation key; `WorkflowRuntime.signal` wakes it with a payload, or the
next step runs at the timeout with ``Step.signal`` None. Three records of
the caller KV namespace (keys in `durable.engine.keys`) hold the state:

- the *buffer* ``signal-buf/{key}``: a signal no waiter took yet (one per
  key; a second signal replaces the first);
- the *waiter index* ``signal-wait/{key}``: the id of the step job
  scheduled to wait on the key (one waiter per key);
- the *delivered record* ``signal-delivered/{run}/{step}``: the payload a
  step consumed from the buffer, so its redeliveries see the same value;
  it is deleted with that step's settlement.

The paths:

- ``signal``: put the buffer durably; if the index names a scheduled job,
  wake it with the payload (`Queue.wake_scheduled` keeps the payload on
  the job record) and compare-delete the buffer and the index in the same
  transaction: `SignalOutcome.DELIVERED`. Otherwise (no index, or a stale one, which is
  compare-deleted) the signal stays buffered: `SignalOutcome.BUFFERED`.
- Registration, when the runner returns ``continue_on_signal`` (`register`):
  a live waiter at the key fails the run (`SignalWaiterExists`); a buffered
  signal is consumed in the settlement (the next step is claimable at once
  with the ``signal_delivered`` header, its delivered record is written and
  the buffer deleted); otherwise the next step is scheduled at the timeout
  and the index names it. All of it commits with the step's ack.
- Resolution, when a step with a signal header is claimed (`resolve`).

Why there is no polling loop. The reference re-reads the waiter index up
to 10 times, 25 ms apart, because its registration reads the buffer and
commits the index in two moments a signal can fall between. Here the store
runs every transaction as a synchronous critical section on one event
loop (`durable.store.queue.txn`), and the worker reads the buffer and the
index after the step's last ``await``: from that read to the ack's commit
nothing else runs. A signal's buffer write therefore lands either before
the registration (which then consumes it) or after its commit (and the
signal, reading the index after its own write, finds the waiter). The one
exception is a next-step payload over the queue's offload threshold: its
object is written between the read and the commit. Such a registration
never consumes (the commit could delete a signal that replaced the one it
read); it waits, and once its commit is durable (a KV watch on the run's
step pointer, which only that commit writes) a buffered signal is handed
to the new waiter as ``signal`` would.
"""

from __future__ import annotations

import asyncio
import enum
from collections.abc import Coroutine, Mapping
from dataclasses import dataclass
from typing import Any

from durable._logging import get_logger
from durable.engine import keys
from durable.engine.access import RunQueue
from durable.engine.runs import HEADER_SIGNAL_DELIVERED, HEADER_SIGNAL_WAIT
from durable.engine.transitions import internal_effects
from durable.errors import InvalidArgument, SignalWaiterExists
from durable.store.keyspace import MAX_KV_VALUE_SIZE
from durable.store.queue import JobRecord, JobStatus, SettlementEffects, WakeOutcome

__all__ = [
    "Registration",
    "SignalOutcome",
    "Signals",
    "check_signal",
    "signal_cleanup_keys",
]

log = get_logger("durable.engine.signals")


class SignalOutcome(enum.Enum):
    """What `WorkflowRuntime.signal` did."""

    #: A waiting run was woken; its next step sees the payload as ``Step.signal``.
    DELIVERED = "delivered"
    #: No waiter took it: the signal is buffered durably under its key for
    #: the next waiter (or `WorkflowRuntime.clear_signal`).
    BUFFERED = "buffered"
    #: Sent by a process that does not own the store: the request is durably
    #: in the store's inbox, and the owner delivers or buffers it when it
    #: applies it (`durable.cluster.client.ClientRuntime`).
    SENT = "sent"


@dataclass(frozen=True, slots=True)
class Registration:
    """How a step's ``continue_on_signal`` registers (see `Signals.register`).

    ``buffered``: the buffered signal the settlement consumes (None: wait).
    ``recheck``: hand a signal buffered meanwhile to the waiter once the
    settlement is durable (`Signals.recheck_after_commit`).
    """

    buffered: bytes | None
    recheck: bool


def check_signal(key: object, payload: object = b"") -> tuple[str, bytes]:
    """``(key, payload)`` checked: a non-empty UTF-8 key, a bytes payload of
    at most `MAX_KV_VALUE_SIZE`; `InvalidArgument` naming the key otherwise."""
    if not isinstance(key, str) or not key:
        raise InvalidArgument(f"a signal's correlation key must be a non-empty str, got {key!r}")
    try:
        key.encode()
    except UnicodeEncodeError:
        raise InvalidArgument(
            f"correlation key {key!r} is not valid UTF-8 (a lone surrogate)"
        ) from None
    if isinstance(payload, bytearray | memoryview):
        payload = bytes(payload)
    if not isinstance(payload, bytes):
        raise InvalidArgument(
            f"the signal for correlation key {key!r} must carry bytes, "
            f"got {type(payload).__name__}: {payload!r:.80}"
        )
    if len(payload) > MAX_KV_VALUE_SIZE:
        raise InvalidArgument(
            f"the signal for correlation key {key!r} is {len(payload)} bytes, the maximum is "
            f"{MAX_KV_VALUE_SIZE}; store large data elsewhere and signal a reference"
        )
    return key, payload


def signal_cleanup_keys(headers: Mapping[str, str], run_id: str, step: int) -> list[bytes]:
    """The delivered record to delete with the settlement of a step with
    these headers (none for a step that did not wait for a signal)."""
    if HEADER_SIGNAL_DELIVERED in headers or HEADER_SIGNAL_WAIT in headers:
        return [keys.signal_delivered_key(run_id, step)]
    return []


class Signals:
    """The signal records of one store, for the runtime on ``queue``; see
    the module docstring."""

    def __init__(self, queue: RunQueue) -> None:
        self.queue = queue
        self._tasks: set[asyncio.Task[None]] = set()

    # --------------------------------------------------------- signalling

    async def signal(self, key: str, payload: bytes) -> SignalOutcome:
        """Deliver ``payload`` to the run waiting on ``key``, or buffer it."""
        return await self.signal_with(key, payload, SettlementEffects())

    async def signal_with(
        self, key: str, payload: bytes, effects: SettlementEffects
    ) -> SignalOutcome:
        """`signal`, committing ``effects`` atomically with the buffer write
        (how a `ReplyWatcher` retires its marker with the delivery)."""
        key, payload = check_signal(key, payload)
        await self.queue.commit_effects(effects.kv_put(keys.signal_buffer_key(key), payload))
        return await self._wake(key, payload)

    async def wake_buffered(self, key: str) -> SignalOutcome | None:
        """Hand the signal buffered under ``key`` (if any) to its waiter, as
        `signal` would; None when nothing is buffered."""
        key, _ = check_signal(key)
        payload = self.queue.kv.get(keys.signal_buffer_key(key))
        if payload is None:
            return None
        return await self._wake(key, payload)

    async def clear(self, key: str, *, internal: Mapping[bytes, bytes] | None = None) -> bool:
        """Discard the signal buffered under ``key``; False if there was none.

        ``internal`` (reserved KV puts) commits with the buffer's delete, or
        alone while nothing is buffered when there is nothing to discard.
        """
        key, _ = check_signal(key)
        buf = keys.signal_buffer_key(key)
        while True:
            current = self.queue.kv.get(buf)
            fx = internal_effects(internal)
            if current is not None:
                fx.kv_delete(buf)
            elif fx.is_empty():
                return False
            if await self.queue.kv_compare_commit(buf, current, fx) is not None:
                return current is not None

    async def _wake(self, key: str, payload: bytes) -> SignalOutcome:
        """Step 2 of `signal`: wake the indexed waiter with ``payload``."""
        kv = self.queue.kv
        wait = keys.signal_wait_key(key)
        raw = kv.get(wait)
        if raw is None:
            return SignalOutcome.BUFFERED
        try:
            job_id = raw.decode()
        except UnicodeDecodeError:
            await kv.compare_delete(wait, raw)
            return SignalOutcome.BUFFERED
        # The buffer and the index go in the wake's own transaction: a crash
        # after it cannot leave the signal buffered for a second waiter.
        gone = {keys.signal_buffer_key(key): payload, wait: raw}
        outcome = await self.queue.wake_scheduled(job_id, payload, kv_compare_deletes=gone)
        if outcome is WakeOutcome.WOKEN:
            return SignalOutcome.DELIVERED
        # Stale: the waiter's timeout fired, or its run was cancelled.
        await kv.compare_delete(wait, raw)
        return SignalOutcome.BUFFERED

    # ------------------------------------------------------- registration

    def register(self, key: str, run_id: str, next_payload: bytes) -> Registration:
        """How a step of ``run_id`` returning ``continue_on_signal(next_payload,
        key, ...)`` registers; raises `SignalWaiterExists` when another run's
        step is still scheduled to wait on ``key``.

        Synchronous: call it after the step's last ``await`` and settle what
        it says with nothing awaited in between (see the module docstring).
        """
        raw = self.queue.kv.get(keys.signal_wait_key(key))
        if raw is not None:
            job = self.queue.job_record(raw.decode(errors="replace"))
            if job is not None and job.status is JobStatus.SCHEDULED:
                raise SignalWaiterExists(key, run_id)
        threshold = self.queue.options.payload_offload_threshold
        if threshold is not None and len(next_payload) > threshold:
            return Registration(None, recheck=True)
        return Registration(self.queue.kv.get(keys.signal_buffer_key(key)), recheck=False)

    def recheck_after_commit(self, run_id: str, key: str, job_id: str) -> None:
        """Once the settlement that makes ``job_id`` the waiter on ``key`` is
        durable, wake it with a signal buffered meanwhile.

        The settlement rewrites the run's step pointer, and nothing else
        writes it while the step is claimed, so a watch on the pointer fires
        with that commit (or with a redelivery's, if this settlement failed:
        the index then names another job and nothing happens).
        """
        pointer = keys.pointer_key(run_id)
        fut = self.queue.kv.watch(pointer)

        def fired(f: asyncio.Future[None]) -> None:
            if not f.cancelled() and f.exception() is None:
                self._spawn(self._wake_if_waiting(key, job_id))

        fut.add_done_callback(fired)

    async def _wake_if_waiting(self, key: str, job_id: str) -> None:
        kv = self.queue.kv
        payload = kv.get(keys.signal_buffer_key(key))
        if payload is not None and kv.get(keys.signal_wait_key(key)) == job_id.encode():
            await self._wake(key, payload)

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        task = asyncio.get_running_loop().create_task(coro, name="durable-signal-recheck")
        self._tasks.add(task)

        def done(t: asyncio.Task[None]) -> None:
            self._tasks.discard(t)
            if not t.cancelled() and (error := t.exception()) is not None:
                # The buffer stays: the waiter takes it at its timeout.
                log.warning("signal recheck failed", error=str(error))

        task.add_done_callback(done)

    # --------------------------------------------------------- resolution

    async def resolve(self, rec: JobRecord, run_id: str, step: int) -> bytes | None:
        """The ``Step.signal`` of a claimed step job (semantics 2.10).

        - ``signal_delivered``: the delivered record written by the
          settlement that consumed the buffer.
        - ``signal_wait``: the index entry naming this job is removed; a job
          woken by a signal sees the payload kept on its record (the same on
          every redelivery); at the timeout, a delivered record of an earlier
          attempt wins, else a signal buffered now is moved into the
          delivered record (one compare-and-commit), else None.
        """
        kv = self.queue.kv
        headers = rec.headers
        if HEADER_SIGNAL_DELIVERED not in headers and HEADER_SIGNAL_WAIT not in headers:
            return None  # most steps: nothing to resolve, nothing built
        delivered = keys.signal_delivered_key(run_id, step)
        if HEADER_SIGNAL_DELIVERED in headers:
            payload = kv.get(delivered)
            if payload is None:
                log.warning("delivered signal record is missing", run_id=run_id, step=step)
            return payload
        key = headers[HEADER_SIGNAL_WAIT]
        await kv.compare_delete(keys.signal_wait_key(key), rec.id.encode())
        if rec.woken_at is not None and rec.wake_payload is not None:
            return rec.wake_payload
        if (earlier := kv.get(delivered)) is not None:
            return earlier
        buf = keys.signal_buffer_key(key)
        while (buffered := kv.get(buf)) is not None:
            fx = SettlementEffects().kv_put(delivered, buffered).kv_delete(buf)
            if await self.queue.kv_compare_commit(buf, buffered, fx) is not None:
                return buffered
        return None
