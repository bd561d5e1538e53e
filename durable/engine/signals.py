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

Across partitions. A store that is one partition of several
(`durable.cluster.signal_route`) has a `SignalRoute`: each key has a *home*
partition, which alone holds the key's buffer and waiter index. A run
waiting on a key whose home is another partition registers there by
message, and the home forwards a signal to it by message; every message is
an inbox request sent from an outbox record committed with the transaction
that decides to send it (`durable.cluster.outbox`), so it leaves only once
that transaction is durable and is applied once (done records). A is the
waiting run's partition, H the key's home:

- registration at A (`register` answers ``remote``): the settlement
  schedules the next step at the timeout, as always, writes no index and
  stages a *register* message to H (`registration_effects`);
- *register* at H (`accept_waiter`): a buffered signal is consumed and a
  *deliver* message sent back; else a live waiter of another run *rejects*
  it (the rejected run fails with `SignalWaiterExists` when its waiting
  step is claimed); else the index names the remote waiter
  (`RemoteWaiter`, tagged so it is never taken for a local job id);
- ``signal`` at H with a remote waiter: one commit deletes the index and
  stages *deliver* (`SignalOutcome.DELIVERED`); without one, as above;
- *deliver* at A (`take_delivery`): the waiting job, still scheduled on the
  key, is woken with the payload (its done record rides the wake); else
  the run moved on (timed out, cancelled) and the payload goes *back* to H
  (`take_back`), which buffers it unless a newer signal is buffered;
- the timeout at A (`resolve`), or a cancel removing the waiting step
  (`cancel_effects`): an *unregister* to H, which compare-deletes its index;
- ``signal`` or ``clear`` of a key on a partition that is not its home is
  forwarded there (`SignalOutcome.SENT`).

What it costs (KV-only commits; each message is one outbox put riding a
commit the sender makes anyway, then one inbox object or a direct apply
when this process owns the target, one apply commit at the target with
its done record, and one outbox delete at the sender, batched): a wait
whose key's home is its own partition costs what it does on one store; a
cross-partition wait costs its register message; a signal to a remote
waiter costs one commit at H and the deliver message (the wake is its
apply commit); a timeout costs one commit at A and the unregister.

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

from durable import events
from durable._logging import get_logger
from durable.engine import keys
from durable.engine.access import RunQueue
from durable.engine.runs import HEADER_RUN_ID, HEADER_SIGNAL_DELIVERED, HEADER_SIGNAL_WAIT
from durable.engine.signal_routes import (
    REMOTE_WAITER_TAG,
    RemoteWaiter,
    SignalRoute,
    decode_remote_waiter,
    encode_remote_waiter,
)
from durable.engine.transitions import internal_effects
from durable.errors import InvalidArgument, SignalWaiterExists
from durable.store.keyspace import MAX_KV_VALUE_SIZE
from durable.store.queue import JobRecord, JobStatus, SettlementEffects, WakeOutcome

__all__ = [
    "REMOTE_WAITER_TAG",
    "Registration",
    "RemoteWaiter",
    "SignalOutcome",
    "SignalRoute",
    "Signals",
    "check_signal",
    "decode_remote_waiter",
    "encode_remote_waiter",
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
    ``remote``: the key's home is another partition: the settlement writes
    no waiter index and sends the register message
    (`Signals.registration_effects`).
    """

    buffered: bytes | None
    recheck: bool
    remote: bool = False


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
    """The signal records of one store, for the runtime of queue
    ``queue_name`` on ``queue``; see the module docstring."""

    def __init__(self, queue: RunQueue, queue_name: str) -> None:
        self.queue = queue
        self.queue_name = queue_name
        #: Where keys live when the store is one partition of several
        #: (set by the layer that partitions); None: every key lives here.
        self.route: SignalRoute | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    def _remote(self, key: str) -> SignalRoute | None:
        """The route, when ``key``'s home is another partition."""
        route = self.route
        return route if route is not None and not route.is_home(key) else None

    def _home_route(self, key: str, what: str) -> SignalRoute:
        """The route, for a message only a partition that is ``key``'s home applies."""
        route = self.route
        if route is None or not route.is_home(key):
            raise InvalidArgument(
                f"a {what} message for correlation key {key!r} reached a store that is not "
                "the key's home partition"
            )
        return route

    def _route(self, what: str) -> SignalRoute:
        if self.route is None:
            raise InvalidArgument(f"a {what} message reached a store that is not partitioned")
        return self.route

    # --------------------------------------------------------- signalling

    async def signal(self, key: str, payload: bytes) -> SignalOutcome:
        """Deliver ``payload`` to the run waiting on ``key``, or buffer it."""
        return await self.signal_with(key, payload, SettlementEffects())

    async def signal_with(
        self, key: str, payload: bytes, effects: SettlementEffects
    ) -> SignalOutcome:
        """`signal`, committing ``effects`` atomically with the buffer write
        (how a `ReplyWatcher` retires its marker with the delivery)."""
        outcome = await self._signal_with(key, payload, effects)
        events.emit("signal", key=key, queue=self.queue_name, outcome=outcome.name.lower())
        return outcome

    async def _signal_with(
        self, key: str, payload: bytes, effects: SettlementEffects
    ) -> SignalOutcome:
        key, payload = check_signal(key, payload)
        if (route := self._remote(key)) is not None:
            fx = internal_effects(route.forward_signal(self.queue_name, key, payload), effects)
            await self.queue.commit_effects(fx)
            return SignalOutcome.SENT
        if self.route is not None and (handed := await self._hand_over(key, payload, effects)):
            return handed
        await self.queue.commit_effects(effects.kv_put(keys.signal_buffer_key(key), payload))
        return await self._wake(key, payload)

    async def _hand_over(
        self, key: str, payload: bytes, effects: SettlementEffects
    ) -> SignalOutcome | None:
        """At the key's home, with a remote waiter indexed: delete the index
        (and an older buffered signal this one replaces) and send the
        waiter ``payload``, with ``effects``, in one commit. None (nothing
        written) without a remote waiter."""
        route = self._route("signal")
        kv, wait, buf = self.queue.kv, keys.signal_wait_key(key), keys.signal_buffer_key(key)
        while True:
            raw = kv.get(wait)
            waiter = decode_remote_waiter(raw) if raw is not None else None
            if waiter is None:
                return None
            # Nothing is awaited from these reads to the commit's staging
            # (KV-only effects): the compare on the index is a safety net.
            fx = internal_effects(route.deliver(key, waiter, payload), effects).kv_delete(wait)
            if kv.get(buf) is not None:
                fx.kv_delete(buf)
            if await self.queue.kv_compare_commit(wait, raw, fx) is not None:
                return SignalOutcome.DELIVERED

    async def wake_buffered(self, key: str) -> SignalOutcome | None:
        """Hand the signal buffered under ``key`` (if any) to its waiter, as
        `signal` would; None when nothing is buffered."""
        key, _ = check_signal(key)
        if self._remote(key) is not None:
            return None  # its buffer is at its home
        payload = self.queue.kv.get(keys.signal_buffer_key(key))
        if payload is None:
            return None
        return await self._wake(key, payload)

    async def clear(self, key: str, *, internal: Mapping[bytes, bytes] | None = None) -> bool:
        """Discard the signal buffered under ``key``; False if there was none.

        ``internal`` (reserved KV puts) commits with the buffer's delete, or
        alone while nothing is buffered when there is nothing to discard.
        On a partition that is not the key's home the clear is forwarded
        there, with ``internal``, and this returns False.
        """
        key, _ = check_signal(key)
        if (route := self._remote(key)) is not None:
            fx = internal_effects(route.forward_clear(self.queue_name, key))
            await self.queue.commit_effects(internal_effects(internal, fx))
            return False
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
        if self.route is not None and (waiter := decode_remote_waiter(raw)) is not None:
            # Hand it to the remote waiter: the index and (if it still holds
            # this signal) the buffer go with the deliver message's staging.
            fx = SettlementEffects().kv_delete(wait)
            if kv.get(keys.signal_buffer_key(key)) == payload:
                fx.kv_delete(keys.signal_buffer_key(key))
            internal_effects(self.route.deliver(key, waiter, payload), fx)
            if await self.queue.kv_compare_commit(wait, raw, fx) is not None:
                return SignalOutcome.DELIVERED
            return SignalOutcome.BUFFERED  # the index changed: it is buffered for the next
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
        A key whose home is another partition registers there by message
        (``remote``; `registration_effects`).
        """
        if self._remote(key) is not None:
            return Registration(None, recheck=False, remote=True)
        raw = self.queue.kv.get(keys.signal_wait_key(key))
        if raw is not None and self.route is not None and decode_remote_waiter(raw) is not None:
            raise SignalWaiterExists(key, run_id)  # a run of another partition waits
        if raw is not None:
            job = self.queue.job_record(raw.decode(errors="replace"))
            if job is not None and job.status is JobStatus.SCHEDULED:
                raise SignalWaiterExists(key, run_id)
        threshold = self.queue.options.payload_offload_threshold
        if threshold is not None and len(next_payload) > threshold:
            return Registration(None, recheck=True)
        return Registration(self.queue.kv.get(keys.signal_buffer_key(key)), recheck=False)

    def registration_effects(
        self, effects: SettlementEffects, key: str, run_id: str, job_id: str
    ) -> SettlementEffects:
        """``effects`` (a settlement scheduling ``job_id`` to wait on
        ``key``) plus the register message to the key's home, for a
        `Registration` that is ``remote``."""
        route = self._remote(key)
        assert route is not None, "a remote registration needs a route"
        return internal_effects(
            route.register(key, RemoteWaiter(run_id, job_id, self.queue_name)), effects
        )

    def cancel_effects(
        self, job: JobRecord | None, effects: SettlementEffects
    ) -> SettlementEffects:
        """``effects`` (of a cancel that removes ``job``) plus, when ``job``
        waits on a key whose home is another partition, the unregister
        message to that home (so its index never names a removed waiter)."""
        key = job.headers.get(HEADER_SIGNAL_WAIT) if job is not None else None
        if job is None or key is None or (route := self._remote(key)) is None:
            return effects
        run_id = job.headers.get(HEADER_RUN_ID, "")
        return internal_effects(
            route.unregister(key, RemoteWaiter(run_id, job.id, job.queue)), effects
        )

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
        if (route := self._remote(key)) is not None:
            return await self._resolve_remote(route, rec, run_id, key)
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

    async def _resolve_remote(
        self, route: SignalRoute, rec: JobRecord, run_id: str, key: str
    ) -> bytes | None:
        """`resolve` of a step waiting on a key whose home is another
        partition: woken by a deliver message (its payload), by a reject
        (`SignalWaiterExists`: woken without a payload), or at its timeout
        (None, and the home is told to forget the waiter: one commit)."""
        if rec.woken_at is not None:
            if rec.wake_payload is None:
                raise SignalWaiterExists(key, run_id)
            return rec.wake_payload
        waiter = RemoteWaiter(run_id, rec.id, rec.queue)
        await self.queue.commit_effects(internal_effects(route.unregister(key, waiter)))
        return None

    # ------------------------------------------- messages across partitions

    async def accept_waiter(
        self, key: str, waiter: RemoteWaiter, *, internal: Mapping[bytes, bytes] | None = None
    ) -> None:
        """At ``key``'s home, a register message: consume a buffered signal
        (deliver it), reject ``waiter`` while another run waits, or index
        it; with ``internal`` in the same commit."""
        key, _ = check_signal(key)
        route = self._home_route(key, "register")
        kv, wait, buf = self.queue.kv, keys.signal_wait_key(key), keys.signal_buffer_key(key)
        while True:
            raw, buffered = kv.get(wait), kv.get(buf)
            fx = internal_effects(internal)
            if raw is not None and self._waits_elsewhere(raw, waiter.run_id):
                internal_effects(route.reject(key, waiter), fx)
            elif buffered is not None:
                fx.kv_delete(buf)
                if raw is not None:
                    fx.kv_delete(wait)  # stale
                internal_effects(route.deliver(key, waiter, buffered), fx)
            else:
                fx.kv_put(wait, encode_remote_waiter(waiter))
            # Nothing is awaited from these reads to the staging (KV-only
            # effects), so the buffer read holds too; the compare is a net.
            if await self.queue.kv_compare_commit(wait, raw, fx) is not None:
                return

    def _waits_elsewhere(self, raw: bytes, run_id: str) -> bool:
        """True when the index value ``raw`` names a live waiter that is not
        run ``run_id`` (a remote one is live until its unregister comes)."""
        remote = decode_remote_waiter(raw)
        if remote is not None:
            return remote.run_id != run_id
        job = self.queue.job_record(raw.decode(errors="replace"))
        return job is not None and job.status is JobStatus.SCHEDULED

    async def drop_waiter(
        self, key: str, waiter: RemoteWaiter, *, internal: Mapping[bytes, bytes] | None = None
    ) -> None:
        """At ``key``'s home, an unregister message: delete the index if it
        still names ``waiter``'s job; with ``internal`` in the same commit."""
        key, _ = check_signal(key)
        kv, wait = self.queue.kv, keys.signal_wait_key(key)
        while True:
            raw = kv.get(wait)
            current = decode_remote_waiter(raw) if raw is not None else None
            fx = internal_effects(internal)
            if current is not None and current.job_id == waiter.job_id:
                fx.kv_delete(wait)
            elif fx.is_empty():
                return
            if await self.queue.kv_compare_commit(wait, raw, fx) is not None:
                return

    async def take_delivery(
        self,
        key: str,
        waiter: RemoteWaiter,
        payload: bytes,
        *,
        internal: Mapping[bytes, bytes] | None = None,
    ) -> None:
        """In the waiting run's partition, a deliver message: wake the step
        job still scheduled on ``key`` with ``payload`` (``internal`` rides
        the wake), else send ``payload`` back to the key's home."""
        key, payload = check_signal(key, payload)
        route = self._route("deliver")
        if self._waiting(waiter.job_id, key):
            woke = await self.queue.wake_scheduled(waiter.job_id, payload, kv_puts=internal)
            if woke is WakeOutcome.WOKEN:
                return
        # Timed out, cancelled or gone: a job never becomes scheduled again.
        fx = internal_effects(route.give_back(waiter.queue, key, payload))
        await self.queue.commit_effects(internal_effects(internal, fx))

    async def take_rejection(
        self, key: str, waiter: RemoteWaiter, *, internal: Mapping[bytes, bytes] | None = None
    ) -> None:
        """In the waiting run's partition, a reject message: wake the step
        job still scheduled on ``key`` without a payload, so its claim fails
        the run with `SignalWaiterExists`; a run that moved on is left alone."""
        key, _ = check_signal(key)
        if self._waiting(waiter.job_id, key):
            woke = await self.queue.wake_scheduled(waiter.job_id, None, kv_puts=internal)
            if woke is WakeOutcome.WOKEN:
                return
        if internal:
            await self.queue.commit_effects(internal_effects(internal))

    def _waiting(self, job_id: str, key: str) -> bool:
        job = self.queue.job_record(job_id)
        return (
            job is not None
            and job.status is JobStatus.SCHEDULED
            and job.headers.get(HEADER_SIGNAL_WAIT) == key
        )

    async def take_back(
        self, key: str, payload: bytes, *, internal: Mapping[bytes, bytes] | None = None
    ) -> SignalOutcome:
        """At ``key``'s home, a give-back message (a delivered signal no
        waiter took): dropped when a newer signal is buffered (it replaced
        this one), else signalled again (`signal_with`: buffered, or handed
        to the waiter indexed now); with ``internal`` in the same commit."""
        key, payload = check_signal(key, payload)
        self._home_route(key, "give-back")
        buf = keys.signal_buffer_key(key)
        while (buffered := self.queue.kv.get(buf)) is not None:
            fx = internal_effects(internal)
            if fx.is_empty() or await self.queue.kv_compare_commit(buf, buffered, fx) is not None:
                return SignalOutcome.BUFFERED
        # Nothing awaited from the read of the empty buffer to the put.
        return await self.signal_with(key, payload, internal_effects(internal))
