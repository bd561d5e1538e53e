"""Configuration of a queue store, per queue and per enqueue, with validation.

Durations are seconds (``float``); absolute times are milliseconds since
the Unix epoch (``int``), read from the store's `Clock`. Every option is
checked when its object is built, so a bad value fails with `InvalidOption`
(or `InvalidId` / `InvalidQueueName`) before anything is written.
"""

from __future__ import annotations

import datetime as _dt
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from durable.errors import InvalidOption, InvalidQueueName
from durable.store.clock import Clock, SystemClock
from durable.store.ids import validate_id
from durable.store.log import LogOptions

__all__ = [
    "DEFAULT_PAYLOAD_OFFLOAD_THRESHOLD",
    "LEASE_MARGIN",
    "MAX_QUEUE_NAME_BYTES",
    "MAX_WAKEUPS_PER_INSERT",
    "PRIORITY_HIGH",
    "PRIORITY_LOW",
    "PRIORITY_NORMAL",
    "EnqueueOptions",
    "OpenOptions",
    "QueueConfig",
    "backoff_ms",
    "checked_ms",
    "to_ms",
    "validate_queue_name",
]

#: Claimed before normal and low priority jobs.
PRIORITY_HIGH = 100
#: The default priority.
PRIORITY_NORMAL = 1000
#: Claimed after high and normal priority jobs.
PRIORITY_LOW = 10_000

#: Queue names are at most this many UTF-8 bytes (the empty name is valid).
MAX_QUEUE_NAME_BYTES = 255
#: `LeaseHandle.ensure_at_least` adds this many seconds of margin.
LEASE_MARGIN = 5.0
#: Payloads larger than this many bytes go to their own object by default.
DEFAULT_PAYLOAD_OFFLOAD_THRESHOLD = 256 * 1024
#: At most this many waiting workers are woken per batch of inserts.
MAX_WAKEUPS_PER_INSERT = 64

_U32_MAX = 2**32 - 1
_U64_MAX = 2**64 - 1


def to_ms(seconds: float) -> int:
    """Seconds as whole milliseconds (rounded)."""
    return round(seconds * 1000)


def backoff_ms(attempts: int, base: float, maximum: float) -> int:
    """Retry delay after attempt ``attempts``: ``min(base * 2**(attempts-1), maximum)``.

    Saturating; a zero ``base`` means no delay.
    """
    base_ms = to_ms(base)
    if base_ms <= 0:
        return 0
    max_ms = to_ms(maximum)
    shift = max(attempts - 1, 0)
    if shift >= 64:
        return max_ms
    return min(base_ms << shift, max_ms)


def validate_queue_name(queue: str) -> str:
    """Check ``queue`` is a str of at most 255 UTF-8 bytes; `InvalidQueueName` if not."""
    if not isinstance(queue, str):
        raise InvalidQueueName(repr(queue), f"must be a str, got {type(queue).__name__}")
    try:
        n = len(queue.encode())
    except UnicodeEncodeError:
        raise InvalidQueueName(queue, "is not valid UTF-8 (contains a lone surrogate)") from None
    if n > MAX_QUEUE_NAME_BYTES:
        raise InvalidQueueName(queue, f"is {n} bytes, the maximum is {MAX_QUEUE_NAME_BYTES}")
    return queue


def _int(name: str, value: object, lo: int, hi: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidOption(f"{name} must be an int, got {value!r}")
    if not lo <= value <= hi:
        raise InvalidOption(f"{name} must be between {lo} and {hi}, got {value!r}")


def _seconds(name: str, value: object, *, positive: bool = False) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidOption(f"{name} must be a number of seconds, got {value!r}")
    if not math.isfinite(value) or value < 0 or (positive and value == 0):
        need = "positive" if positive else "non-negative"
        raise InvalidOption(f"{name} must be a finite {need} number of seconds, got {value!r}")


def checked_ms(name: str, value: object) -> int:
    """``value`` (a finite, non-negative number of seconds) in whole
    milliseconds; `InvalidOption` naming ``name`` otherwise."""
    _seconds(name, value)
    assert isinstance(value, int | float)
    return to_ms(value)


@dataclass(frozen=True, slots=True)
class QueueConfig:
    """Settings of one queue (semantics 1.26). Durations in seconds."""

    #: Claims a job may take before it is dead-lettered (0 behaves like 1).
    max_attempts: int = 3
    #: Lease of `Queue.claim` when no lease is given.
    lease_duration: float = 30.0
    #: Priority of jobs enqueued without one (lower claims first).
    default_priority: int = PRIORITY_NORMAL
    #: First retry delay after a nack; doubles per attempt; 0 retries at once.
    retry_backoff_base: float = 1.0
    #: Upper bound of the retry delay.
    retry_backoff_max: float = 300.0
    #: Keep acked jobs as Done records this long; None deletes them at ack.
    keep_done_jobs: float | None = None
    #: Delete Dead records this long after they died; None keeps them forever.
    dead_retention: float | None = 7 * 24 * 3600.0

    def __post_init__(self) -> None:
        _int("max_attempts", self.max_attempts, 0, _U32_MAX)
        _seconds("lease_duration", self.lease_duration)
        _int("default_priority", self.default_priority, 0, _U32_MAX)
        _seconds("retry_backoff_base", self.retry_backoff_base)
        _seconds("retry_backoff_max", self.retry_backoff_max)
        if self.keep_done_jobs is not None:
            _seconds("keep_done_jobs", self.keep_done_jobs)
        if self.dead_retention is not None:
            _seconds("dead_retention", self.dead_retention)


@dataclass(frozen=True, slots=True)
class OpenOptions:
    """How `Queue.open` opens a store (semantics 1.26). Durations in seconds."""

    #: Source of every timestamp and background-loop sleep.
    clock: Clock = field(default_factory=SystemClock)
    #: Period of the reaper (lease expiry, then retention sweeps).
    reaper_interval: float = 5.0
    #: Period of the scheduler (promotes due scheduled jobs).
    scheduler_interval: float = 1.0
    #: Config of every queue not named in `queue_configs`.
    default_queue_config: QueueConfig = field(default_factory=QueueConfig)
    #: Per-queue configs.
    queue_configs: Mapping[str, QueueConfig] = field(default_factory=dict)
    #: Payloads longer than this go to their own object; None keeps all inline.
    payload_offload_threshold: int | None = DEFAULT_PAYLOAD_OFFLOAD_THRESHOLD
    #: Period of the liveness heartbeat; None writes none.
    liveness_heartbeat: float | None = None
    #: Period of the fence check of an idle writer: one read of the log
    #: object after its last (720 requests an hour at 5 s, skipped while a
    #: flush is in flight), so that a writer another process fenced stops
    #: and fails its waiters with `Fenced` without waiting for its next
    #: write. None checks only at writes.
    fence_check_interval: float | None = 5.0
    #: Tuning of the underlying log writer.
    log_options: LogOptions | None = None
    #: The owner epoch to open the log at (a partition's, from the pool's
    #: assignment table): the open marker carries it, and an open at a lower
    #: epoch than the log's newest is refused with `StaleEpoch`, writing
    #: nothing (`LogWriter.open`). None (every unpartitioned store) checks
    #: nothing.
    epoch: int | None = None
    #: Take the log over from a live holder of the segment medium's lock
    #: (`durable.store.objects.segments`): for an owner whose ownership
    #: protocol judged the holder gone (a stopped process keeps its lock).
    #: False refuses with `LogLocked` while the holder lives.
    takeover: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.clock, Clock):
            raise InvalidOption(f"clock must provide now_ms() and sleep(), got {self.clock!r}")
        _seconds("reaper_interval", self.reaper_interval, positive=True)
        _seconds("scheduler_interval", self.scheduler_interval, positive=True)
        if not isinstance(self.default_queue_config, QueueConfig):
            raise InvalidOption(
                f"default_queue_config must be a QueueConfig, got {self.default_queue_config!r}"
            )
        for name, cfg in self.queue_configs.items():
            validate_queue_name(name)
            if not isinstance(cfg, QueueConfig):
                raise InvalidOption(f"queue_configs[{name!r}] must be a QueueConfig, got {cfg!r}")
        object.__setattr__(self, "queue_configs", MappingProxyType(dict(self.queue_configs)))
        if self.payload_offload_threshold is not None:
            _int("payload_offload_threshold", self.payload_offload_threshold, 0, _U64_MAX)
        if self.liveness_heartbeat is not None:
            _seconds("liveness_heartbeat", self.liveness_heartbeat, positive=True)
        if self.fence_check_interval is not None:
            _seconds("fence_check_interval", self.fence_check_interval, positive=True)
        if self.epoch is not None:
            _int("epoch", self.epoch, 0, _U64_MAX)

    def config_for(self, queue: str) -> QueueConfig:
        """The config of ``queue``."""
        return self.queue_configs.get(queue, self.default_queue_config)

    def all_configs(self) -> list[QueueConfig]:
        """The default config and every per-queue one."""
        return [self.default_queue_config, *self.queue_configs.values()]


@dataclass(frozen=True, slots=True)
class EnqueueOptions:
    """Per-job overrides of an enqueue (semantics 1.3); None = the queue's default."""

    #: Claims this job may take.
    max_attempts: int | None = None
    #: Lower claims first; `PRIORITY_HIGH`, `PRIORITY_NORMAL`, `PRIORITY_LOW` or any u32.
    priority: int | None = None
    #: Earliest claim time: epoch milliseconds, or a timezone-aware datetime.
    #: Later than now: the job is Scheduled; otherwise Pending.
    run_at: int | _dt.datetime | None = None
    #: While a job of this queue with this key is pending or scheduled, an
    #: enqueue with the same key writes nothing and returns the existing id.
    dedup_key: str | None = None
    #: Caller metadata stored on the record.
    headers: Mapping[str, str] | None = None
    #: The job id to use instead of a generated ULID (1-128 of ``[A-Za-z0-9_-]``).
    id_override: str | None = None

    def __post_init__(self) -> None:
        if self.max_attempts is not None:
            _int("max_attempts", self.max_attempts, 0, _U32_MAX)
        if self.priority is not None:
            _int("priority", self.priority, 0, _U32_MAX)
        if isinstance(self.run_at, _dt.datetime):
            if self.run_at.tzinfo is None:
                raise InvalidOption(
                    f"run_at must be timezone-aware, got the naive datetime {self.run_at!r}"
                )
        elif self.run_at is not None:
            _int("run_at (epoch milliseconds)", self.run_at, 0, _U64_MAX)
        if self.dedup_key is not None and not isinstance(self.dedup_key, str):
            raise InvalidOption(f"dedup_key must be a str, got {self.dedup_key!r}")
        if self.headers is not None:
            for k, v in self.headers.items():
                if not isinstance(k, str) or not isinstance(v, str):
                    raise InvalidOption(f"headers must map str to str, got {k!r}: {v!r}")
        if self.id_override is not None:
            validate_id(self.id_override, "id_override")

    def run_at_ms(self) -> int | None:
        """``run_at`` in epoch milliseconds."""
        if isinstance(self.run_at, _dt.datetime):
            return max(0, round(self.run_at.timestamp() * 1000))
        return self.run_at
