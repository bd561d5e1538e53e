"""`InboxApplier`: the owner of a store applies the requests in its inbox.

A pass LISTs ``inbox/`` and applies what it finds:

1. every ``inbox/submit/`` object first, several at once (they name
   distinct runs). Causality: a process that started a run and then
   signalled or cancelled it wrote the submit before the later request, so
   a listing that shows the later request shows the submit too, unless it
   was applied already. A LIST is not a snapshot (a local directory is
   walked folder by folder), so when the listing holds ``req/`` objects
   ``inbox/submit/`` is listed once more, after it;
2. then the ``inbox/req/`` objects one at a time, in name order (each
   writer's requests in the order it made them).

Each request is read and decoded, then applied by the runtime of its queue
(``resolve(queue)``), with its done record (`durable.cluster.done`) in the
transaction that performs the operation; once that is durable the object is
deleted (the deletes of a pass go in one call at its end). Exactly once:

- a request whose done record exists is only deleted (a crash between the
  commit and the delete re-ingests a no-op). The follow-up the crash may
  have cut short is redone: a signal buffered but not yet handed to its
  waiter is handed over (`Signals.wake_buffered`), a run whose
  cancellation is recorded but whose queued step was not yet removed is
  cancelled again;
- bytes that do not decode (`CorruptRequest`) are copied to
  ``inbox-corrupt/<same name>``, deleted from the inbox and logged as an
  error event naming the key;
- an operation that raises for the request itself (`InputMismatch`, a bad
  key, an unknown queue: anything but a `StoreError`) is recorded as
  applied with the error in its done record, and logged;
- a `StoreError` ends the pass (the request stays for the next one); when
  the store's writer has stopped (`Fenced`, `StoreClosed`) the loop ends.

None of these ever blocks the requests behind it.

`apply_direct` applies a request handed over by a sender in this process
(the outbox of another partition this process owns,
`durable.cluster.outbox`) without its object: the same done record, under
the name the object would have, so should the sender crash before it
notes the request sent and write the object after all, the copy is only
deleted. A request is applied by one caller at a time (a lock per name).

Pacing (`InboxPacing`, the `durable.store.pacing.Pacing` a client's
follower uses too): on a local directory or in memory a pass every 2 ms
while requests keep coming and for a second after, backing off x2 to 50 ms
when idle (a LIST there is a directory scan, but waking every 2 ms for ever
cost 14-20% of a core); on object stores every 0.2 s while requests keep
coming, backing off x2 to 5 s when idle. `wake` starts a pass at once. The
intervals run on the event loop's time, not the injected clock: they pace
I/O, like the log's write retries.
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, TypeVar

from durable._logging import get_logger
from durable.cluster.done import DONE_RETENTION, DoneRecords
from durable.cluster.operations import apply_request, follow_up
from durable.cluster.requests import (
    CORRUPT_PREFIX,
    INBOX_PREFIX,
    REQ_PREFIX,
    SUBMIT_PREFIX,
    Request,
    decode_request,
)
from durable.errors import (
    CorruptRequest,
    Fenced,
    ObjectNotFound,
    StoreClosed,
    StoreError,
)
from durable.store.clock import Clock
from durable.store.ids import IdGenerator
from durable.store.kv import KvNamespace
from durable.store.log.retry import DEFAULT_RETRY_SECONDS, create_retrying, retry_transient
from durable.store.objects.base import ObjectStore
from durable.store.pacing import LOCAL_PACING, OBJECT_STORE_PACING, Pacer, Pacing, default_pacing

if TYPE_CHECKING:
    from durable.engine.runtime import WorkflowRuntime

__all__ = [
    "LOCAL_PACING",
    "OBJECT_STORE_PACING",
    "InboxApplier",
    "InboxPacing",
    "Resolve",
    "default_pacing",
]

log = get_logger("durable.cluster.inbox")

_T = TypeVar("_T")

#: Finds the runtime of a request's queue; None: no runtime serves it here.
Resolve = Callable[[str], "WorkflowRuntime | None"]

#: Submissions applied at once in a pass.
_SUBMIT_CONCURRENCY = 64
#: After a failed pass, the wait before the next one, doubling up to `_ERROR_MAX`.
_ERROR_DELAY = 0.05
_ERROR_MAX = 5.0


#: How often `InboxApplier` lists the inbox (the pacing of every polling loop).
InboxPacing = Pacing


def _error_delay(pacing: Pacing, failures: int) -> float:
    """The wait after ``failures`` failed passes in a row: 0.05 s doubling
    up to 5 s (at least ``busy``)."""
    delay = _ERROR_DELAY * 2.0 ** min(failures - 1, 20)
    return max(pacing.busy, min(delay, _ERROR_MAX))


class InboxApplier:
    """Applies the inbox of the store ``objects`` (owned by this process,
    whose KV namespace is ``kv``); see the module docstring.

    ``resolve`` maps a request's queue to the runtime that applies it.
    ``clock`` stamps the done records, swept after ``retention`` seconds.
    """

    def __init__(
        self,
        objects: ObjectStore,
        kv: KvNamespace,
        resolve: Resolve,
        clock: Clock,
        *,
        pacing: InboxPacing | None = None,
        retention: float = DONE_RETENTION,
        retry_seconds: float = DEFAULT_RETRY_SECONDS,
    ) -> None:
        self._objects = objects
        self._done = DoneRecords(kv)
        self._resolve = resolve
        self._clock = clock
        self._ids = IdGenerator(clock)
        self._pacer = Pacer(pacing if pacing is not None else default_pacing(objects))
        self._retention = retention
        self._retry = retry_seconds
        self._pass_lock = asyncio.Lock()
        self._name_locks: weakref.WeakValueDictionary[str, asyncio.Lock] = (
            weakref.WeakValueDictionary()
        )
        self._stopping = False
        self._task: asyncio.Task[None] | None = None

    @property
    def pacing(self) -> Pacing:
        """How often the loop lists the inbox (read before every wait; may be
        replaced at any time)."""
        return self._pacer.pacing

    @pacing.setter
    def pacing(self, pacing: Pacing) -> None:
        self._pacer.pacing = pacing

    # ------------------------------------------------------------ lifecycle

    def start(self) -> None:
        """Start the loop on this event loop (a no-op while it runs)."""
        if self._task is not None and not self._task.done():
            return
        self._stopping = False
        self._task = asyncio.get_running_loop().create_task(self._run(), name="durable-inbox")

    async def stop(self) -> None:
        """Stop the loop: the request being applied finishes, the rest stay
        in the inbox for the next pass (or owner)."""
        self._stopping = True
        self._pacer.wake()
        if self._task is not None:
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None

    async def join(self) -> None:
        """Wait until the loop has ended: by `stop`, or by itself once the
        store's writer stopped (`Fenced`, `StoreClosed`)."""
        if self._task is not None:
            await asyncio.gather(self._task, return_exceptions=True)

    @property
    def running(self) -> bool:
        """True while the loop runs."""
        return self._task is not None and not self._task.done()

    def wake(self) -> None:
        """Start the next pass now, at the busy pace."""
        self._pacer.wake()

    async def apply_direct(self, name: str, data: bytes) -> bool:
        """Apply the request ``data`` as if it were inbox object ``name``
        (see the module docstring): True applied now, False applied before.

        `CorruptRequest` for bytes that do not decode; `StoreClosed` once the
        applier stops (write the object instead: the next owner applies it);
        a `StoreError` of the operation propagates (nothing durable, or its
        done record, which makes the object a no-op).
        """
        request = decode_request(name, data)
        if self._stopping:
            raise StoreClosed(self._objects.url, "its inbox applier stopped")
        return await self._apply(name, request)

    async def apply_now(self) -> int:
        """One pass now (passes run one at a time); how many requests it
        applied (failed ones included, not those found applied already)."""
        async with self._pass_lock:
            return (await self._pass())[1]

    # ----------------------------------------------------------------- loop

    async def _run(self) -> None:
        pacer = self._pacer
        failures = 0
        while not self._stopping:
            pacer.begin()
            try:
                async with self._pass_lock:
                    listed, _ = await self._pass()
                failures = 0
            except (Fenced, StoreClosed) as e:
                log.warning("inbox applier stops: the store's writer stopped", error=str(e))
                return
            except Exception as e:  # logged; the next pass retries
                failures += 1
                log.warning("inbox pass failed", error=str(e), failures=failures)
                listed = 0
            if failures:
                delay = _error_delay(pacer.pacing, failures)
            else:
                delay = pacer.polled(found=bool(listed))
            await pacer.sleep(delay)

    async def _pass(self) -> tuple[int, int]:
        """(objects listed, requests applied)."""
        await self._done.sweep(self._clock.now_ms(), self._retention)
        names = await self._list(INBOX_PREFIX)
        submits = [n for n in names if n.startswith(SUBMIT_PREFIX)]
        others = [n for n in names if not n.startswith(SUBMIT_PREFIX)]
        if any(n.startswith(REQ_PREFIX) for n in others):
            submits = sorted({*submits, *await self._list(SUBMIT_PREFIX)})
        handled: list[str] = []
        applied = 0

        def took(name: str, outcome: bool | None) -> None:
            nonlocal applied
            if outcome is not None:
                handled.append(name)
            applied += outcome is True

        try:
            outcomes = await _bounded(submits, self._take, _SUBMIT_CONCURRENCY)
            for name, outcome in zip(submits, outcomes, strict=True):
                if not isinstance(outcome, BaseException):
                    took(name, outcome)
            for outcome in outcomes:
                if isinstance(outcome, BaseException):
                    raise outcome
            for name in others:
                if self._stopping:
                    break
                took(name, await self._take(name))
        finally:
            if handled:
                await retry_transient(
                    lambda: self._objects.delete(handled), INBOX_PREFIX, self._retry
                )
        return len(names), applied

    async def _list(self, prefix: str) -> list[str]:
        return await retry_transient(lambda: self._objects.list(prefix), prefix, self._retry)

    # -------------------------------------------------------------- requests

    async def _take(self, name: str) -> bool | None:
        """Handle request object ``name``: True applied now, False applied
        before (delete it), None nothing to delete (gone, or moved aside)."""
        if self._stopping:
            return None
        try:
            data = await retry_transient(lambda: self._objects.get(name), name, self._retry)
        except ObjectNotFound:
            return None  # applied and deleted already
        try:
            request = decode_request(name, data)
        except CorruptRequest as e:
            await self._quarantine(name, data, e)
            return None
        return await self._apply(name, request)

    async def _apply(self, name: str, request: Request) -> bool:
        """Apply ``request`` named ``name`` unless its done record exists:
        True applied now, False applied before (its follow-up redone)."""
        lock = self._name_locks.get(name)
        if lock is None:
            lock = self._name_locks[name] = asyncio.Lock()
        async with lock:
            return await self._apply_locked(name, request)

    async def _apply_locked(self, name: str, request: Request) -> bool:
        runtime = self._resolve(request.queue)
        if self._done.get(name, request.nonce) is not None:
            if runtime is not None:
                try:
                    await follow_up(runtime, request)
                except StoreError:
                    raise
                except Exception as e:  # the request was applied: delete it all the same
                    log.warning("inbox follow-up failed", key=name, error=str(e))
            return False
        now = self._clock.now_ms()
        if runtime is None:
            error = LookupError(f"no runtime of queue {request.queue!r} runs in the owner")
            log.error("inbox request for an unknown queue", key=name, queue=request.queue)
            await self._done.commit(self._done.writes(name, request.nonce, now, error))
            return True
        try:
            await apply_request(runtime, request, self._done.writes(name, request.nonce, now))
        except StoreError:
            raise
        except Exception as e:  # the request's own error: recorded, never retried
            log.error("inbox request failed", key=name, error=str(e), error_type=type(e).__name__)
            await self._done.commit(self._done.writes(name, request.nonce, now, e))
        return True

    async def _quarantine(self, name: str, data: bytes, error: CorruptRequest) -> None:
        """Copy ``name`` to ``inbox-corrupt/``, delete it, log it."""
        target = CORRUPT_PREFIX + name.removeprefix(INBOX_PREFIX)
        if await create_retrying(self._objects, target, data, self._retry) is not None:
            target = f"{target}~{self._ids.next()}"  # an older corrupt object of that name
            await create_retrying(self._objects, target, data, self._retry)
        await retry_transient(lambda: self._objects.delete([name]), name, self._retry)
        log.error(
            "corrupt inbox request moved aside", key=name, moved_to=target, reason=error.reason
        )


async def _bounded(
    items: Sequence[str], call: Callable[[str], Awaitable[_T]], limit: int
) -> list[_T | BaseException]:
    """``call`` on every item, at most ``limit`` at once; results (or the
    exceptions raised) in item order."""
    gate = asyncio.Semaphore(limit)

    async def one(item: str) -> _T:
        async with gate:
            return await call(item)

    return await asyncio.gather(*(one(i) for i in items), return_exceptions=True)
