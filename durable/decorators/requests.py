"""Requests into a running workflow: ``durable.receive`` and ``handle.request``.

A caller sends a request and waits for its answer::

    answer = await handle.request("add", 2, timeout=30)

and the workflow takes requests one at a time and answers each::

    req = await durable.receive("add", timeout=60)   # a Request, or None
    await req.reply(total + req.value)                # or: await req.reject("why")

How it is built (on durable signals, `durable.decorators.request_keys`):

- ``handle.request`` checks the run is known (`RunNotFound`) and active
  (`WrongRunState`), then sends the request's *body* as a signal under a
  key of its own (``{run}/{name}/{request id}``: buffered durably, never
  replaced by another request) and then a *ring* under ``{run}/{name}``,
  which wakes a run waiting to receive. The request is durable once the
  body is sent. It then waits for the answer the run publishes under
  ``durable.reply/{name}/{request id}`` (`durable.publish`, no polling).
- ``durable.receive(name, timeout)`` looks for a buffered body it has not
  taken yet (oldest request id first) and journals what it found (a
  position named ``durable.receive``): a replay returns the same request,
  so a worker crash before the answer hands the same request to the
  replayed workflow. With none, it waits for the ring (a durable signal
  wait, `durable.decorators.waits`) and looks again; at the deadline it
  returns None. A ring may be stale (its body already taken): the receive
  just looks again. The deadline is journaled with the first look.
- ``req.reply(value)`` / ``req.reject(reason)`` publish the answer (durable
  when the await returns; a replay never publishes a second one), then
  discard the body. A second answer to one request raises
  `RequestAlreadyAnswered`.
- The caller raises `RequestRejected` for a rejection, `RequestUnanswered`
  when the run ends without an answer, `TimeoutError` after ``timeout``;
  in the last two cases it discards its body (a run that already took it
  may still answer: nobody reads that answer).

Costs: a request is two signals (on a client: two inbox objects); a
receive that finds a request buffered is one journal write; one that waits
is three (a look, the wait, a look); an answer is one publish and one
delete. Each answer stays published with the run until its retention.
"""

from __future__ import annotations

import datetime as _dt
import math
import weakref
from collections.abc import Coroutine
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from durable.decorators.context import RunContext, current_run
from durable.decorators.journal import STEP, Entry
from durable.decorators.parking import FOREVER
from durable.decorators.publish import publish
from durable.decorators.published import check_timeout, wait_published
from durable.decorators.request_keys import body_key, check_request_name, reply_key, ring_key
from durable.decorators.status import WorkflowState, read_status
from durable.decorators.waits import _wait
from durable.engine import keys
from durable.errors import (
    InvalidArgument,
    NotPublished,
    RequestAlreadyAnswered,
    RequestRejected,
    RequestUnanswered,
    RunNotFound,
    WrongRunState,
)

if TYPE_CHECKING:
    from durable.decorators.base import EngineBase

__all__ = ["RECEIVE_NAME", "Request", "receive", "send_request"]

RECEIVE_NAME = "durable.receive"
_RECEIVE = frozenset({STEP})
_ENDED = frozenset({WorkflowState.SUCCEEDED, WorkflowState.FAILED, WorkflowState.CANCELLED})
_PAGE = 64

# The request ids each delivery's workflow has received so far (first run
# and replay alike: every receive journals the id it took).
_received: weakref.WeakKeyDictionary[RunContext, set[str]] = weakref.WeakKeyDictionary()


@dataclass(eq=False)
class Request:
    """A request a workflow received (`receive`): answer it once, with
    `reply` or `reject`, from the workflow body."""

    #: The run it was sent to.
    run_id: str
    #: The name it was sent under (``handle.request(name, ...)``).
    name: str
    #: Its id, unique to this request (the caller's `RequestRejected` and
    #: `RequestUnanswered` carry it too).
    id: str
    #: The value the caller sent.
    value: Any
    _answered: bool = field(default=False, init=False, repr=False)

    async def reply(self, value: object = None) -> None:
        """Answer with ``value`` (through the codec): the caller's
        ``handle.request`` returns it. Durable when the await returns;
        `RequestAlreadyAnswered` if this request was answered before."""
        await self._answer("reply", {"ok": value})

    async def reject(self, reason: str) -> None:
        """Refuse the request: the caller's ``handle.request`` raises
        `RequestRejected` carrying ``reason`` (a str). Durable when the
        await returns; `RequestAlreadyAnswered` if answered before."""
        if not isinstance(reason, str):
            raise InvalidArgument(f"a rejection's reason must be a str, got {reason!r}")
        await self._answer("reject", {"rejected": reason})

    async def _answer(self, how: str, answer: dict[str, Any]) -> None:
        run = current_run(f"Request.{how}()")
        if run.run_id != self.run_id:
            raise InvalidArgument(
                f"request {self.name!r} ({self.id}) was sent to run {self.run_id!r}: "
                f"only that run answers it, not run {run.run_id!r}"
            )
        if self._answered:
            raise RequestAlreadyAnswered(self.run_id, self.name, self.id)
        self._answered = True
        await publish(reply_key(self.name, self.id), answer)
        body = body_key(self.run_id, self.name, self.id)
        task = run.track()  # the delivery does not suspend while the delete is in flight
        try:
            await run.engine.for_key(body).workflows.default.clear_signal(body)
        finally:
            run.untrack(task)


def _seconds(value: object) -> float:
    if isinstance(value, _dt.timedelta):
        value = value.total_seconds()
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise InvalidArgument(
            f"durable.receive() timeout takes seconds (a number) or a timedelta, got {value!r}"
        )
    if value <= 0:
        raise InvalidArgument(f"durable.receive() timeout must be positive, got {value!r}")
    return float(value)


def receive(
    name: str, timeout: float | _dt.timedelta | None = None
) -> Coroutine[Any, Any, Request | None]:
    """Wait durably for the next request sent under ``name`` to this run
    (``handle.request(name, value)``), at most ``timeout`` seconds (None:
    without limit): the `Request`, or None at the timeout. Requests are
    taken oldest first, each once; a request sent before the receive is
    waiting is kept for it. Only in a workflow; see the module docstring."""
    run = current_run("durable.receive()")
    check_request_name(name)
    limit = FOREVER if timeout is None else _seconds(timeout)
    return _receive(run, run.next_position(), name, limit)


async def _receive(run: RunContext, position: int, name: str, limit: float) -> Request | None:
    deadline: int | None = None
    while True:
        deadline, expired, found = await _take(run, position, name, limit, deadline)
        if found is not None or expired:
            return found
        remaining = max((deadline - run.clock.now_ms()) / 1000, 0.001)
        rung = await _wait(run, run.next_position(), ring_key(run.run_id, name), remaining)
        if rung is None:
            return None  # the wait's deadline (this receive's) passed
        position = run.next_position()


async def _take(
    run: RunContext, position: int, name: str, limit: float, deadline: int | None
) -> tuple[int, bool, Request | None]:
    """One look for a request at ``position``: ``(deadline, expired, request
    or None)``, journaled (a replay answers the same)."""
    task = run.track()
    try:
        entry = run.entry_at(position, _RECEIVE, RECEIVE_NAME, f"{RECEIVE_NAME}({name!r})")
        if entry is None:
            if deadline is None:
                deadline = run.clock.now_ms() + round(min(limit, FOREVER) * 1000)
            taken = _oldest(run, name)
            now = run.clock.now_ms()
            data: dict[str, Any] = {
                "deadline": deadline,
                "expired": now >= deadline,
                "id": None,
                "value": None,
            }
            if taken is not None:
                data["id"], data["value"] = taken
            ok = run.codec.dumps(data, what=f"request {name!r} received by run {run.run_id!r}")
            entry = await run.record(position, Entry(RECEIVE_NAME, STEP, ok=ok, time=now))
        data = await run.replay(position, entry)
        if data.get("id") is None:
            return int(data["deadline"]), bool(data["expired"]), None
        request_id: str = data["id"]
        _received.setdefault(run, set()).add(request_id)
        what = f"the value of request {name!r} ({request_id}) to run {run.run_id!r}"
        value = run.codec.loads(data["value"], what=what)
        return int(data["deadline"]), False, Request(run.run_id, name, request_id, value)
    finally:
        run.untrack(task)


def _oldest(run: RunContext, name: str) -> tuple[str, bytes] | None:
    """The oldest buffered request ``name`` of the run that it has not
    received yet: ``(request id, encoded value)``, or None."""
    ring = ring_key(run.run_id, name)
    kv = run.engine.for_key(ring).queue.kv.internal()
    prefix = keys.signal_buffer_key(ring + "/")
    received = _received.get(run, set())
    start: bytes | None = None
    while True:
        page = kv.scan(prefix, start, inclusive=(False, False), limit=_PAGE)
        for key, raw in page.entries:
            request_id = key[len(prefix) :].decode()
            if request_id in received:
                continue
            body = run.codec.loads(raw, what=f"request {name!r} ({request_id})")
            if isinstance(body, dict) and isinstance(body.get("value"), bytes):
                return request_id, body["value"]
        if not page.more:
            return None
        start = page.last_key


# ------------------------------------------------------------- the caller


def _request_id(engine: EngineBase, run_id: str) -> str:
    """A new request id: a ULID of the run's store's monotonic generator, so
    the requests of one caller sort in the order it sent them."""
    return engine.for_run(run_id).queue.next_job_id()


async def _signal(engine: EngineBase, key: str, value: object) -> None:
    signal = getattr(engine, "signal", None)
    if signal is not None:  # an Engine: sends what this process staged first
        await signal(key, value)
        return
    payload = engine.codec.dumps(value, what=f"the signal for {key!r}")
    await engine.for_key(key).workflows.default.signal(key, payload)


async def _discard(engine: EngineBase, *keys_: str) -> None:
    for key in keys_:
        await engine.for_key(key).workflows.default.clear_signal(key)


async def send_request(
    engine: EngineBase,
    run_id: str,
    name: str,
    value: object,
    timeout: float | None,  # noqa: ASYNC109
) -> Any:
    """``handle.request``: send request ``name`` with ``value`` to run
    ``run_id`` and return the answer; see the module docstring."""
    check_request_name(name)
    check_timeout(timeout)
    what = f"handle.request({name!r})"
    clock = engine.clock
    deadline = None if timeout is None else clock.now_ms() + round(timeout * 1000)
    status = await read_status(engine, run_id)
    if status is None:
        raise RunNotFound(run_id, what)
    if status.state in _ENDED:
        raise WrongRunState(run_id, what, status.state.value, "active")
    request_id = _request_id(engine, run_id)
    encoded = engine.codec.dumps(value, what=f"the value of request {name!r} to run {run_id!r}")
    body = body_key(run_id, name, request_id)
    await _signal(engine, body, {"id": request_id, "value": encoded})  # durable from here
    await _signal(engine, ring_key(run_id, name), request_id)
    try:
        left = None if deadline is None else max(deadline - clock.now_ms(), 0) / 1000
        answer = await wait_published(engine, run_id, reply_key(name, request_id), left)
    except NotPublished:
        await _discard(engine, body, ring_key(run_id, name))
        raise RequestUnanswered(run_id, name, request_id) from None
    except TimeoutError:
        await _discard(engine, body)
        raise TimeoutError(
            f"run {run_id!r} did not answer request {name!r} ({request_id}) within "
            f"{timeout} seconds; the request is withdrawn"
        ) from None
    if isinstance(answer, dict) and "rejected" in answer:
        raise RequestRejected(run_id, name, request_id, str(answer["rejected"]))
    if not isinstance(answer, dict) or "ok" not in answer:
        raise InvalidArgument(f"run {run_id!r} published a malformed answer to {name!r}")
    return answer["ok"]
