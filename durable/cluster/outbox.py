"""`Outbox`: the requests one partition sends others, sent once durable.

A transaction of a partition that must tell another partition something
(`durable.engine.signals` across partitions) commits, with its own writes,
an *outbox record* (`Outbox.stage`): the reserved KV entry
``workflow/outbox/<ulid>`` holding the target partition, the name the
request has in the target's inbox (``inbox/req/<ulid>``, the same ULID)
and the request's bytes (`durable.cluster.requests`, its nonce included).
Nothing leaves before that transaction is durable: a record is sent only
once a KV watch on its key fired (the commit is durable) or after a flush
of the writer, and at start (`Outbox.start`), when every record found is
durable and is sent again.

Sending a record (`Outbox.send_now`, one pass over the records in ULID
order):

- the target partition owned by this process (its `InboxApplier`): the
  request is applied at once (`InboxApplier.apply_direct`, one commit
  there with its done record), no object written;
- otherwise (or if that applier stopped meanwhile): the object is created
  in the target's inbox, create-if-absent, for its owner to apply;

then the records sent are deleted, in one commit per pass. A crash
between a send and that delete sends the record again: the same object
name and nonce, so the target's done record makes the copy a no-op
(`durable.cluster.done`; they are kept an hour). One target that cannot
be reached holds back its own records only (kept in order), retried with
a backoff.

What it costs: one KV put riding the deciding commit, then per record
either one apply commit at a target this process owns or one object PUT
(and the owner's LIST, GET, apply commit, DELETE), and one commit deleting
every record of the pass.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import msgpack

from durable._logging import get_logger
from durable.cluster.requests import REQ_PREFIX, Request, decode_request, encode_request
from durable.engine.runs import RESERVED_KV_PREFIX
from durable.errors import (
    CorruptEngineRecord,
    Fenced,
    ObjectNotFound,
    StoreClosed,
    StoreError,
)
from durable.store.clock import Clock
from durable.store.ids import IdGenerator
from durable.store.log.retry import DEFAULT_RETRY_SECONDS, create_retrying
from durable.store.queue import SettlementEffects

if TYPE_CHECKING:
    from durable.cluster.applier import InboxApplier
    from durable.engine.access import RunQueue
    from durable.store.objects.base import ObjectStore

__all__ = [
    "OUTBOX_PREFIX",
    "Destination",
    "Destinations",
    "Outbox",
    "OutboxRecord",
    "decode_outbox_record",
    "encode_outbox_record",
]

log = get_logger("durable.cluster.outbox")

#: Where outbox records live in a partition's KV namespace.
OUTBOX_PREFIX = RESERVED_KV_PREFIX + b"outbox/"
_VERSION = 1
#: Records read per pass.
_PAGE = 256
#: The pass run without a poke (a safety net: pokes come from KV watches).
_IDLE = 1.0
#: After a failed send, the wait before the next pass, doubling up to `_ERROR_MAX`.
_ERROR_DELAY = 0.05
_ERROR_MAX = 5.0


@dataclass(frozen=True, slots=True)
class OutboxRecord:
    """One request waiting to leave: to partition ``target``, as inbox
    object ``name`` there, with the request's bytes ``data``."""

    target: int
    name: str
    data: bytes


def encode_outbox_record(record: OutboxRecord) -> bytes:
    """The stored bytes of an outbox record."""
    m = {"v": _VERSION, "to": record.target, "name": record.name, "data": record.data}
    return msgpack.packb(m, use_bin_type=True)


def decode_outbox_record(key: bytes, raw: bytes) -> OutboxRecord:
    """The outbox record stored at ``key``; `CorruptEngineRecord` naming it otherwise."""
    what = f"outbox record {key!r}"
    try:
        m = msgpack.unpackb(raw, raw=False)
    except Exception as e:  # msgpack raises several unrelated types
        raise CorruptEngineRecord(what, f"not MessagePack ({type(e).__name__}: {e})") from e
    if not isinstance(m, dict) or m.get("v") != _VERSION:
        raise CorruptEngineRecord(what, f"not an outbox record of version {_VERSION}")
    target, name, data = m.get("to"), m.get("name"), m.get("data")
    if isinstance(target, bool) or not isinstance(target, int) or target < 0:
        raise CorruptEngineRecord(what, f"field 'to' is {target!r:.80}")
    if not isinstance(name, str) or not name.startswith(REQ_PREFIX):
        raise CorruptEngineRecord(what, f"field 'name' is {name!r:.80}")
    if not isinstance(data, bytes):
        raise CorruptEngineRecord(what, "field 'data' is not bytes")
    return OutboxRecord(target, name, data)


@dataclass(frozen=True, slots=True)
class Destination:
    """How requests reach one partition: its store (the inbox's objects),
    and its applier when this process owns it (None otherwise)."""

    objects: ObjectStore
    applier: InboxApplier | None = None


#: The `Destination` of a partition number.
Destinations = Callable[[int], Destination]


class Outbox:
    """The outbox of one partition owned here, over its ``queue``; see the
    module docstring. ``destinations`` finds each target; ``clock`` stamps
    the records' ULIDs."""

    def __init__(
        self,
        queue: RunQueue,
        destinations: Destinations,
        clock: Clock,
        *,
        retry_seconds: float = DEFAULT_RETRY_SECONDS,
    ) -> None:
        self._queue = queue
        self._destinations = destinations
        self._ids = IdGenerator(clock)
        self._retry = retry_seconds
        self._poked = asyncio.Event()
        self._lock = asyncio.Lock()
        self._stopping = False
        self._task: asyncio.Task[None] | None = None

    # -------------------------------------------------------------- staging

    def stage(self, target: int, request: Request) -> dict[bytes, bytes]:
        """The KV put of a record sending ``request`` to partition ``target``:
        commit it with the transaction that decides to send; it leaves once
        that commit is durable."""
        ulid = self._ids.next()
        key = OUTBOX_PREFIX + ulid.encode()
        record = OutboxRecord(target, REQ_PREFIX + ulid, encode_request(request))
        self._queue.kv.watch(key).add_done_callback(self._fired)
        return {key: encode_outbox_record(record)}

    def _fired(self, fut: asyncio.Future[None]) -> None:
        if not fut.cancelled() and fut.exception() is None:
            self.poke()

    @property
    def pending(self) -> bool:
        """True while records wait to be sent (an in-memory count)."""
        return self._queue.kv.count(OUTBOX_PREFIX) > 0

    def poke(self) -> None:
        """Run a pass now."""
        self._poked.set()

    # ------------------------------------------------------------ lifecycle

    def start(self) -> None:
        """Start sending (every record already stored first)."""
        if self._task is not None and not self._task.done():
            return
        self._stopping = False
        self._poked.set()
        self._task = asyncio.get_running_loop().create_task(self._run(), name="durable-outbox")

    async def stop(self) -> None:
        """Stop sending, after a last pass (what it cannot send stays stored,
        for this partition's next owner)."""
        if self._task is None:
            return
        self._stopping = True
        self._poked.set()
        task, self._task = self._task, None
        await asyncio.gather(task, return_exceptions=True)
        try:
            await self.send_now()
        except StoreError as e:
            log.info("outbox stopped with records left", error=str(e))

    def abort(self) -> None:
        """Stop sending at once, as a crash would (the partition was lost:
        its records are the next owner's to send)."""
        self._stopping = True
        if self._task is not None:
            self._task.cancel()
            self._task = None

    @property
    def running(self) -> bool:
        """True while the loop runs."""
        return self._task is not None and not self._task.done()

    async def _run(self) -> None:
        failures = 0
        while not self._stopping:
            self._poked.clear()
            try:
                left = await self.send_now()
                failures = 0 if not left else failures + 1
            except (Fenced, StoreClosed) as e:
                log.info("outbox stops: the partition's writer stopped", error=str(e))
                return
            except Exception as e:  # logged; the next pass retries
                failures += 1
                log.warning("outbox pass failed", error=str(e), failures=failures)
            delay = _IDLE
            if failures:
                delay = min(_ERROR_DELAY * 2.0 ** min(failures - 1, 20), _ERROR_MAX)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._poked.wait(), delay)

    # -------------------------------------------------------------- sending

    async def send_now(self) -> int:
        """One pass (passes run one at a time): send every durable record,
        delete those sent; how many are left (their target unreachable)."""
        async with self._lock:
            kv = self._queue.kv
            blocked: set[int] = set()
            left, after = 0, None
            while True:
                page = kv.scan(OUTBOX_PREFIX, after, inclusive=(False, False), limit=_PAGE)
                if not page.entries:
                    return left
                await self._queue.writer.flush()  # every record read is durable
                left += await self._send_page(page.entries, blocked)
                if not page.more:
                    return left
                after = page.last_key

    async def _send_page(self, entries: list[tuple[bytes, bytes]], blocked: set[int]) -> int:
        """Send these records (skipping ``blocked`` targets, adding those that
        fail), delete those sent in one commit; how many are left."""
        done = SettlementEffects()
        left = 0
        for key, raw in entries:
            try:
                record = decode_outbox_record(key, raw)
            except CorruptEngineRecord as e:
                log.error(
                    "corrupt outbox record dropped", key=key.decode(errors="replace"), reason=str(e)
                )
                done.kv_delete(key)
                continue
            if record.target in blocked:
                left += 1
                continue
            try:
                replacement = await self._send(record)
            except Exception as e:
                log.warning(
                    "outbox request not sent yet",
                    target=record.target,
                    name=record.name,
                    error=str(e),
                )
                blocked.add(record.target)  # its later records wait, in order
                left += 1
                continue
            done.kv_delete(key)
            if replacement is not None:
                for k, v in self.stage(record.target, replacement).items():
                    done.kv_put(k, v)
        if not done.is_empty():
            await self._queue.commit_effects(done)
        return left

    async def _send(self, record: OutboxRecord) -> Request | None:
        """Send one record; a request to send again under a new name when
        its name is taken by another writer's object (None: sent)."""
        destination = self._destinations(record.target)
        if destination.applier is not None:
            try:
                await destination.applier.apply_direct(record.name, record.data)
                return None
            except StoreError as e:  # not applied here (CorruptRequest too): the inbox
                log.info("outbox: the target's applier stopped", target=record.target, error=str(e))
        try:
            existing = await create_retrying(
                destination.objects, record.name, record.data, self._retry
            )
        except ObjectNotFound:
            return None  # there, then applied and deleted while we looked
        if existing is None or existing == record.data:
            return None
        log.error("outbox: an inbox name was taken; sending again", name=record.name)
        return decode_request(record.name, record.data)

    def __repr__(self) -> str:
        return f"Outbox({self._queue.kv.url!r})"
