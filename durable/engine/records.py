"""The durable records of a run and their stored encoding (semantics 2.5).

- `RunRecord`, under ``workflow/runs/{run_id}``: written with the first
  step's enqueue, deleted by the terminating settlement.
- `StepPointer`, under ``workflow/steps/{run_id}``: the current step and its
  queue job, rewritten by every advancing settlement.
- `TerminalRecord`, under ``workflow/outcomes/{run_id}``: the run's
  `RunTermination`, written by every terminating settlement.
- `RunResultRecord`, in the run memo at ``workflow.outcome``: the
  termination with the worker's `RunOutcome`; valid only while its
  termination equals the terminal record's.
- `MemberRecord`, under ``workflow/groups/{group_id}/members/{key}``: a
  run group member's run and, once it ended, its termination.
- `GroupManifest`, an object beside the memos: a run group's members (keys
  and inputs), written once before any member is submitted.
- The terminal notification's payload: a `RunOutcome` alone.

Each is a MessagePack map with field names and a format version ``v``;
bytes are ``bin``; optional fields are omitted when empty. Decoding ignores
unknown fields and defaults missing optional ones, so newer writers' records
stay readable; bytes that do not decode raise `CorruptEngineRecord` naming
what was decoded.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

import msgpack

from durable.engine._checks import U64_MAX, check_bytes, check_headers, check_int, check_str
from durable.engine.outcomes import StepErrorKind
from durable.engine.runs import RunOutcome, RunTermination, TerminalStatus, validate_run_id
from durable.errors import CorruptEngineRecord, InvalidArgument
from durable.store.ids import validate_id

__all__ = [
    "ENGINE_RECORD_VERSION",
    "GroupManifest",
    "GroupMembership",
    "MemberRecord",
    "RunRecord",
    "RunResultRecord",
    "StepPointer",
    "TerminalRecord",
    "decode_group_manifest",
    "decode_member_record",
    "decode_run_outcome",
    "decode_run_record",
    "decode_run_result",
    "decode_step_pointer",
    "decode_terminal_record",
    "encode_group_manifest",
    "encode_member_record",
    "encode_run_outcome",
    "encode_run_record",
    "encode_run_result",
    "encode_step_pointer",
    "encode_terminal_record",
    "input_digest",
]

_T = TypeVar("_T")

#: The format version written in every engine record.
ENGINE_RECORD_VERSION = 1


def input_digest(input: bytes) -> bytes:
    """The SHA-256 of a run's input (32 bytes), kept to detect a different re-submission."""
    return hashlib.sha256(input).digest()


def _digest(name: str, value: object) -> bytes:
    value = check_bytes(name, value)
    if len(value) != 32:
        raise InvalidArgument(f"{name} must be a 32-byte SHA-256 digest, got {value!r}")
    return value


# ------------------------------------------------------------------ records


@dataclass(frozen=True, slots=True)
class GroupMembership:
    """The run group a run belongs to, and its member key there."""

    group_id: str
    key: str

    def __post_init__(self) -> None:
        validate_id(self.group_id, "group id")
        if not isinstance(self.key, str) or not self.key:
            raise InvalidArgument(f"a group member key must be a non-empty str, got {self.key!r}")


@dataclass(frozen=True, slots=True)
class MemberRecord:
    """A group member's record: its run, and how it ended once it did.

    Written (without ``termination``) with the member's submission and
    rewritten by the settlement that terminates the run.
    """

    run_id: str
    termination: RunTermination | None = None

    def __post_init__(self) -> None:
        validate_run_id(self.run_id)
        if self.termination is not None and not isinstance(self.termination, RunTermination):
            raise InvalidArgument(
                f"MemberRecord.termination must be a RunTermination, got {self.termination!r}"
            )


@dataclass(frozen=True, slots=True)
class GroupManifest:
    """A run group's members, ``(key, input)`` in submission order, and when
    the group was first submitted."""

    group_id: str
    members: tuple[tuple[str, bytes], ...]
    created_at_ms: int

    def __post_init__(self) -> None:
        validate_id(self.group_id, "group id")
        members = tuple(
            (check_str("GroupManifest member key", key, non_empty=True), check_bytes("input", i))
            for key, i in self.members
        )
        object.__setattr__(self, "members", members)
        check_int("GroupManifest.created_at_ms", self.created_at_ms, 0, U64_MAX)


@dataclass(frozen=True, slots=True)
class RunRecord:
    """The durable record of an active run; its presence means "active"."""

    run_id: str
    #: SHA-256 of the first step's input (`input_digest`).
    input_sha256: bytes
    submitted_at_ms: int
    #: The submitter's headers (no reserved ones).
    headers: Mapping[str, str] = field(default_factory=dict)
    #: Set by a cancellation request; the run terminates as cancelled.
    cancel_requested: bool = False
    #: The run group this run is a member of, if any.
    member: GroupMembership | None = None

    def __post_init__(self) -> None:
        validate_run_id(self.run_id)
        object.__setattr__(self, "input_sha256", _digest("input_sha256", self.input_sha256))
        check_int("RunRecord.submitted_at_ms", self.submitted_at_ms, 0, U64_MAX)
        object.__setattr__(self, "headers", check_headers("RunRecord.headers", self.headers))
        if not isinstance(self.cancel_requested, bool):
            raise InvalidArgument(
                f"RunRecord.cancel_requested must be a bool, got {self.cancel_requested!r}"
            )
        if self.member is not None and not isinstance(self.member, GroupMembership):
            raise InvalidArgument(
                f"RunRecord.member must be a GroupMembership, got {self.member!r}"
            )

    @classmethod
    def for_input(
        cls,
        run_id: str,
        input: bytes,
        submitted_at_ms: int,
        headers: Mapping[str, str] | None = None,
        member: GroupMembership | None = None,
    ) -> RunRecord:
        """The record of a new submission of ``input``."""
        return cls(
            run_id,
            input_digest(check_bytes("input", input)),
            submitted_at_ms,
            headers or {},
            member=member,
        )

    def matches_input(self, input: bytes) -> bool:
        """True when ``input`` is the input this run was submitted with."""
        return input_digest(input) == self.input_sha256

    def with_cancel_requested(self) -> RunRecord:
        """A copy with ``cancel_requested`` set."""
        return dataclasses.replace(self, cancel_requested=True)


@dataclass(frozen=True, slots=True)
class StepPointer:
    """The current step of an active run and the queue job that holds it."""

    step_number: int
    job_id: str

    def __post_init__(self) -> None:
        check_int("StepPointer.step_number", self.step_number, 0, U64_MAX)
        validate_id(self.job_id, "job id")


@dataclass(frozen=True, slots=True)
class TerminalRecord:
    """A terminated run's termination and, when known, its input's SHA-256.

    ``outcome`` is the worker's `RunOutcome` when it was small enough to ride
    the terminating settlement (larger ones go to the run memo).
    """

    termination: RunTermination
    input_sha256: bytes | None = None
    outcome: RunOutcome | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.termination, RunTermination):
            raise InvalidArgument(
                f"TerminalRecord.termination must be a RunTermination, got {self.termination!r}"
            )
        if self.input_sha256 is not None:
            digest = _digest("TerminalRecord.input_sha256", self.input_sha256)
            object.__setattr__(self, "input_sha256", digest)
        if self.outcome is not None and not isinstance(self.outcome, RunOutcome):
            raise InvalidArgument(
                f"TerminalRecord.outcome must be a RunOutcome, got {self.outcome!r}"
            )


@dataclass(frozen=True, slots=True)
class RunResultRecord:
    """The worker's `RunOutcome` with the termination it belongs to."""

    termination: RunTermination
    outcome: RunOutcome

    def __post_init__(self) -> None:
        if not isinstance(self.termination, RunTermination):
            raise InvalidArgument(
                f"RunResultRecord.termination must be a RunTermination, got {self.termination!r}"
            )
        if not isinstance(self.outcome, RunOutcome):
            raise InvalidArgument(
                f"RunResultRecord.outcome must be a RunOutcome, got {self.outcome!r}"
            )


# ----------------------------------------------------------------- encoding


def _pack(m: dict[str, Any]) -> bytes:
    return msgpack.packb({"v": ENGINE_RECORD_VERSION, **m}, use_bin_type=True)


def _unpack(data: bytes, what: str) -> dict[str, Any]:
    try:
        m = msgpack.unpackb(data, raw=False)
    except Exception as e:  # msgpack raises several unrelated types
        raise CorruptEngineRecord(what, f"not MessagePack ({type(e).__name__}: {e})") from e
    if not isinstance(m, dict):
        raise CorruptEngineRecord(what, f"expected a map, found {type(m).__name__}")
    version = m.get("v")
    if isinstance(version, bool) or not isinstance(version, int):
        raise CorruptEngineRecord(what, f"no format version (field 'v' is {version!r})")
    if version > ENGINE_RECORD_VERSION:
        raise CorruptEngineRecord(
            what,
            f"format version {version} is newer than this durable reads "
            f"(up to {ENGINE_RECORD_VERSION}): upgrade durable",
        )
    return m


def _field(m: Mapping[str, Any], name: str, kind: type | tuple[type, ...]) -> Any:
    if name not in m:
        raise KeyError(f"missing field {name!r}")
    return _typed(m, name, kind)


def _optional(m: Mapping[str, Any], name: str, kind: type | tuple[type, ...]) -> Any:
    return None if m.get(name) is None else _typed(m, name, kind)


def _typed(m: Mapping[str, Any], name: str, kind: type | tuple[type, ...]) -> Any:
    value = m[name]
    if not isinstance(value, kind) or (isinstance(value, bool) and kind is int):
        raise TypeError(f"field {name!r} has the wrong type: {value!r}")
    return value


def _decode(data: bytes, what: str, build: Callable[[dict[str, Any]], _T]) -> _T:
    m = _unpack(data, what)
    try:
        return build(m)
    except (KeyError, TypeError, ValueError) as e:  # InvalidArgument and InvalidId are ValueErrors
        reason = e.args[0] if isinstance(e, KeyError) and e.args else e
        raise CorruptEngineRecord(what, str(reason)) from e


def _termination_map(t: RunTermination) -> dict[str, Any]:
    m: dict[str, Any] = {
        "status": t.status.value,
        "final_step": t.final_step,
        "terminated_at_ms": t.terminated_at_ms,
    }
    if t.error is not None:
        m["error"] = t.error
    if t.error_kind is not None:
        m["error_kind"] = t.error_kind.value
    return m


def _termination(m: object) -> RunTermination:
    if not isinstance(m, dict):
        raise TypeError(f"termination must be a map, found {m!r}")
    kind = _optional(m, "error_kind", str)
    return RunTermination(
        status=TerminalStatus(_field(m, "status", str)),
        final_step=_field(m, "final_step", int),
        terminated_at_ms=_field(m, "terminated_at_ms", int),
        error=_optional(m, "error", str),
        error_kind=None if kind is None else StepErrorKind(kind),
    )


def _outcome_map(o: RunOutcome) -> dict[str, Any]:
    m: dict[str, Any] = {"run_id": o.run_id, "status": o.status.value, "final_step": o.final_step}
    if o.result is not None:
        m["result"] = o.result
    if o.error is not None:
        m["error"] = o.error
    if o.headers:
        m["headers"] = dict(o.headers)
    return m


def _outcome(m: object) -> RunOutcome:
    if not isinstance(m, dict):
        raise TypeError(f"outcome must be a map, found {m!r}")
    return RunOutcome(
        run_id=_field(m, "run_id", str),
        status=TerminalStatus(_field(m, "status", str)),
        final_step=_field(m, "final_step", int),
        result=_optional(m, "result", bytes),
        error=_optional(m, "error", str),
        headers=_optional(m, "headers", dict) or {},
    )


def encode_run_record(record: RunRecord) -> bytes:
    """The stored bytes of a run record."""
    m: dict[str, Any] = {
        "run_id": record.run_id,
        "input_sha256": record.input_sha256,
        "submitted_at_ms": record.submitted_at_ms,
    }
    if record.headers:
        m["headers"] = dict(record.headers)
    if record.cancel_requested:
        m["cancel_requested"] = True
    if record.member is not None:
        m["group_id"] = record.member.group_id
        m["member_key"] = record.member.key
    return _pack(m)


def decode_run_record(data: bytes, what: str = "run record") -> RunRecord:
    """Decode a run record; `CorruptEngineRecord` naming ``what`` if it is not one."""
    return _decode(data, what, _run_record)


def _run_record(m: dict[str, Any]) -> RunRecord:
    return RunRecord(
        run_id=_field(m, "run_id", str),
        input_sha256=_field(m, "input_sha256", bytes),
        submitted_at_ms=_field(m, "submitted_at_ms", int),
        headers=_optional(m, "headers", dict) or {},
        cancel_requested=_optional(m, "cancel_requested", bool) or False,
        member=_membership(m),
    )


def _membership(m: dict[str, Any]) -> GroupMembership | None:
    group_id = _optional(m, "group_id", str)
    if group_id is None:
        return None
    return GroupMembership(group_id, _field(m, "member_key", str))


def encode_member_record(record: MemberRecord) -> bytes:
    """The stored bytes of a group member record."""
    m: dict[str, Any] = {"run_id": record.run_id}
    if record.termination is not None:
        m["terminated"] = _termination_map(record.termination)
    return _pack(m)


def decode_member_record(data: bytes, what: str = "member record") -> MemberRecord:
    """Decode a member record; `CorruptEngineRecord` naming ``what`` if it is not one."""
    return _decode(
        data,
        what,
        lambda m: MemberRecord(
            _field(m, "run_id", str),
            _termination(m["terminated"]) if m.get("terminated") is not None else None,
        ),
    )


def encode_group_manifest(manifest: GroupManifest) -> bytes:
    """The stored bytes of a run group's manifest."""
    return _pack(
        {
            "group_id": manifest.group_id,
            "created_at_ms": manifest.created_at_ms,
            "members": [{"key": key, "input": input} for key, input in manifest.members],
        }
    )


def decode_group_manifest(data: bytes, what: str = "group manifest") -> GroupManifest:
    """Decode a group manifest; `CorruptEngineRecord` naming ``what`` if it is not one."""
    return _decode(
        data,
        what,
        lambda m: GroupManifest(
            _field(m, "group_id", str),
            tuple(_manifest_member(e) for e in _field(m, "members", list)),
            _field(m, "created_at_ms", int),
        ),
    )


def _manifest_member(m: object) -> tuple[str, bytes]:
    if not isinstance(m, dict):
        raise TypeError(f"a manifest member must be a map, found {m!r}")
    return _field(m, "key", str), _field(m, "input", bytes)


def encode_step_pointer(pointer: StepPointer) -> bytes:
    """The stored bytes of a current-step pointer."""
    return _pack({"step_number": pointer.step_number, "job_id": pointer.job_id})


def decode_step_pointer(data: bytes, what: str = "step pointer") -> StepPointer:
    """Decode a current-step pointer; `CorruptEngineRecord` naming ``what`` if it is not one."""
    return _decode(
        data, what, lambda m: StepPointer(_field(m, "step_number", int), _field(m, "job_id", str))
    )


def encode_terminal_record(record: TerminalRecord) -> bytes:
    """The stored bytes of a terminal record."""
    m = _termination_map(record.termination)
    if record.input_sha256 is not None:
        m["input_sha256"] = record.input_sha256
    if record.outcome is not None:
        m["outcome"] = _outcome_map(record.outcome)
    return _pack(m)


def decode_terminal_record(data: bytes, what: str = "terminal record") -> TerminalRecord:
    """Decode a terminal record; `CorruptEngineRecord` naming ``what`` if it is not one."""
    return _decode(
        data,
        what,
        lambda m: TerminalRecord(
            _termination(m),
            _optional(m, "input_sha256", bytes),
            _outcome(m["outcome"]) if m.get("outcome") is not None else None,
        ),
    )


def encode_run_outcome(outcome: RunOutcome) -> bytes:
    """The stored bytes of a `RunOutcome` (the terminal notification's payload)."""
    return _pack(_outcome_map(outcome))


def decode_run_outcome(data: bytes, what: str = "run outcome") -> RunOutcome:
    """Decode a `RunOutcome`; `CorruptEngineRecord` naming ``what`` if it is not one."""
    return _decode(data, what, _outcome)


def encode_run_result(record: RunResultRecord) -> bytes:
    """The stored bytes of a run result record."""
    return _pack(
        {
            "termination": _termination_map(record.termination),
            "outcome": _outcome_map(record.outcome),
        }
    )


def decode_run_result(data: bytes, what: str = "run result record") -> RunResultRecord:
    """Decode a run result record; `CorruptEngineRecord` naming ``what`` if it is not one."""
    return _decode(
        data,
        what,
        lambda m: RunResultRecord(
            _termination(_field(m, "termination", dict)), _outcome(_field(m, "outcome", dict))
        ),
    )
