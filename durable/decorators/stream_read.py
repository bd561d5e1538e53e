"""``handle.read_stream`` / ``handle.stream_offset``: a run's streams, from outside.

`read_stream` yields the items of a stream (`durable.decorators.streams`)
from an offset on: the decoded values, and `StreamDiscarded` markers. It
reads the KV while the run is active, its archive once the run has
terminated and its records have left the KV (`durable.decorators.archive`).
With nothing new to read it sleeps on KV watches of the stream's meta
record (every commit that appends to the stream or closes it writes it)
and of the run's terminal record: no polling in this process; a client
process sees new items when its view follows the log. The iteration ends
once the stream is closed, or the run has terminated, and every item has
been read; an unknown run raises `RunNotFound`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

from durable.decorators.archive import read_archive
from durable.decorators.published import either
from durable.decorators.streams import (
    StreamDiscarded,
    check_stream_key,
    decode_item,
    decode_meta,
    item_key,
    items_prefix,
    meta_key,
    stream_prefix,
)
from durable.engine import keys
from durable.errors import InvalidArgument, RunNotFound

if TYPE_CHECKING:
    from durable.decorators.base import EngineBase

__all__ = ["read_stream", "stream_offset"]

#: Items read from the store's memory at once.
_PAGE = 256


def _check_offset(offset: object) -> int:
    if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
        raise InvalidArgument(f"a stream offset must be an int >= 0, got {offset!r}")
    return offset


def _value(engine: EngineBase, run_id: str, key: str, offset: int, data: bytes) -> Any:
    item = decode_item(data, run_id, key, offset)
    if isinstance(item, StreamDiscarded):
        return item
    return engine.codec.loads(item, what=f"item {offset} of stream {key!r} of run {run_id!r}")


async def _archived(engine: EngineBase, run_id: str, key: str) -> dict[bytes, bytes]:
    """The stored stream rows of terminated run ``run_id`` under ``key``, from
    its archive: KV key -> value."""
    rows = (await read_archive(engine, run_id)).streams
    prefix = stream_prefix(run_id)
    return {prefix + suffix: value for suffix, value in rows.items()}


async def read_stream(
    engine: EngineBase, run_id: str, key: str, offset: int = 0
) -> AsyncIterator[Any]:
    """The items of stream ``key`` of run ``run_id`` from ``offset`` on; see
    the module docstring."""
    check_stream_key(key)
    _check_offset(offset)
    engine = engine.for_run(run_id)
    kv = engine.queue.kv.internal()
    runtime = engine.workflows.default
    view = runtime.view
    await runtime.until_visible(run_id, None)  # a client's run not applied yet
    prefix, mkey, end_key = (
        items_prefix(run_id, key),
        meta_key(run_id, key),
        keys.outcome_key(run_id),
    )
    while True:
        page = kv.scan(prefix, start=item_key(run_id, key, offset), limit=_PAGE)
        if page.entries:
            for row_key, data in page.entries:
                at = int(row_key[len(prefix) :])
                yield _value(engine, run_id, key, at, data)
                offset = at + 1
            continue
        stored = kv.get(mkey)
        meta = decode_meta(stored, run_id, key)
        if meta.closed and meta.next <= offset:
            return
        if view.run_record(run_id) is None:
            if view.terminal_record(run_id) is None:
                raise RunNotFound(run_id, f"handle.read_stream({key!r})")
            if stored is not None:
                return  # the run has ended: its streams with it
            rows = await _archived(engine, run_id, key)
            while (row := rows.get(item_key(run_id, key, offset))) is not None:
                yield _value(engine, run_id, key, offset, row)
                offset += 1
            return
        # No await since the reads: a write, a close or the termination wakes us.
        watches = [(mkey, kv.watch(mkey)), (end_key, kv.watch(end_key))]
        try:
            woken = either(*(fut for _, fut in watches))
            await woken
        finally:
            for watched, fut in watches:
                kv.unwatch(watched, fut)


async def stream_offset(engine: EngineBase, run_id: str, key: str) -> int:
    """The offset the next item of stream ``key`` of run ``run_id`` takes: how
    many items it holds (0 for a stream never written); `RunNotFound` for an
    unknown run."""
    check_stream_key(key)
    engine = engine.for_run(run_id)
    kv = engine.queue.kv.internal()
    runtime = engine.workflows.default
    view = runtime.view
    await runtime.until_visible(run_id, None)
    stored = kv.get(meta_key(run_id, key))
    if stored is None and view.run_record(run_id) is None:
        if view.terminal_record(run_id) is None:
            raise RunNotFound(run_id, f"handle.stream_offset({key!r})")
        stored = (await _archived(engine, run_id, key)).get(meta_key(run_id, key))
    return decode_meta(stored, run_id, key).next
