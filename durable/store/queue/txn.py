"""A queue transaction: reads over the store's state, staged writes, one commit.

Everything runs on one event loop, so a transaction is a *synchronous*
critical section: read `Txn.get`, stage writes, `Txn.commit` -- with no
``await`` in between. Nothing else can interleave, so there is no conflict
to detect and no retry loop (the Rust crate's optimistic retries are not
needed). Reads see the transaction's own staged writes.

Stats counters and attempt history are read-modify-write inside the same
critical section, which gives the merge semantics of the reference
(commutative adds, appends) for free.
"""

from __future__ import annotations

import struct
from collections.abc import Callable

from durable.store.log import Durable, LogWriter, State, WriteBatch
from durable.store.queue import keys
from durable.store.queue.records import HistoryEntry, JobStatus, encode_history_entry
from durable.store.queue.wakeups import Wakeups

__all__ = ["METRIC_OF_STATUS", "Txn", "decode_counter"]

_I64 = struct.Struct("<q")

#: The live-size counter of each status (`done` is cumulative throughput).
METRIC_OF_STATUS = {
    JobStatus.PENDING: "pending",
    JobStatus.SCHEDULED: "scheduled",
    JobStatus.CLAIMED: "claimed",
    JobStatus.DONE: "done",
    JobStatus.DEAD: "dead",
}


def decode_counter(value: bytes | None) -> int:
    """A stored counter (i64 little-endian); 0 when absent or malformed."""
    if value is None or len(value) != 8:
        return 0
    return int(_I64.unpack(value)[0])


class Txn:
    """Staged writes over ``state``; see the module docstring."""

    __slots__ = (
        "_dead",
        "_inserts",
        "_overlay",
        "_pending_ids",
        "_wakeups",
        "after",
        "batch",
        "on_durable",
        "state",
    )

    def __init__(self, state: State, wakeups: Wakeups | None = None) -> None:
        self.state = state
        self._wakeups = wakeups
        self._inserts: dict[str, int] = {}
        self._dead: dict[str, int] = {}
        self._pending_ids: list[str] = []
        self.batch = WriteBatch()
        self._overlay: dict[bytes, bytes | None] = {}
        #: Called, in order, right after the commit is applied to memory.
        self.after: list[Callable[[], object]] = []
        #: Called once the commit is durable (right after it, for paths that
        #: do not await durability).
        self.on_durable: list[Callable[[], object]] = []

    def get(self, key: bytes) -> bytes | None:
        """The value at ``key`` as this transaction sees it."""
        if key in self._overlay:
            return self._overlay[key]
        return self.state.get(key)

    def put(self, key: bytes, value: bytes) -> None:
        """Stage ``key = value``."""
        self._overlay[key] = value
        self.batch.put(key, value)

    def delete(self, key: bytes) -> None:
        """Stage the removal of ``key``."""
        self._overlay[key] = None
        self.batch.delete(key)

    def release(self, blob: str | None) -> None:
        """Delete payload object ``blob`` once this commit is durable."""
        if blob is not None:
            self.batch.release(blob)

    def inserted(self, queue: str, job_id: str) -> None:
        """Note that job ``job_id`` becomes pending in ``queue``: wake workers
        after the commit; claims of it wait until the commit is durable."""
        self._inserts[queue] = self._inserts.get(queue, 0) + 1
        self._pending_ids.append(job_id)

    def count(self, queue: str, metric: str, delta: int) -> None:
        """Add ``delta`` to counter ``metric`` of ``queue``."""
        key = keys.stats_key(queue, metric)
        self.put(key, _I64.pack(decode_counter(self.get(key)) + delta))

    def move(self, queue: str, src: JobStatus | None, dst: JobStatus | None) -> None:
        """Count a job leaving ``src`` and entering ``dst`` (None: outside the queue)."""
        if src is not None and src is not JobStatus.DONE:
            self.count(queue, METRIC_OF_STATUS[src], -1)
        if dst is not None:
            self.count(queue, METRIC_OF_STATUS[dst], 1)
        if dst is JobStatus.DEAD:
            self._dead[queue] = self._dead.get(queue, 0) + 1

    def append_history(self, id: str, entry: HistoryEntry) -> None:
        """Append one attempt-history entry of job ``id``."""
        key = keys.history_key(id)
        self.put(key, (self.get(key) or b"") + encode_history_entry(entry))

    def commit(self, writer: LogWriter, *, lazy: bool = False) -> Durable | None:
        """Apply the staged writes now and run `after`; await the result for durability.

        An empty transaction commits nothing and returns None. ``lazy``: see
        `LogWriter.commit`.
        """
        durable = writer.commit(self.batch, lazy=lazy) if self.batch else None
        for action in self.after:
            action()
        if self._wakeups is not None:
            if durable is not None and self._pending_ids:
                self._wakeups.created(self._pending_ids, durable)
                self._wakeups.made_here(self._pending_ids)
            for queue, n in self._inserts.items():
                self._wakeups.inserted(queue, n)
            for queue, n in self._dead.items():
                self._wakeups.dead_lettered(queue, n)
        return durable

    def settle_durable(self) -> None:
        """Run the `on_durable` actions."""
        for action in self.on_durable:
            action()

    def commit_nowait(self, writer: LogWriter) -> None:
        """Commit without awaiting durability (paths that recovery redoes)."""
        self.commit(writer)
        self.settle_durable()
