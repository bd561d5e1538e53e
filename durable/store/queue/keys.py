"""Key layout of the queue's spaces in the store's ordered map.

Every key is ``tag, version (1), fields``. Times are u64 big-endian and
priorities u32 big-endian, so byte order is numeric order; a queue name
followed by more fields is prefixed by its length (one byte, names are at
most 255 bytes); ids and dedup keys are the tail.

| space      | key                                   | value                  |
|------------|---------------------------------------|------------------------|
| pending    | ``01 01 len queue prio:u32 id``       | job record             |
| claimed    | ``02 01 len queue id``                | job record             |
| scheduled  | ``03 01 run_at:u64 len queue id``     | job record             |
| done       | ``04 01 completed_at:u64 len queue id`` | job record           |
| dead       | ``05 01 len queue id``                | job record             |
| job index  | ``06 01 id``                          | primary key            |
| dedup      | ``07 01 len queue dedup_key``         | job id                 |
| stats      | ``09 01 len queue metric``            | i64 little-endian      |
| history    | ``0A 01 id``                          | concatenated entries   |
| heartbeat  | ``0B 01``                             | beat array             |

Pending, claimed and dead keys lead with the queue (one queue lists
alone); scheduled and done keys lead with a time (sweeps stop early).
"""

from __future__ import annotations

import functools
import struct
from dataclasses import dataclass

from durable.store import keyspace
from durable.store.queue.records import JobStatus

__all__ = [
    "VERSION",
    "PrimaryKey",
    "claimed_key",
    "claimed_prefix",
    "dead_key",
    "dead_prefix",
    "dedup_key",
    "done_key",
    "done_prefix",
    "heartbeat_key",
    "history_key",
    "job_index_key",
    "parse_primary",
    "parse_stats_key",
    "pending_key",
    "pending_prefix",
    "primary_key",
    "scheduled_key",
    "scheduled_prefix",
    "space_prefix",
    "stats_key",
    "stats_prefix",
]

#: The layout version byte that follows every tag.
VERSION = b"\x01"

_U32 = struct.Struct(">I")
_U64 = struct.Struct(">Q")

_TAG_OF_STATUS = {
    JobStatus.PENDING: keyspace.PENDING,
    JobStatus.CLAIMED: keyspace.CLAIMED,
    JobStatus.SCHEDULED: keyspace.SCHEDULED,
    JobStatus.DONE: keyspace.DONE,
    JobStatus.DEAD: keyspace.DEAD,
}
_STATUS_OF_TAG = {tag[0]: status for status, tag in _TAG_OF_STATUS.items()}


@functools.lru_cache(maxsize=1024)
def _q(queue: str) -> bytes:
    """The length-prefixed queue name (validated by the caller)."""
    b = queue.encode()
    return bytes((len(b),)) + b


def space_prefix(status: JobStatus) -> bytes:
    """The prefix of every record key of jobs in ``status``, all queues."""
    return _TAG_OF_STATUS[status] + VERSION


def pending_prefix(queue: str) -> bytes:
    """The prefix of ``queue``'s pending keys, in claim order."""
    return keyspace.PENDING + VERSION + _q(queue)


def pending_key(queue: str, priority: int, id: str) -> bytes:
    """Pending key: claim order is priority ascending, then id ascending."""
    return pending_prefix(queue) + _U32.pack(priority) + id.encode()


def claimed_prefix(queue: str) -> bytes:
    """The prefix of ``queue``'s claimed keys."""
    return keyspace.CLAIMED + VERSION + _q(queue)


def claimed_key(queue: str, id: str) -> bytes:
    """Claimed key of job ``id``."""
    return claimed_prefix(queue) + id.encode()


def scheduled_prefix() -> bytes:
    """The prefix of every scheduled key (all queues, by run_at)."""
    return keyspace.SCHEDULED + VERSION


def scheduled_key(run_at: int, queue: str, id: str) -> bytes:
    """Scheduled key, ordered by ``run_at``."""
    return scheduled_prefix() + _U64.pack(run_at) + _q(queue) + id.encode()


def done_prefix() -> bytes:
    """The prefix of every kept-done key (all queues, by completion time)."""
    return keyspace.DONE + VERSION


def done_key(completed_at: int, queue: str, id: str) -> bytes:
    """Done key, ordered by ``completed_at``."""
    return done_prefix() + _U64.pack(completed_at) + _q(queue) + id.encode()


def dead_prefix(queue: str) -> bytes:
    """The prefix of ``queue``'s dead keys, in id order."""
    return keyspace.DEAD + VERSION + _q(queue)


def dead_key(queue: str, id: str) -> bytes:
    """Dead key of job ``id``."""
    return dead_prefix(queue) + id.encode()


def job_index_key(id: str) -> bytes:
    """Index key: job id -> the job's current primary key."""
    return keyspace.JOB_INDEX + VERSION + id.encode()


def dedup_key(queue: str, key: str) -> bytes:
    """Dedup index key of ``key`` in ``queue``: -> job id."""
    return keyspace.DEDUP + VERSION + _q(queue) + key.encode()


def stats_prefix() -> bytes:
    """The prefix of every stats counter."""
    return keyspace.STATS + VERSION


@functools.lru_cache(maxsize=1024)
def stats_key(queue: str, metric: str) -> bytes:
    """Counter ``metric`` of ``queue``."""
    return stats_prefix() + _q(queue) + metric.encode()


def history_key(id: str) -> bytes:
    """Attempt history of job ``id``."""
    return keyspace.ATTEMPT_HISTORY + VERSION + id.encode()


def heartbeat_key() -> bytes:
    """The single liveness heartbeat key."""
    return keyspace.HEARTBEAT + VERSION


def primary_key(status: JobStatus, queue: str, id: str, *, priority: int = 0, at: int = 0) -> bytes:
    """The record key of a job in ``status`` (``at``: run_at or completed_at)."""
    if status is JobStatus.PENDING:
        return pending_key(queue, priority, id)
    if status is JobStatus.CLAIMED:
        return claimed_key(queue, id)
    if status is JobStatus.SCHEDULED:
        return scheduled_key(at, queue, id)
    if status is JobStatus.DONE:
        return done_key(at, queue, id)
    return dead_key(queue, id)


@dataclass(frozen=True, slots=True)
class PrimaryKey:
    """A record key, decoded."""

    status: JobStatus
    queue: str
    id: str
    #: Pending only.
    priority: int = 0
    #: Scheduled: run_at; done: completed_at.
    at: int = 0


def _take_queue(key: bytes, pos: int) -> tuple[str, int]:
    n = key[pos]
    end = pos + 1 + n
    if end > len(key):
        raise ValueError("truncated queue name")
    return key[pos + 1 : end].decode(), end


def status_of_primary(key: bytes) -> JobStatus | None:
    """The status a record key of any job space stands for (its space's
    tag), without parsing the rest; None if ``key`` is not one."""
    if len(key) < 3 or key[1:2] != VERSION:
        return None
    return _STATUS_OF_TAG.get(key[0])


def parse_primary(key: bytes) -> PrimaryKey | None:
    """Decode a record key of any job space; None if ``key`` is not one."""
    if len(key) < 3 or key[1:2] != VERSION:
        return None
    status = _STATUS_OF_TAG.get(key[0])
    if status is None:
        return None
    try:
        if status in (JobStatus.SCHEDULED, JobStatus.DONE):
            (at,) = _U64.unpack_from(key, 2)
            queue, pos = _take_queue(key, 10)
            return PrimaryKey(status, queue, key[pos:].decode(), at=at)
        queue, pos = _take_queue(key, 2)
        if status is JobStatus.PENDING:
            (priority,) = _U32.unpack_from(key, pos)
            return PrimaryKey(status, queue, key[pos + 4 :].decode(), priority=priority)
        return PrimaryKey(status, queue, key[pos:].decode())
    except (ValueError, IndexError, struct.error):
        return None


def parse_stats_key(key: bytes) -> tuple[str, str] | None:
    """``(queue, metric)`` of a stats key, or None."""
    prefix = stats_prefix()
    if not key.startswith(prefix):
        return None
    try:
        queue, pos = _take_queue(key, len(prefix))
        return queue, key[pos:].decode()
    except (ValueError, IndexError):
        return None
