"""The first byte of every key in a store's state: which space it belongs to.

Spaces never nest: no key of one space is a prefix of another's. The queue
owns the spaces 0x01-0x0F; the caller KV namespace is everything under
`USER`, so a caller key can never collide with an internal key.
"""

from __future__ import annotations

from durable.errors import KvValueTooLarge

__all__ = [
    "ATTEMPT_HISTORY",
    "CLAIMED",
    "CURSOR",
    "DEAD",
    "DEDUP",
    "DONE",
    "HEARTBEAT",
    "JOB_INDEX",
    "PENDING",
    "SCHEDULED",
    "STATS",
    "MAX_KV_VALUE_SIZE",
    "USER",
    "check_kv_value",
    "user_key",
]

PENDING = b"\x01"
CLAIMED = b"\x02"
SCHEDULED = b"\x03"
DONE = b"\x04"
DEAD = b"\x05"
JOB_INDEX = b"\x06"
DEDUP = b"\x07"
CURSOR = b"\x08"
STATS = b"\x09"
ATTEMPT_HISTORY = b"\x0a"
#: The queue's liveness heartbeat (one key).
HEARTBEAT = b"\x0b"
#: The caller KV namespace: ``USER + caller key``.
USER = b"\xff"

#: The largest caller KV value, in bytes (256 KiB).
MAX_KV_VALUE_SIZE = 256 * 1024


def user_key(key: bytes) -> bytes:
    """The state key that holds caller KV key ``key``."""
    return USER + key


def check_kv_value(key: bytes, value: bytes) -> None:
    """Raise `KvValueTooLarge` if ``value`` is over `MAX_KV_VALUE_SIZE`."""
    if len(value) > MAX_KV_VALUE_SIZE:
        raise KvValueTooLarge(key, len(value), MAX_KV_VALUE_SIZE)
