"""Job records and attempt-history entries, and their stored encoding.

Both are MessagePack maps with field names and a format version ``v``;
bytes are MessagePack ``bin``; optional fields are omitted when empty, and
``cancel_requested`` when false. Decoding ignores unknown fields and
defaults missing optional ones, so newer writers' records stay readable.
"""

from __future__ import annotations

import dataclasses
import enum
from dataclasses import dataclass, field
from typing import Any

import msgpack

from durable.errors import CorruptRecord

__all__ = [
    "RECORD_VERSION",
    "AttemptOutcome",
    "HistoryEntry",
    "JobRecord",
    "JobStatus",
    "decode_history",
    "decode_record",
    "encode_history_entry",
    "encode_record",
]

#: The format version written in every record and history entry.
RECORD_VERSION = 1


class JobStatus(enum.Enum):
    """Where a job is in its life; stored as the name string."""

    PENDING = "Pending"
    SCHEDULED = "Scheduled"
    CLAIMED = "Claimed"
    DONE = "Done"
    DEAD = "Dead"


@dataclass(frozen=True, slots=True)
class JobRecord:
    """A job as stored (see semantics 1.1).

    ``payload`` is empty in the stored form of an offloaded job
    (``payload_ref`` set); records returned by claim and `get_job` carry
    it inline.
    """

    id: str
    queue: str
    payload: bytes
    status: JobStatus
    attempts: int
    max_attempts: int
    enqueued_at: int
    priority: int
    payload_ref: str | None = None
    headers: dict[str, str] = field(default_factory=dict)
    claimed_at: int | None = None
    run_at: int | None = None
    woken_at: int | None = None
    wake_payload: bytes | None = None
    last_error: str | None = None
    dedup_key: str | None = None
    completed_at: int | None = None
    failed_at: int | None = None
    cancel_requested: bool = False

    def replace(self, **changes: Any) -> JobRecord:
        """A copy with ``changes`` applied."""
        return dataclasses.replace(self, **changes)

    @property
    def exhausted(self) -> bool:
        """True when no attempt is left (``max_attempts`` 0 behaves like 1)."""
        return self.attempts >= max(self.max_attempts, 1)


#: The optional fields, with their stored type.
_OPTIONAL_TYPES: dict[str, type] = {
    "payload_ref": str,
    "claimed_at": int,
    "run_at": int,
    "woken_at": int,
    "wake_payload": bytes,
    "last_error": str,
    "dedup_key": str,
    "completed_at": int,
    "failed_at": int,
}
_OPTIONAL = tuple(_OPTIONAL_TYPES)


def encode_record(record: JobRecord) -> bytes:
    """The stored bytes of ``record``."""
    m: dict[str, Any] = {
        "v": RECORD_VERSION,
        "id": record.id,
        "queue": record.queue,
        "payload": record.payload,
        "status": record.status.value,
        "attempts": record.attempts,
        "max_attempts": record.max_attempts,
        "enqueued_at": record.enqueued_at,
        "priority": record.priority,
    }
    for name in _OPTIONAL:
        value = getattr(record, name)
        if value is not None:
            m[name] = value
    if record.headers:
        m["headers"] = record.headers
    if record.cancel_requested:
        m["cancel_requested"] = True
    return msgpack.packb(m, use_bin_type=True)


def _unpack_map(data: bytes, what: str) -> dict[str, Any]:
    try:
        m = msgpack.unpackb(data, raw=False)
    except Exception as e:  # msgpack raises several unrelated types
        raise CorruptRecord(what, f"not MessagePack: {e}") from e
    if not isinstance(m, dict):
        raise CorruptRecord(what, f"expected a map, found {type(m).__name__}")
    return m


def decode_record(data: bytes, where: str = "job record") -> JobRecord:
    """Decode stored bytes; `CorruptRecord` naming ``where`` if they are not a record."""
    m = _unpack_map(data, where)
    get = m.get
    try:
        optional = {name: _optional(get(name), kind) for name, kind in _OPTIONAL_TYPES.items()}
        status = _STATUS.get(m["status"])
        if status is None:
            raise ValueError(f"unknown status {m['status']!r}")
        return JobRecord(
            id=_typed(m["id"], str),
            queue=_typed(m["queue"], str),
            payload=_typed(get("payload", b""), bytes),
            status=status,
            attempts=_typed(get("attempts", 0), int),
            max_attempts=_typed(get("max_attempts", 1), int),
            enqueued_at=_typed(get("enqueued_at", 0), int),
            priority=_typed(get("priority", 0), int),
            headers=_headers(get("headers") or {}),
            cancel_requested=bool(get("cancel_requested", False)),
            **optional,
        )
    except (KeyError, ValueError, TypeError) as e:
        raise CorruptRecord(where, f"bad job record: {e!r}") from e


#: Statuses by their stored names.
_STATUS = {s.value: s for s in JobStatus}


def _is(value: Any, kind: type) -> bool:
    """``value`` is a ``kind`` (a subclass too), a bool never an int."""
    return isinstance(value, kind) and not (kind is int and isinstance(value, bool))


def _typed(value: Any, kind: type) -> Any:
    if type(value) is kind:
        return value
    if not _is(value, kind):
        raise TypeError(f"expected {kind.__name__}, found {type(value).__name__}")
    return value


def _optional(value: Any, kind: type) -> Any:
    return None if value is None else _typed(value, kind)


def _headers(value: Any) -> dict[str, str]:
    if not isinstance(value, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in value.items()
    ):
        raise TypeError("headers are not a map of str to str")
    return value


# ------------------------------------------------------------------ history


class AttemptOutcome(enum.Enum):
    """How one attempt (or a requeue) ended."""

    COMPLETED = "Completed"
    RETRIED = "Retried"
    DEAD_LETTERED = "DeadLettered"
    LEASE_EXPIRED = "LeaseExpired"
    INTERRUPTED = "Interrupted"
    REQUEUED = "Requeued"


@dataclass(frozen=True, slots=True)
class HistoryEntry:
    """One settled attempt of a job (semantics 1.16)."""

    attempt: int
    recorded_at: int
    outcome: AttemptOutcome
    claimed_at: int | None = None
    error: str | None = None


def encode_history_entry(entry: HistoryEntry) -> bytes:
    """The stored bytes of one entry; entries are appended to each other."""
    m: dict[str, Any] = {
        "v": RECORD_VERSION,
        "attempt": entry.attempt,
        "recorded_at": entry.recorded_at,
        "outcome": entry.outcome.value,
    }
    if entry.claimed_at is not None:
        m["claimed_at"] = entry.claimed_at
    if entry.error is not None:
        m["error"] = entry.error
    return msgpack.packb(m, use_bin_type=True)


def decode_history(data: bytes, where: str = "attempt history") -> list[HistoryEntry]:
    """Decode concatenated entries, in write order."""
    out = []
    unpacker = msgpack.Unpacker(raw=False)
    unpacker.feed(data)
    try:
        for m in unpacker:
            if not isinstance(m, dict):
                raise TypeError(f"an entry is a {type(m).__name__}, not a map")
            out.append(
                HistoryEntry(
                    attempt=_typed(m["attempt"], int),
                    recorded_at=_typed(m["recorded_at"], int),
                    outcome=AttemptOutcome(m["outcome"]),
                    claimed_at=_optional(m.get("claimed_at"), int),
                    error=_optional(m.get("error"), str),
                )
            )
    except (KeyError, ValueError, TypeError) as e:
        raise CorruptRecord(where, f"bad history entry: {e!r}") from e
    except Exception as e:
        raise CorruptRecord(where, f"not MessagePack: {e}") from e
    if unpacker.tell() != len(data):
        raise CorruptRecord(where, "truncated: it ends inside an entry")
    return out
