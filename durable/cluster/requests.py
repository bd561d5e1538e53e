"""The inbox's requests: what a process that does not own a store asks its owner to do.

A request is one object under the store's ``inbox/`` prefix:

- ``inbox/submit/<run_id>``: a `SubmitRequest`, one object per run id,
  written create-if-absent, so two processes submitting the same run id at
  once collapse to one object;
- ``inbox/req/<ulid>``: every other kind (`SignalRequest`, `CancelRequest`,
  `ClearSignalRequest`, `GroupMarkRequest`, `RequeueRequest`, `ForgetRequest`,
  `ScheduleRequest`, and the
  messages partitions
  send each other about signal keys: `SignalRegisterRequest`,
  `SignalUnregisterRequest`, `SignalDeliverRequest`, `SignalRejectRequest`,
  `SignalReturnRequest`, see `durable.engine.signals`), named by a ULID
  from the writer's monotonic generator, so one writer's requests sort in
  the order it made them.

The bytes are a frame (`durable.store.framing`, kind `Kind.INBOX`, with its
checksum) around a MessagePack map: ``"v"`` (the format version), ``"kind"``,
``"nonce"`` (16 random bytes that make each request instance unique: the
owner's done record names it), ``"queue"`` (the runtime's queue) and the
kind's fields. `decode_request` turns any bytes read from a request's
object into a checked request or raises `CorruptRequest` naming the object;
a request whose fields do not fit its kind, or whose name does not fit its
content (a submit of another run id, a submit under ``req/``), is corrupt.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import msgpack

from durable.engine._checks import check_bytes
from durable.engine.records import GroupMembership
from durable.engine.runs import RESERVED_KV_PREFIX, RunOptions, RunSpec, validate_run_id
from durable.engine.schedules import validate_schedule_id
from durable.engine.signals import RemoteWaiter, check_signal
from durable.errors import CorruptObject, CorruptRequest, InvalidArgument, UnsupportedFormat
from durable.store.framing import Kind, frame, unframe
from durable.store.ids import validate_id
from durable.store.keyspace import check_kv_value
from durable.store.queue.options import validate_queue_name

__all__ = [
    "CORRUPT_PREFIX",
    "INBOX_PREFIX",
    "NONCE_SIZE",
    "REQUEST_FORMAT_VERSION",
    "REQ_PREFIX",
    "SUBMIT_PREFIX",
    "CancelRequest",
    "ClearSignalRequest",
    "ForgetRequest",
    "GroupMarkRequest",
    "Request",
    "RequeueRequest",
    "ScheduleRequest",
    "SignalDeliverRequest",
    "SignalRegisterRequest",
    "SignalRejectRequest",
    "SignalRequest",
    "SignalReturnRequest",
    "SignalUnregisterRequest",
    "SubmitRequest",
    "WaiterRequest",
    "decode_request",
    "encode_request",
    "submit_name",
]

#: Where requests wait for the owner.
INBOX_PREFIX = "inbox/"
#: Submissions, one object per run id: ``inbox/submit/<run_id>``.
SUBMIT_PREFIX = INBOX_PREFIX + "submit/"
#: Every other request: ``inbox/req/<ulid>``.
REQ_PREFIX = INBOX_PREFIX + "req/"
#: Where the owner moves objects it cannot decode (same name below it).
CORRUPT_PREFIX = "inbox-corrupt/"
#: The newest request format this code writes and reads.
REQUEST_FORMAT_VERSION = 1
#: Bytes of a request's nonce.
NONCE_SIZE = 16


def _check_nonce(nonce: object) -> bytes:
    if not isinstance(nonce, bytes) or len(nonce) != NONCE_SIZE:
        raise InvalidArgument(f"a request's nonce must be {NONCE_SIZE} bytes, got {nonce!r:.80}")
    return nonce


@dataclass(frozen=True, slots=True)
class Request:
    """What every request carries: the ``queue`` of the runtime that applies
    it, and the ``nonce`` that makes this request instance unique."""

    queue: str
    nonce: bytes

    def __post_init__(self) -> None:
        validate_queue_name(self.queue)
        _check_nonce(self.nonce)


@dataclass(frozen=True, slots=True)
class SubmitRequest(Request):
    """Start run ``spec.run_id`` (`WorkflowRuntime.submit_member`).

    ``spec`` has a run id and no effects; ``member`` names the run group the
    run belongs to; ``internal`` holds KV puts (a None value: a delete)
    under the reserved ``workflow/`` prefix that commit with the run's first
    step; ``once``:
    the id names one run for good (a terminated run of the id is that run:
    the same input starts nothing, another is an `InputMismatch`).
    """

    spec: RunSpec
    member: GroupMembership | None = None
    internal: Mapping[bytes, bytes | None] = field(default_factory=dict)
    once: bool = False

    def __post_init__(self) -> None:
        Request.__post_init__(self)
        if not isinstance(self.spec, RunSpec):
            raise InvalidArgument(f"a submit request takes a RunSpec, got {self.spec!r}")
        if self.spec.run_id is None:
            raise InvalidArgument("a submit through the inbox needs a run id (RunSpec.run_id)")
        if self.spec.effects is not None:
            raise InvalidArgument(
                f"run {self.spec.run_id!r}: RunSpec.effects cannot go through the inbox "
                "(only the store's owner commits KV effects); submit without effects"
            )
        if self.member is not None and not isinstance(self.member, GroupMembership):
            raise InvalidArgument(f"member must be a GroupMembership, got {self.member!r}")
        if not isinstance(self.internal, Mapping):
            raise InvalidArgument(f"internal must be a mapping, got {self.internal!r}")
        internal = dict(self.internal)
        for key, value in internal.items():
            if not isinstance(key, bytes) or not key.startswith(RESERVED_KV_PREFIX):
                raise InvalidArgument(
                    f"internal KV keys must be bytes under {RESERVED_KV_PREFIX!r}, got {key!r}"
                )
            if value is not None:
                check_bytes(f"internal value of {key!r}", value)
                check_kv_value(key, value)
        object.__setattr__(self, "internal", internal)


@dataclass(frozen=True, slots=True)
class SignalRequest(Request):
    """Signal ``key`` with ``payload`` (`WorkflowRuntime.signal`)."""

    key: str
    payload: bytes

    def __post_init__(self) -> None:
        Request.__post_init__(self)
        check_signal(self.key, self.payload)


@dataclass(frozen=True, slots=True)
class CancelRequest(Request):
    """Cancel run ``run_id`` (`WorkflowRuntime.cancel`)."""

    run_id: str

    def __post_init__(self) -> None:
        Request.__post_init__(self)
        validate_run_id(self.run_id)


@dataclass(frozen=True, slots=True)
class ClearSignalRequest(Request):
    """Discard the signal buffered under ``key`` (`WorkflowRuntime.clear_signal`)."""

    key: str

    def __post_init__(self) -> None:
        Request.__post_init__(self)
        check_signal(self.key)


@dataclass(frozen=True, slots=True)
class GroupMarkRequest(Request):
    """Write the group marker of ``group_id`` (`GroupRetention.mark`)."""

    group_id: str

    def __post_init__(self) -> None:
        Request.__post_init__(self)
        validate_id(self.group_id, "group id")


@dataclass(frozen=True, slots=True)
class RequeueRequest(Request):
    """Give dead job ``job_id`` a fresh set of attempts (`Queue.requeue_dead_job`).

    ``queue`` names the runtime that applies the request (any workflow
    runtime of the store: the job may be on any queue of it)."""

    job_id: str

    def __post_init__(self) -> None:
        Request.__post_init__(self)
        validate_id(self.job_id, "job id")


@dataclass(frozen=True, slots=True)
class ForgetRequest(Request):
    """Delete terminated run ``run_id`` and everything it stored
    (``engine.forget``, applied by the owner's `WorkflowRuntime.forget_run`)."""

    run_id: str

    def __post_init__(self) -> None:
        Request.__post_init__(self)
        validate_run_id(self.run_id)


@dataclass(frozen=True, slots=True)
class ScheduleRequest(Request):
    """Change schedule ``schedule_id`` (`durable.engine.schedules.apply_change`):
    ``op`` is ``put`` (``record``: the new definition), ``pause``, ``resume``
    or ``delete``, made at ``at_ms`` (the requester's clock)."""

    schedule_id: str
    op: str
    at_ms: int
    record: bytes | None = None

    def __post_init__(self) -> None:
        Request.__post_init__(self)
        validate_schedule_id(self.schedule_id)
        if self.op not in ("put", "pause", "resume", "delete"):
            raise InvalidArgument(f"unknown schedule change {self.op!r}")
        if isinstance(self.at_ms, bool) or not isinstance(self.at_ms, int) or self.at_ms < 0:
            raise InvalidArgument(f"at_ms must be an int >= 0, got {self.at_ms!r}")
        if (self.op == "put") != (self.record is not None):
            raise InvalidArgument("a schedule put carries a record, and only a put does")
        if self.record is not None:
            check_bytes("schedule record", self.record)


@dataclass(frozen=True, slots=True)
class WaiterRequest(Request):
    """A message about run ``run_id`` whose step job ``job_id`` (of runtime
    queue ``queue``) waits on ``key`` (`durable.engine.signals`, across
    partitions)."""

    key: str
    run_id: str
    job_id: str

    def __post_init__(self) -> None:
        Request.__post_init__(self)
        check_signal(self.key)
        validate_run_id(self.run_id)
        validate_id(self.job_id, "job id")

    @property
    def waiter(self) -> RemoteWaiter:
        """The waiting step, as the key's home indexes it."""
        return RemoteWaiter(self.run_id, self.job_id, self.queue)


@dataclass(frozen=True, slots=True)
class SignalRegisterRequest(WaiterRequest):
    """To the key's home: the run waits on the key (`Signals.accept_waiter`)."""


@dataclass(frozen=True, slots=True)
class SignalUnregisterRequest(WaiterRequest):
    """To the key's home: the run no longer waits (`Signals.drop_waiter`)."""


@dataclass(frozen=True, slots=True)
class SignalRejectRequest(WaiterRequest):
    """To the run's partition: another run waits on the key (`Signals.take_rejection`)."""


@dataclass(frozen=True, slots=True)
class SignalDeliverRequest(WaiterRequest):
    """To the run's partition: wake it with ``payload`` (`Signals.take_delivery`)."""

    payload: bytes = b""

    def __post_init__(self) -> None:
        WaiterRequest.__post_init__(self)
        check_signal(self.key, self.payload)


@dataclass(frozen=True, slots=True)
class SignalReturnRequest(Request):
    """To the key's home: a delivered ``payload`` no waiter took (`Signals.take_back`)."""

    key: str
    payload: bytes

    def __post_init__(self) -> None:
        Request.__post_init__(self)
        check_signal(self.key, self.payload)


#: The kind names of the `WaiterRequest` classes.
_WAITER_KINDS: dict[type[WaiterRequest], str] = {
    SignalRegisterRequest: "signal_register",
    SignalUnregisterRequest: "signal_unregister",
    SignalRejectRequest: "signal_reject",
    SignalDeliverRequest: "signal_deliver",
}


def submit_name(run_id: str) -> str:
    """The object name of the submission of ``run_id``."""
    return SUBMIT_PREFIX + validate_run_id(run_id)


# ------------------------------------------------------------------ encoding


def encode_request(request: Request) -> bytes:
    """The framed bytes of ``request``."""
    m: dict[str, Any] = {"v": REQUEST_FORMAT_VERSION}
    if isinstance(request, SubmitRequest):
        spec, options = request.spec, request.spec.options
        m.update(kind="submit", run_id=spec.run_id, input=spec.input)
        if options.headers:
            m["headers"] = dict(options.headers)
        if options.priority is not None:
            m["priority"] = options.priority
        if options.max_attempts_per_step is not None:
            m["max_attempts"] = options.max_attempts_per_step
        if (run_at := options.run_at_ms()) is not None:
            m["run_at_ms"] = run_at
        if request.member is not None:
            m["group_id"], m["member_key"] = request.member.group_id, request.member.key
        if request.internal:
            m["internal"] = [[k, v] for k, v in request.internal.items()]
        if request.once:
            m["once"] = True
    elif isinstance(request, SignalRequest):
        m.update(kind="signal", key=request.key, payload=request.payload)
    elif isinstance(request, CancelRequest):
        m.update(kind="cancel", run_id=request.run_id)
    elif isinstance(request, ClearSignalRequest):
        m.update(kind="clear_signal", key=request.key)
    elif isinstance(request, GroupMarkRequest):
        m.update(kind="group_mark", group_id=request.group_id)
    elif isinstance(request, RequeueRequest):
        m.update(kind="requeue", job_id=request.job_id)
    elif isinstance(request, ForgetRequest):
        m.update(kind="forget", run_id=request.run_id)
    elif isinstance(request, ScheduleRequest):
        m.update(kind="schedule", schedule_id=request.schedule_id, op=request.op)
        m.update(at_ms=request.at_ms, record=request.record)
    elif isinstance(request, WaiterRequest) and type(request) in _WAITER_KINDS:
        m.update(
            kind=_WAITER_KINDS[type(request)],
            key=request.key,
            run_id=request.run_id,
            job_id=request.job_id,
        )
        if isinstance(request, SignalDeliverRequest):
            m["payload"] = request.payload
    elif isinstance(request, SignalReturnRequest):
        m.update(kind="signal_return", key=request.key, payload=request.payload)
    else:
        raise InvalidArgument(f"not an inbox request: {request!r}")
    m.update(nonce=request.nonce, queue=request.queue)
    return frame(Kind.INBOX, msgpack.packb(m, use_bin_type=True))


def decode_request(name: str, data: bytes) -> Request:
    """The request stored as object ``name``; `CorruptRequest` naming it if
    ``data`` is not a well-formed request of the kind its name says."""
    try:
        _, body = unframe(name, data, Kind.INBOX)
    except (CorruptObject, UnsupportedFormat) as e:
        raise CorruptRequest(name, _reason(e)) from e
    try:
        m = msgpack.unpackb(body, raw=False)
    except Exception as e:  # msgpack raises several unrelated types
        raise CorruptRequest(name, f"not MessagePack ({type(e).__name__}: {e})") from e
    if not isinstance(m, dict):
        raise CorruptRequest(name, f"expected a map, found {type(m).__name__}")
    version = m.get("v")
    if isinstance(version, bool) or not isinstance(version, int) or version < 1:
        raise CorruptRequest(name, f"no format version (field 'v' is {version!r:.80})")
    if version > REQUEST_FORMAT_VERSION:
        raise CorruptRequest(
            name,
            f"format version {version} is newer than this durable reads "
            f"(up to {REQUEST_FORMAT_VERSION}): upgrade durable",
        )
    try:
        request = _build(m)
    except (KeyError, TypeError, ValueError, OverflowError) as e:  # InvalidArgument, InvalidId
        raise CorruptRequest(name, _reason(e)) from e
    expected = _name_problem(name, request)
    if expected is not None:
        raise CorruptRequest(name, expected)
    return request


def _reason(e: BaseException) -> str:
    if isinstance(e, CorruptObject):
        return e.reason
    if isinstance(e, KeyError) and e.args:
        return str(e.args[0])
    return str(e)


def _name_problem(name: str, request: Request) -> str | None:
    """Why ``name`` cannot hold ``request`` (None: it can)."""
    if isinstance(request, SubmitRequest):
        if name != SUBMIT_PREFIX + str(request.spec.run_id):
            return f"holds the submission of run {request.spec.run_id!r}, not one named so"
        return None
    if not name.startswith(REQ_PREFIX) or len(name) == len(REQ_PREFIX):
        return f"holds a {type(request).__name__}, which belongs under {REQ_PREFIX!r}"
    return None


def _field(m: Mapping[str, Any], name: str, kind: type | tuple[type, ...]) -> Any:
    if name not in m:
        raise KeyError(f"missing field {name!r}")
    value = m[name]
    if not isinstance(value, kind) or (isinstance(value, bool) and kind is int):
        raise TypeError(f"field {name!r} has the wrong type: {value!r:.80}")
    return value


def _optional(m: Mapping[str, Any], name: str, kind: type | tuple[type, ...]) -> Any:
    return None if m.get(name) is None else _field(m, name, kind)


def _build(m: Mapping[str, Any]) -> Request:
    kind = _field(m, "kind", str)
    queue, nonce = _field(m, "queue", str), _field(m, "nonce", bytes)
    if kind == "submit":
        return _submit(m, queue, nonce)
    if kind == "signal":
        return SignalRequest(queue, nonce, _field(m, "key", str), _field(m, "payload", bytes))
    if kind == "cancel":
        return CancelRequest(queue, nonce, _field(m, "run_id", str))
    if kind == "clear_signal":
        return ClearSignalRequest(queue, nonce, _field(m, "key", str))
    if kind == "group_mark":
        return GroupMarkRequest(queue, nonce, _field(m, "group_id", str))
    if kind == "requeue":
        return RequeueRequest(queue, nonce, _field(m, "job_id", str))
    if kind == "forget":
        return ForgetRequest(queue, nonce, _field(m, "run_id", str))
    if kind == "schedule":
        return ScheduleRequest(
            queue,
            nonce,
            _field(m, "schedule_id", str),
            _field(m, "op", str),
            _field(m, "at_ms", int),
            _optional(m, "record", bytes),
        )
    if kind == "signal_return":
        return SignalReturnRequest(queue, nonce, _field(m, "key", str), _field(m, "payload", bytes))
    for cls, name in _WAITER_KINDS.items():
        if kind == name:
            return _waiter(cls, m, queue, nonce)
    raise ValueError(f"unknown request kind {kind!r:.80}")


def _waiter(
    cls: type[WaiterRequest], m: Mapping[str, Any], queue: str, nonce: bytes
) -> WaiterRequest:
    key, run_id = _field(m, "key", str), _field(m, "run_id", str)
    job_id = _field(m, "job_id", str)
    if cls is SignalDeliverRequest:
        return SignalDeliverRequest(queue, nonce, key, run_id, job_id, _field(m, "payload", bytes))
    return cls(queue, nonce, key, run_id, job_id)


def _submit(m: Mapping[str, Any], queue: str, nonce: bytes) -> SubmitRequest:
    headers = _optional(m, "headers", dict) or {}
    priority = _optional(m, "priority", int)
    attempts = _optional(m, "max_attempts", int)
    run_at = _optional(m, "run_at_ms", int)
    options = RunOptions(
        headers=headers, priority=priority, max_attempts_per_step=attempts, run_at=run_at
    )
    spec = RunSpec(_field(m, "input", bytes), run_id=_field(m, "run_id", str), options=options)
    group_id = _optional(m, "group_id", str)
    member = None if group_id is None else GroupMembership(group_id, _field(m, "member_key", str))
    internal: dict[bytes, bytes | None] = {}
    for pair in _optional(m, "internal", list) or []:
        if not isinstance(pair, list) or len(pair) != 2:
            raise TypeError(f"an internal write must be a [key, value] pair, got {pair!r:.80}")
        key, value = pair
        if not isinstance(key, bytes) or not (value is None or isinstance(value, bytes)):
            raise TypeError(f"an internal write must be bytes (or nil), got {pair!r:.80}")
        internal[key] = value
    once = _optional(m, "once", bool) or False
    return SubmitRequest(queue, nonce, spec, member, internal, once)
