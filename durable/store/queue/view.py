"""Read-only queries over a store's state: the writer's or a reader's.

`QueueView` holds only pure reads (plus payload fetches), so it runs over
the live state of an open `Queue` and over a `LogReader`'s lagging copy
alike. `QueueReader` opens a read-only view from any process; it never
fences the writer and sees whole commits or nothing.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from durable.errors import BlobMissing, InvalidOption, PayloadMissing
from durable.store.keyspace import user_key
from durable.store.kv import KvNamespace
from durable.store.log import BlobStore, LogReader, State, prefix_end
from durable.store.objects.base import ObjectStore
from durable.store.objects.url import resolve_store
from durable.store.queue import keys
from durable.store.queue.heartbeat import Heartbeat, read_heartbeat
from durable.store.queue.options import validate_queue_name
from durable.store.queue.records import (
    HistoryEntry,
    JobRecord,
    JobStatus,
    decode_history,
    decode_record,
)
from durable.store.queue.txn import decode_counter

__all__ = ["JobPage", "QueueReader", "QueueStats", "QueueView", "StoreActivity"]


class _HasState(Protocol):
    @property
    def state(self) -> State: ...


@dataclass(frozen=True, slots=True)
class QueueStats:
    """Counters of one queue: live sizes, and ``done`` as cumulative throughput."""

    queue: str
    pending: int = 0
    claimed: int = 0
    done: int = 0
    dead: int = 0
    scheduled: int = 0


@dataclass(frozen=True, slots=True)
class JobPage:
    """One page of `QueueView.list_jobs`; pass ``next_cursor`` for the next one."""

    jobs: list[JobRecord]
    #: The last row's stored key, present only if more rows follow.
    next_cursor: bytes | None


@dataclass(frozen=True, slots=True)
class StoreActivity:
    """What a reader knows of the writer's progress (semantics 1.15)."""

    #: The last log sequence number this reader applied; watch it advance.
    durable_seq: int
    #: The epoch of the writer that wrote the last heartbeat, if any.
    writer_epoch: int | None


def _limit(limit: int) -> int:
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 0:
        raise InvalidOption(f"limit must be a non-negative int, got {limit!r}")
    return limit


class QueueView:
    """Reads over ``source.state`` (semantics 1.17, 1.18, 1.16)."""

    def __init__(self, source: _HasState, blobs: BlobStore) -> None:
        self._source = source
        self.blobs = blobs

    @property
    def state(self) -> State:
        """The state read by this view."""
        return self._source.state

    # -------------------------------------------------------------- stats

    def stats(self, queue: str) -> QueueStats:
        """Counters of ``queue`` (missing = 0)."""
        validate_queue_name(queue)
        st = self.state
        values = {
            m: decode_counter(st.get(keys.stats_key(queue, m)))
            for m in ("pending", "claimed", "done", "dead", "scheduled")
        }
        return QueueStats(queue, **values)

    def list_queues(self) -> list[str]:
        """Every queue that ever held a job (sorted by name bytes)."""
        out: list[str] = []
        for key, _ in self.state.scan_prefix(keys.stats_prefix()):
            parsed = keys.parse_stats_key(key)
            if parsed is not None and (not out or out[-1] != parsed[0]):
                out.append(parsed[0])
        return out

    # --------------------------------------------------------------- jobs

    def _locate(self, id: str) -> tuple[bytes, bytes] | None:
        if not isinstance(id, str):
            raise InvalidOption(f"id must be a str, got {type(id).__name__}")
        st = self.state
        pk = st.get(keys.job_index_key(id))
        if pk is None:
            return None
        raw = st.get(pk)
        return None if raw is None else (pk, raw)

    def kv_get(self, key: bytes) -> bytes | None:
        """The caller KV value at ``key``, or None (any prefix may be read)."""
        if not isinstance(key, bytes):
            raise InvalidOption(f"KV keys are bytes, got {type(key).__name__}")
        return self.state.get(user_key(key))

    def job_status(self, id: str) -> JobStatus | None:
        """Where job ``id`` is, read from the key its record is stored under
        (each status has its own key space: nothing is decoded); None if
        unknown or removed."""
        found = self._locate(id)
        return None if found is None else keys.status_of_primary(found[0])

    def job_record(self, id: str) -> JobRecord | None:
        """Job ``id`` in stored form (an offloaded payload is not fetched), or None."""
        found = self._locate(id)
        return None if found is None else decode_record(found[1], repr(found[0]))

    async def get_job(self, id: str) -> JobRecord | None:
        """Job ``id`` with its payload inline, or None if unknown or removed.

        `PayloadMissing` if the job is live but its payload object is gone.
        """
        rec = self.job_record(id)
        if rec is None or rec.payload_ref is None:
            return rec
        try:
            data = await self.blobs.get(rec.payload_ref)
        except BlobMissing:
            if self.state.get(keys.job_index_key(id)) is None:
                return None  # raced its removal
            raise PayloadMissing(id) from None
        return rec.replace(payload=data)

    async def load_payload(self, record: JobRecord) -> bytes:
        """The payload of a (stored-form) record; `PayloadMissing` if its object is gone."""
        if record.payload_ref is None:
            return record.payload
        try:
            return await self.blobs.get(record.payload_ref)
        except BlobMissing:
            raise PayloadMissing(record.id) from None

    def _space(self, queue: str, status: JobStatus) -> tuple[bytes, bool]:
        """The prefix to scan and whether rows must be filtered by queue."""
        if status is JobStatus.PENDING:
            return keys.pending_prefix(queue), False
        if status is JobStatus.CLAIMED:
            return keys.claimed_prefix(queue), False
        if status is JobStatus.DEAD:
            return keys.dead_prefix(queue), False
        return keys.space_prefix(status), True

    def list_jobs(
        self,
        queue: str,
        status: JobStatus,
        cursor: bytes | None = None,
        limit: int = 100,
    ) -> JobPage:
        """A page of ``queue``'s jobs in ``status``, in stored form.

        Order: Pending in claim order, Scheduled by run_at, Claimed and Dead
        by id, Done by completion time. Not a snapshot across pages.
        """
        validate_queue_name(queue)
        if not isinstance(status, JobStatus):
            raise InvalidOption(f"status must be a JobStatus, got {status!r}")
        if cursor is not None and not isinstance(cursor, bytes):
            raise InvalidOption(f"cursor must be bytes or None, got {type(cursor).__name__}")
        _limit(limit)
        prefix, filtered = self._space(queue, status)
        if limit == 0 or (cursor is not None and not cursor.startswith(prefix)):
            return JobPage([], None)
        start, inclusive = (cursor, False) if cursor is not None else (prefix, True)
        rows: list[tuple[bytes, JobRecord]] = []
        for key, raw in self.state.scan(start, prefix_end(prefix), inclusive=(inclusive, False)):
            if filtered:
                parsed = keys.parse_primary(key)
                if parsed is None or parsed.queue != queue:
                    continue
            rows.append((key, decode_record(raw, repr(key))))
            if len(rows) > limit:
                break
        more = len(rows) > limit
        rows = rows[:limit]
        return JobPage([r for _, r in rows], rows[-1][0] if more else None)

    def iter_jobs(self, queue: str, status: JobStatus, page_size: int = 100) -> Iterator[JobRecord]:
        """Every job of ``queue`` in ``status``, fetched page by page."""
        if _limit(page_size) == 0:
            raise InvalidOption("page_size must be positive")
        cursor: bytes | None = None
        while True:
            page = self.list_jobs(queue, status, cursor, page_size)
            yield from page.jobs
            if page.next_cursor is None:
                return
            cursor = page.next_cursor

    def dead_jobs(
        self, queue: str, after_id: str | None = None, limit: int = 100
    ) -> list[JobRecord]:
        """``queue``'s dead jobs in id order, after ``after_id`` (exclusive)."""
        validate_queue_name(queue)
        _limit(limit)
        if after_id is not None and not isinstance(after_id, str):
            raise InvalidOption(f"after_id must be a str or None, got {after_id!r}")
        prefix = keys.dead_prefix(queue)
        start = keys.dead_key(queue, after_id) if after_id is not None else prefix
        out: list[JobRecord] = []
        if limit == 0:
            return out
        scan = self.state.scan(start, prefix_end(prefix), inclusive=(after_id is None, False))
        for key, raw in scan:
            out.append(decode_record(raw, repr(key)))
            if len(out) >= limit:
                break
        return out

    def attempt_history(self, id: str) -> list[HistoryEntry]:
        """Job ``id``'s attempt history in write order (empty once the job is gone)."""
        if not isinstance(id, str):
            raise InvalidOption(f"id must be a str, got {type(id).__name__}")
        raw = self.state.get(keys.history_key(id))
        return [] if raw is None else decode_history(raw, f"history of {id!r}")

    def writer_heartbeat(self) -> Heartbeat | None:
        """The writer's last liveness beat, or None."""
        return read_heartbeat(self.state)


class QueueReader(QueueView):
    """A read-only view of a store from any process; `refresh` to catch up."""

    def __init__(self, reader: LogReader) -> None:
        super().__init__(reader, BlobStore(reader.objects))
        self.reader = reader
        self._owned_objects: ObjectStore | None = None
        #: The caller KV namespace, read-only.
        self.kv = KvNamespace(reader)

    @classmethod
    async def open(
        cls,
        store: ObjectStore | str | os.PathLike[str],
        *,
        storage_options: Mapping[str, Any] | None = None,
    ) -> QueueReader:
        """Load ``store`` (an `ObjectStore`, or a URL or path it then closes).

        `StoreNotInitialized` if no writer ever opened it.
        """
        objects, owned = await resolve_store(store, storage_options)
        try:
            reader = cls(await LogReader.open(objects))
        except BaseException:
            if owned:
                await objects.close()
            raise
        reader._owned_objects = objects if owned else None
        return reader

    async def close(self) -> None:
        """Close the reader (its KV watches fail with `StoreClosed`) and release
        the object store if this reader opened it from a URL."""
        self.reader.close()
        if self._owned_objects is not None:
            await self._owned_objects.close()
            self._owned_objects = None

    async def refresh(self) -> int:
        """Apply the commits written since the last refresh; the new log seq."""
        return await self.reader.refresh()

    def last_store_activity(self) -> StoreActivity:
        """The writer's progress as this reader sees it."""
        beat = self.writer_heartbeat()
        return StoreActivity(self.reader.seq, beat.writer_epoch if beat is not None else None)
