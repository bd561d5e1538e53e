"""Effects staged with a settlement: follow-up enqueues and caller KV writes.

A `SettlementEffects` set commits in the same transaction as the transition
that carries it (ack, dead-letter, exhausting nack, cancel, new enqueue), or
not at all (semantics 1.21). Results of its enqueues align index-wise with
`SettlementEffects.enqueues`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from durable.errors import ConflictingKvEffect, InvalidOption
from durable.store.keyspace import check_kv_value
from durable.store.queue.options import EnqueueOptions, validate_queue_name

__all__ = [
    "AlreadyEnqueued",
    "EnqueueRequest",
    "EnqueueResult",
    "New",
    "SettlementEffects",
]


class EnqueueResult:
    """What an enqueue did: `New` or `AlreadyEnqueued`."""

    __slots__ = ()

    @property
    def id(self) -> str:
        """The id of the job that now holds the request (new or existing)."""
        raise NotImplementedError

    @property
    def is_new(self) -> bool:
        """True when this enqueue wrote a new job."""
        return isinstance(self, New)


@dataclass(frozen=True, slots=True)
class New(EnqueueResult):
    """The enqueue wrote a new job with this ``id``."""

    id: str


@dataclass(frozen=True, slots=True)
class AlreadyEnqueued(EnqueueResult):
    """A job with the same dedup key was pending or scheduled; nothing was written."""

    existing_id: str

    @property
    def id(self) -> str:
        """The existing job's id."""
        return self.existing_id


@dataclass(frozen=True, slots=True)
class EnqueueRequest:
    """One follow-up job of a `SettlementEffects` set."""

    queue: str
    payload: bytes
    options: EnqueueOptions = field(default_factory=EnqueueOptions)

    def __post_init__(self) -> None:
        validate_queue_name(self.queue)
        if not isinstance(self.payload, bytes | bytearray | memoryview):
            raise InvalidOption(f"payload must be bytes, got {type(self.payload).__name__}")
        if not isinstance(self.options, EnqueueOptions):
            raise InvalidOption(f"options must be EnqueueOptions, got {self.options!r}")


@dataclass(slots=True)
class SettlementEffects:
    """Follow-up enqueues, caller KV puts and deletes, applied atomically.

    Build with the chainable helpers, which check each value's size
    (`KvValueTooLarge`) and reject a key both put and deleted
    (`ConflictingKvEffect`) at once; `validate` repeats both checks for sets
    whose fields were filled directly.
    """

    enqueues: list[EnqueueRequest] = field(default_factory=list)
    kv_puts: dict[bytes, bytes] = field(default_factory=dict)
    kv_deletes: list[bytes] = field(default_factory=list)

    def enqueue(
        self, queue: str, payload: bytes, options: EnqueueOptions | None = None
    ) -> SettlementEffects:
        """Add a follow-up job."""
        self.enqueues.append(EnqueueRequest(queue, bytes(payload), options or EnqueueOptions()))
        return self

    def kv_put(self, key: bytes, value: bytes) -> SettlementEffects:
        """Write caller KV ``key``."""
        key, value = _bytes("key", key), _bytes("value", value)
        check_kv_value(key, value)
        if key in self.kv_deletes:
            raise ConflictingKvEffect(key)
        self.kv_puts[key] = value
        return self

    def kv_delete(self, key: bytes) -> SettlementEffects:
        """Delete caller KV ``key``."""
        key = _bytes("key", key)
        if key in self.kv_puts:
            raise ConflictingKvEffect(key)
        if key not in self.kv_deletes:
            self.kv_deletes.append(key)
        return self

    def validate(self) -> None:
        """Check sizes, types and conflicts of every field; raise before any write."""
        for req in self.enqueues:
            if not isinstance(req, EnqueueRequest):
                raise InvalidOption(f"enqueues must hold EnqueueRequest, got {req!r}")
        for key, value in self.kv_puts.items():
            check_kv_value(_bytes("key", key), _bytes("value", value))
        for key in self.kv_deletes:
            if _bytes("key", key) in self.kv_puts:
                raise ConflictingKvEffect(key)

    def is_empty(self) -> bool:
        """True when the set does nothing."""
        return not (self.enqueues or self.kv_puts or self.kv_deletes)


def _bytes(what: str, value: object) -> bytes:
    if isinstance(value, bytes):
        return value
    if isinstance(value, bytearray | memoryview):
        return bytes(value)
    raise InvalidOption(f"KV {what} must be bytes, got {type(value).__name__}")
