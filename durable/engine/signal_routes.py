"""What a partition's signal records say about other partitions (issue 15).

On a partitioned store (`durable.cluster.manifest`) a correlation key has a
*home* partition. A run of another partition that waits on the key is
named in the home's waiter index by a `RemoteWaiter` (a tagged value that
never reads as a local job id), and `durable.engine.signals.Signals` sends
the messages that move a signal between the two through a `SignalRoute`
(`durable.cluster.signal_route.PartitionSignalRoute`, over the partition's
outbox). On an unpartitioned store none of this is used.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

import msgpack

__all__ = [
    "REMOTE_WAITER_TAG",
    "RemoteWaiter",
    "SignalRoute",
    "decode_remote_waiter",
    "encode_remote_waiter",
]


#: The first byte of a waiter index value naming a `RemoteWaiter` (a local
#: waiter's value is its job id, printable ASCII).
REMOTE_WAITER_TAG = b"\x00"
_REMOTE_WAITER_VERSION = 1


@dataclass(frozen=True, slots=True)
class RemoteWaiter:
    """A run of another partition waiting on a key whose home is this
    store: its step job ``job_id`` of runtime queue ``queue`` is scheduled
    at the timeout in the run's own partition."""

    run_id: str
    job_id: str
    queue: str


def encode_remote_waiter(waiter: RemoteWaiter) -> bytes:
    """The waiter index value naming ``waiter``."""
    body = [_REMOTE_WAITER_VERSION, waiter.run_id, waiter.job_id, waiter.queue]
    return REMOTE_WAITER_TAG + msgpack.packb(body, use_bin_type=True)


def decode_remote_waiter(raw: bytes) -> RemoteWaiter | None:
    """The `RemoteWaiter` a waiter index value names; None for any other
    value (a local job id, or bytes that do not decode: a stale entry)."""
    if not raw.startswith(REMOTE_WAITER_TAG):
        return None
    try:
        version, run_id, job_id, queue = msgpack.unpackb(raw[1:], raw=False)
    except Exception:  # msgpack raises several unrelated types; unpacking too
        return None
    if version != _REMOTE_WAITER_VERSION or not all(
        isinstance(v, str) for v in (run_id, job_id, queue)
    ):
        return None
    return RemoteWaiter(run_id, job_id, queue)


class SignalRoute(Protocol):
    """Where correlation keys live when the store is one partition of
    several (`durable.cluster.signal_route`). Each method but `is_home`
    returns the reserved KV puts (an outbox record) that send one message
    once the transaction they are committed with is durable."""

    def is_home(self, key: str) -> bool:
        """True when ``key``'s home is this partition."""
        ...

    def register(self, key: str, waiter: RemoteWaiter) -> Mapping[bytes, bytes]:
        """To ``key``'s home: ``waiter`` waits on ``key``."""
        ...

    def unregister(self, key: str, waiter: RemoteWaiter) -> Mapping[bytes, bytes]:
        """To ``key``'s home: ``waiter`` no longer waits."""
        ...

    def deliver(self, key: str, waiter: RemoteWaiter, payload: bytes) -> Mapping[bytes, bytes]:
        """To ``waiter``'s partition: wake it with ``payload``."""
        ...

    def reject(self, key: str, waiter: RemoteWaiter) -> Mapping[bytes, bytes]:
        """To ``waiter``'s partition: another run waits on ``key``."""
        ...

    def give_back(self, queue: str, key: str, payload: bytes) -> Mapping[bytes, bytes]:
        """To ``key``'s home: a delivered ``payload`` no waiter took."""
        ...

    def forward_signal(self, queue: str, key: str, payload: bytes) -> Mapping[bytes, bytes]:
        """To ``key``'s home: signal it."""
        ...

    def forward_clear(self, queue: str, key: str) -> Mapping[bytes, bytes]:
        """To ``key``'s home: discard its buffered signal."""
        ...
