"""`PartitionSignalRoute`: where a partition's signal messages go.

On a partitioned store every correlation key has a *home* partition, by
default ``partition_of(key, P)`` (a layer above may co-locate keys, as the
decorators do for a child run's key, homed with the child and its parent);
a run lives in ``partition_of(run_id, P)``. The `durable.engine.signals.Signals`
of each partition's runtimes take this route: it says whether a key is at
home here, and turns each message of the protocol (see that module) into an
inbox request (`durable.cluster.requests`) staged in the partition's
`durable.cluster.outbox.Outbox`, addressed to the key's home or to the
waiting run's partition.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable, Mapping

from durable.cluster.manifest import check_partitions, partition_of
from durable.cluster.outbox import Outbox
from durable.cluster.requests import (
    NONCE_SIZE,
    ClearSignalRequest,
    Request,
    SignalDeliverRequest,
    SignalRegisterRequest,
    SignalRejectRequest,
    SignalRequest,
    SignalReturnRequest,
    SignalUnregisterRequest,
)
from durable.engine.signals import RemoteWaiter
from durable.errors import InvalidArgument

__all__ = ["Home", "PartitionSignalRoute"]

#: A correlation key's home partition.
Home = Callable[[str], int]


def _nonce() -> bytes:
    return secrets.token_bytes(NONCE_SIZE)


class PartitionSignalRoute:
    """The `durable.engine.signals.SignalRoute` of partition ``partition`` of
    ``partitions``, sending through ``outbox``; ``home`` gives a key's home
    partition (``partition_of(key, partitions)`` by default)."""

    __slots__ = ("_home", "_outbox", "partition", "partitions")

    def __init__(
        self,
        partition: int,
        partitions: int,
        outbox: Outbox,
        home: Home | None = None,
    ) -> None:
        self.partitions = check_partitions(partitions)
        if isinstance(partition, bool) or not isinstance(partition, int):
            raise InvalidArgument(f"a partition number must be an int, got {partition!r}")
        if not 0 <= partition < partitions:
            raise InvalidArgument(f"partition {partition} is not in 0..{partitions - 1}")
        #: This route's partition.
        self.partition = partition
        self._outbox = outbox
        self._home: Home = home if home is not None else self._default_home

    def _default_home(self, key: str) -> int:
        return partition_of(key, self.partitions)

    def home_of(self, key: str) -> int:
        """``key``'s home partition."""
        return self._home(key)

    def is_home(self, key: str) -> bool:
        """True when ``key``'s home is this partition."""
        return self._home(key) == self.partition

    def _to(self, target: int, request: Request) -> Mapping[bytes, bytes]:
        if target == self.partition:
            raise InvalidArgument(
                f"a signal message of partition {target} addressed to itself: {request!r:.120}"
            )
        return self._outbox.stage(target, request)

    def _to_home(self, key: str, request: Request) -> Mapping[bytes, bytes]:
        return self._to(self._home(key), request)

    def _to_run(self, run_id: str, request: Request) -> Mapping[bytes, bytes]:
        return self._to(partition_of(run_id, self.partitions), request)

    # ------------------------------------------------------------ messages

    def register(self, key: str, waiter: RemoteWaiter) -> Mapping[bytes, bytes]:
        """To ``key``'s home: ``waiter`` waits on ``key``."""
        request = SignalRegisterRequest(waiter.queue, _nonce(), key, waiter.run_id, waiter.job_id)
        return self._to_home(key, request)

    def unregister(self, key: str, waiter: RemoteWaiter) -> Mapping[bytes, bytes]:
        """To ``key``'s home: ``waiter`` no longer waits."""
        request = SignalUnregisterRequest(waiter.queue, _nonce(), key, waiter.run_id, waiter.job_id)
        return self._to_home(key, request)

    def deliver(self, key: str, waiter: RemoteWaiter, payload: bytes) -> Mapping[bytes, bytes]:
        """To ``waiter``'s partition: wake it with ``payload``."""
        request = SignalDeliverRequest(
            waiter.queue, _nonce(), key, waiter.run_id, waiter.job_id, payload
        )
        return self._to_run(waiter.run_id, request)

    def reject(self, key: str, waiter: RemoteWaiter) -> Mapping[bytes, bytes]:
        """To ``waiter``'s partition: another run waits on ``key``."""
        request = SignalRejectRequest(waiter.queue, _nonce(), key, waiter.run_id, waiter.job_id)
        return self._to_run(waiter.run_id, request)

    def give_back(self, queue: str, key: str, payload: bytes) -> Mapping[bytes, bytes]:
        """To ``key``'s home: a delivered ``payload`` no waiter took."""
        return self._to_home(key, SignalReturnRequest(queue, _nonce(), key, payload))

    def forward_signal(self, queue: str, key: str, payload: bytes) -> Mapping[bytes, bytes]:
        """To ``key``'s home: signal it."""
        return self._to_home(key, SignalRequest(queue, _nonce(), key, payload))

    def forward_clear(self, queue: str, key: str) -> Mapping[bytes, bytes]:
        """To ``key``'s home: discard its buffered signal."""
        return self._to_home(key, ClearSignalRequest(queue, _nonce(), key))

    def __repr__(self) -> str:
        return f"PartitionSignalRoute({self.partition} of {self.partitions})"
