"""``durable.write_stream`` / ``durable.close_stream``: a run's append-only streams.

A run writes values to named streams; readers (`durable.decorators.stream_read`)
follow them from any process. A stream is a sequence of *items* at offsets
0, 1, 2...: the values written, and `StreamDiscarded` markers.

Who writes, and what holds:

- **The workflow body.** Each body write takes an ordinal among the
  body's writes to that key, counted from 0 by every delivery (a replay
  re-issues them in the same order). A write lands only if its ordinal is
  not stored yet, so body values appear exactly once, in order, whatever
  crashes; the await returns once the value is durable.
- **A step's body.** The await returns once the value is buffered: it
  reaches the store (and readers) within `LINGER` seconds, while the step
  still runs. Every value of an attempt is durable before the step's
  result is journaled. An attempt that fails (and is retried, or ends the
  step with its error), or whose process dies, is *discarded*: before the
  next attempt writes anything (or as the failed step is journaled), a
  `StreamDiscarded` marker is appended to every stream the attempt wrote
  to, naming the step, the attempt, and the offset and count of its values.

Writes batch: a write joins the engine's buffer, which commits everything
buffered as one store transaction `LINGER` seconds after its first value
(a body write: at the next turn of the event loop; a step journaling its
result: at once), so the log takes one object for many values.

Layout, under the engine's reserved KV prefix (``{k}`` is the hex of the
stream key, so no key's prefix holds another key's items)::

    workflow/streams/{run_id}/i/{k}/{offset:012d}   an item
    workflow/streams/{run_id}/m/{k}                 the stream's meta
    workflow/streams/{run_id}/w/{position:010d}     what a step attempt wrote

An item is ``{"v": 1, "value": codec bytes}`` or ``{"v": 1, "discarded":
[step, attempt, offset, count]}``; the meta ``{"v": 1, "next": n, "body":
b, "closed": bool}`` (``next``: the next offset; ``body``: the body writes
stored); a writer record ``{"v": 1, "step": name, "attempt": n, "keys":
{key: [first offset, count]}}``, deleted when the step's result is
journaled or when the attempt is discarded. The run's archive keeps
these rows once it terminates (`durable.decorators.archive`); retention
removes them with the run.
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Coroutine
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

import msgpack

from durable._logging import get_logger
from durable.decorators.context import RunContext, Setting, active_run
from durable.engine.runs import RESERVED_KV_PREFIX
from durable.errors import CorruptEngineRecord, InvalidArgument, NotInWorkflow, StreamClosed
from durable.store.kv import KvNamespace
from durable.store.log.batch import WriteBatch

__all__ = [
    "LINGER",
    "StepWriter",
    "StreamDiscarded",
    "StreamMeta",
    "check_stream_key",
    "close_stream",
    "continue_records",
    "decode_item",
    "decode_meta",
    "item_key",
    "items_prefix",
    "meta_key",
    "step_writer",
    "stream_prefix",
    "write_stream",
    "writer_key",
]

log = get_logger("durable.streams")

#: Seconds a step's buffered stream values wait for company before the
#: buffer commits them (event-loop time: it paces I/O, like the log's retries).
LINGER = 0.025
_VERSION = 1


@dataclass(frozen=True, slots=True)
class StreamDiscarded:
    """An item of a stream: attempt ``attempt`` of step ``step`` of run
    ``run_id`` was discarded (it failed, or its process died) after writing
    ``count`` values to stream ``key``, the first at offset ``offset``.

    Those values stay in the stream (offsets never move); a reader drops
    them, e.g. a UI erases the partial output. When that attempt was the
    only writer of ``key`` meanwhile (one step streaming to its own key),
    they are exactly the items at offsets ``offset`` to ``offset + count -
    1``. The marker itself takes the next offset; the step's next attempt
    writes after it."""

    run_id: str
    key: str
    step: str
    attempt: int
    offset: int
    count: int


def stream_prefix(run_id: str) -> bytes:
    """The KV prefix of every stream record of run ``run_id``."""
    return RESERVED_KV_PREFIX + b"streams/" + run_id.encode() + b"/"


def _hex(key: str) -> bytes:
    return key.encode().hex().encode()


def items_prefix(run_id: str, key: str) -> bytes:
    """The KV prefix of the items of stream ``key`` of run ``run_id``."""
    return stream_prefix(run_id) + b"i/" + _hex(key) + b"/"


def item_key(run_id: str, key: str, offset: int) -> bytes:
    """The KV key of the item at ``offset`` of stream ``key``."""
    return items_prefix(run_id, key) + b"%012d" % offset


def meta_key(run_id: str, key: str) -> bytes:
    """The KV key of the meta record of stream ``key`` of run ``run_id``."""
    return stream_prefix(run_id) + b"m/" + _hex(key)


def writer_key(run_id: str, position: int) -> bytes:
    """The KV key of what the running attempt of the step at ``position`` wrote."""
    return stream_prefix(run_id) + b"w/%010d" % position


def check_stream_key(key: object) -> str:
    """``key`` if it is a valid stream key, else `InvalidArgument`."""
    if not isinstance(key, str) or not key:
        raise InvalidArgument(f"a stream key must be a non-empty str, got {key!r}")
    return key


def _pack(m: dict[str, Any]) -> bytes:
    packed: bytes = msgpack.packb(m, use_bin_type=True)
    return packed


def _unpack(data: bytes, what: str) -> dict[str, Any]:
    try:
        m = msgpack.unpackb(data, raw=False)
        if not isinstance(m, dict):
            raise ValueError(f"a {type(m).__name__}, not a map")
        version = m.get("v")
        if not isinstance(version, int) or version > _VERSION:
            raise ValueError(f"format version {version!r}; this durable reads {_VERSION}")
    except (ValueError, TypeError, msgpack.UnpackException) as e:
        raise CorruptEngineRecord(what, str(e) or type(e).__name__) from None
    return m


@dataclass(slots=True)
class StreamMeta:
    """The stored state of one stream: its next offset, the body writes
    stored, and whether it is closed."""

    next: int = 0
    body: int = 0
    closed: bool = False

    def encode(self) -> bytes:
        """The stored bytes."""
        return _pack({"v": _VERSION, "next": self.next, "body": self.body, "closed": self.closed})


def decode_meta(data: bytes | None, run_id: str, key: str) -> StreamMeta:
    """The meta of stream ``key`` from its stored bytes (None: a fresh stream)."""
    if data is None:
        return StreamMeta()
    what = f"the meta of stream {key!r} of run {run_id!r}"
    m = _unpack(data, what)
    try:
        meta = StreamMeta(int(m["next"]), int(m["body"]), bool(m["closed"]))
    except (KeyError, TypeError, ValueError) as e:
        raise CorruptEngineRecord(what, str(e) or type(e).__name__) from None
    return meta


def decode_item(data: bytes, run_id: str, key: str, offset: int) -> bytes | StreamDiscarded:
    """The codec bytes of a stored value, or the `StreamDiscarded` marker."""
    what = f"item {offset} of stream {key!r} of run {run_id!r}"
    m = _unpack(data, what)
    value = m.get("value")
    if isinstance(value, bytes):
        return value
    marker = m.get("discarded")
    if (
        isinstance(marker, list)
        and len(marker) == 4
        and isinstance(marker[0], str)
        and all(isinstance(n, int) for n in marker[1:])
    ):
        return StreamDiscarded(run_id, key, marker[0], marker[1], marker[2], marker[3])
    raise CorruptEngineRecord(what, "neither a value nor a discard marker")


def continue_records(kv: KvNamespace, run_id: str) -> dict[bytes, bytes]:
    """The puts that carry run ``run_id``'s open streams over into a new
    incarnation of the run (``durable.continue_as_new``), to commit with it:
    each stream's count of stored body writes back to 0, so the new
    incarnation's body writes, numbered from 0 again, land (its replays
    still write nothing). ``kv`` is the internal view of the run's store."""
    prefix = stream_prefix(run_id) + b"m/"
    puts: dict[bytes, bytes] = {}
    for mkey, stored in kv.snapshot(prefix):
        key = bytes.fromhex(mkey[len(prefix) :].decode()).decode()
        meta = decode_meta(stored, run_id, key)
        if meta.body:
            meta.body = 0
            puts[mkey] = meta.encode()
    return puts


# ------------------------------------------------------------------ writers


@dataclass(slots=True)
class StepWriter:
    """The stream writes of one step call: its current attempt, and the first
    offset and count of that attempt's values per key."""

    run: RunContext
    position: int
    step: str
    attempt: int = 0
    keys: dict[str, list[int]] = field(default_factory=dict)

    def _record(self) -> bytes:
        return _pack({"v": _VERSION, "step": self.step, "attempt": self.attempt, "keys": self.keys})

    def begin(self) -> None:
        """Before an attempt: discard what an earlier attempt left (its writer
        record: an attempt of this process that failed, or of a process that
        died), then count this attempt."""
        found = self.discard()
        self.attempt = max(self.attempt, found) + 1
        self.keys = {}

    def discard(self) -> int:
        """Discard the values of the attempt the store records for this step
        (if any): its buffered values are committed, then one marker per key
        it wrote and the deletion of its record, in commit order. The
        discarded attempt's number (0: none recorded)."""
        buffer = _buffer(self.run)
        kv = buffer.kv
        buffer.flush()
        wkey = writer_key(self.run.run_id, self.position)
        stored = kv.get(wkey)
        self.keys = {}
        if stored is None:
            return 0
        what = f"the stream writes of step {self.step!r} of run {self.run.run_id!r}"
        m = _unpack(stored, what)
        attempt, written = int(m.get("attempt", 0)), m.get("keys", {})
        batch = WriteBatch()
        for key, (first, count) in sorted(written.items()):
            mkey = meta_key(self.run.run_id, key)
            meta = decode_meta(kv.get(mkey), self.run.run_id, key)
            marker = _pack({"v": _VERSION, "discarded": [m.get("step", ""), attempt, first, count]})
            kv.stage_put(batch, item_key(self.run.run_id, key, meta.next), marker)
            meta.next += 1
            kv.stage_put(batch, mkey, meta.encode())
        kv.stage_delete(batch, wkey)
        buffer.commit(batch, [])
        return attempt

    def finish(self) -> None:
        """Before the step's result is journaled: commit its buffered values
        (so they are durable before the journal entry)."""
        _buffer(self.run).flush()

    def finished(self) -> None:
        """After the step's result is journaled: drop the writer record (a
        crash before this leaves it for a position that never runs again).
        Only an attempt that wrote values has one: `begin` and `discard`
        delete the record of an earlier attempt."""
        if not self.keys:
            return
        buffer = _buffer(self.run)
        wkey = writer_key(self.run.run_id, self.position)
        if buffer.kv.get(wkey):
            buffer.commit(buffer.kv.stage_delete(WriteBatch(), wkey), [])


_writer: ContextVar[StepWriter | None] = ContextVar("durable_stream_writer", default=None)


def step_writer(writer: StepWriter) -> Setting[StepWriter | None]:
    """Make ``writer`` the `StepWriter` of the calling context (the body of
    its step) until the block ends."""
    return Setting(_writer, writer)


# ------------------------------------------------------------------ the buffer


@dataclass(slots=True)
class _Pending:
    run_id: str
    key: str
    data: bytes | None  # None: close the stream
    ordinal: int | None = None  # a body write's ordinal
    writer: StepWriter | None = None
    attempt: int = 0
    future: asyncio.Future[None] | None = None


class _Buffer:
    """The stream writes of one store (partition) waiting for their commit."""

    def __init__(self, kv: KvNamespace) -> None:
        self.kv = kv
        self.pending: list[_Pending] = []
        self.timer: asyncio.TimerHandle | asyncio.Handle | None = None

    def add(self, item: _Pending, *, soon: bool) -> None:
        self.pending.append(item)
        loop = asyncio.get_running_loop()
        if self.timer is None:
            self.timer = loop.call_soon(self.flush) if soon else loop.call_later(LINGER, self.flush)
        elif soon and isinstance(self.timer, asyncio.TimerHandle):
            self.timer.cancel()
            self.timer = loop.call_soon(self.flush)

    def flush(self) -> None:
        """Commit everything buffered, in one transaction."""
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        pending, self.pending = self.pending, []
        if not pending:
            return
        kv = self.kv
        metas: dict[tuple[str, str], StreamMeta] = {}
        writers: dict[int, StepWriter] = {}
        batch = WriteBatch()
        waiting: list[asyncio.Future[None]] = []
        for item in pending:
            mk = (item.run_id, item.key)
            meta = metas.get(mk)
            if meta is None:
                meta = metas[mk] = decode_meta(
                    kv.get(meta_key(item.run_id, item.key)), item.run_id, item.key
                )
            if item.ordinal is not None and item.ordinal < meta.body:
                pass  # a replayed body write: stored already
            elif item.data is None:
                meta.closed = True
            elif meta.closed:
                error = StreamClosed(item.run_id, item.key)
                if item.future is not None and not item.future.done():
                    item.future.set_exception(error)
                    continue
                log.warning(
                    "stream value dropped", run_id=item.run_id, key=item.key, error=str(error)
                )
                continue
            elif item.writer is not None and item.writer.attempt != item.attempt:
                continue  # written by an attempt discarded since
            else:
                kv.stage_put(
                    batch,
                    item_key(item.run_id, item.key, meta.next),
                    _pack({"v": _VERSION, "value": item.data}),
                )
                if item.ordinal is not None:
                    meta.body = item.ordinal + 1
                if item.writer is not None:
                    span = item.writer.keys.setdefault(item.key, [meta.next, 0])
                    span[1] += 1
                    writers[id(item.writer)] = item.writer
                meta.next += 1
            if item.future is not None:
                waiting.append(item.future)
        for (run_id, key), meta in metas.items():
            kv.stage_put(batch, meta_key(run_id, key), meta.encode())
        for writer in writers.values():
            kv.stage_put(batch, writer_key(writer.run.run_id, writer.position), writer._record())
        self.commit(batch, waiting)

    def commit(self, batch: WriteBatch, waiting: list[asyncio.Future[None]]) -> None:
        """Commit ``batch`` now (ordered after every earlier commit); resolve
        ``waiting`` once it is durable, or with its error."""

        def settle(error: BaseException | None) -> None:
            for fut in waiting:
                if fut.done():
                    continue
                if error is None:
                    fut.set_result(None)
                else:
                    fut.set_exception(error)

        if not batch:
            settle(None)
            return
        try:
            durable = self.kv.commit(batch)
        except Exception as e:  # a stopped or closed writer
            settle(e)
            if not waiting:
                log.warning("stream writes not committed", error=str(e))
            return
        durable.add_done_callback(lambda: settle(durable.error()))


_buffers: weakref.WeakKeyDictionary[object, _Buffer] = weakref.WeakKeyDictionary()
#: The body writes of each delivery so far, by stream key.
_ordinals: weakref.WeakKeyDictionary[RunContext, dict[str, int]] = weakref.WeakKeyDictionary()


def _kv(run: RunContext) -> KvNamespace:
    return run.engine.queue.kv.internal()


def _buffer(run: RunContext) -> _Buffer:
    """The buffer of the store ``run`` is delivered from (looked up once per
    delivery: a delivery runs on one store)."""
    buffer = run.stream_buffer
    if isinstance(buffer, _Buffer):
        return buffer
    queue = run.engine.queue
    buffer = _buffers.get(queue)
    if buffer is None:
        buffer = _buffers[queue] = _Buffer(queue.kv.internal())
    run.stream_buffer = buffer
    return buffer


def _context(what: str) -> tuple[RunContext, StepWriter | None]:
    run = active_run()
    if run is not None:
        return run, None
    writer = _writer.get()
    if writer is None:
        raise NotInWorkflow(what)
    return writer.run, writer


def _check_open(run: RunContext, key: str) -> None:
    meta = decode_meta(_kv(run).get(meta_key(run.run_id, key)), run.run_id, key)
    if meta.closed:
        raise StreamClosed(run.run_id, key)


def write_stream(key: str, value: object) -> Coroutine[Any, Any, None]:
    """Append ``value`` (through the codec) to this run's stream ``key``.

    In the workflow body: exactly once, in order, whatever crashes; durable
    when the await returns. In a step's body (an ``async def`` step run by
    the engine): buffered when the await returns, at readers within
    `LINGER` seconds while the step runs; a discarded attempt is announced
    by a `StreamDiscarded` item. `NotInWorkflow` outside a run,
    `CodecError` naming the run and key for a value the codec cannot encode,
    `StreamClosed` after `close_stream`."""
    run, writer = _context("durable.write_stream()")
    check_stream_key(key)
    data = run.codec.dumps(value, what=f"the value written to stream {key!r} of run {run.run_id!r}")
    if writer is not None:
        _check_open(run, key)
        _buffer(run).add(
            _Pending(run.run_id, key, data, writer=writer, attempt=writer.attempt), soon=False
        )
        return _done()
    counts = _ordinals.setdefault(run, {})
    ordinal = counts.get(key, 0)
    counts[key] = ordinal + 1
    stored = decode_meta(_kv(run).get(meta_key(run.run_id, key)), run.run_id, key)
    if ordinal >= stored.body and stored.closed:
        raise StreamClosed(run.run_id, key)
    return _awaited(run, _Pending(run.run_id, key, data, ordinal=ordinal), track=True)


def close_stream(key: str) -> Coroutine[Any, Any, None]:
    """Close this run's stream ``key``: readers end after its last item, and
    later writes raise `StreamClosed`. Idempotent; durable when the await
    returns. A run that ends closes its open streams."""
    run, writer = _context("durable.close_stream()")
    check_stream_key(key)
    return _awaited(run, _Pending(run.run_id, key, None), track=writer is None)


async def _done() -> None:
    return None


async def _awaited(run: RunContext, item: _Pending, *, track: bool) -> None:
    # In the body, the delivery does not suspend while a write is in flight
    # (a step's body is tracked by its step already).
    task = run.track() if track else None
    try:
        item.future = asyncio.get_running_loop().create_future()
        _buffer(run).add(item, soon=True)
        await item.future
    finally:
        if track:
            run.untrack(task)
