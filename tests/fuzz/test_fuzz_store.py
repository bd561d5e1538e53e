"""Fuzzing the store's decoders: frames, log objects, checkpoints, the loader,
queue job records, attempt histories, record keys, counters, heartbeats.

Property (see `fuzzing`): any bytes decode to a well-typed value or raise
the decoder's typed error, nothing else.
"""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any

import msgpack
import pytest
from fuzzing import FUZZ, corrupted, decodes_or_raises
from hypothesis import given
from hypothesis import strategies as st

from durable.errors import CorruptObject, CorruptRecord, UnsupportedFormat
from durable.store.framing import Kind, frame, unframe
from durable.store.log import State
from durable.store.log.format import (
    Checkpoint,
    LogObject,
    ckpt_name,
    decode_checkpoint,
    decode_log,
    encode_checkpoint,
    encode_log,
    log_name,
)
from durable.store.log.loader import Loaded, load
from durable.store.objects import MemoryObjectStore
from durable.store.queue import keys
from durable.store.queue.heartbeat import Heartbeat, encode_heartbeat, read_heartbeat
from durable.store.queue.keys import PrimaryKey
from durable.store.queue.records import (
    AttemptOutcome,
    HistoryEntry,
    JobRecord,
    JobStatus,
    decode_history,
    decode_record,
    encode_history_entry,
    encode_record,
)
from durable.store.queue.txn import decode_counter

FRAME_ERRORS = (CorruptObject, UnsupportedFormat)
SEQ = 7

ids = st.from_regex(r"[A-Za-z0-9_-]{1,12}", fullmatch=True)
keys_ = st.binary(min_size=1, max_size=12)
u64 = st.integers(0, 2**64 - 1)
opt_u64 = st.none() | u64


def _names(cls: type) -> tuple[str, ...]:
    return tuple(f.name for f in dataclasses.fields(cls))


def _unframe(kind: Kind) -> tuple[Any, Any]:
    return (lambda data: unframe("x", data, kind)[1], lambda body: frame(kind, body))


# ------------------------------------------------------------------ frames


@FUZZ
@given(st.sampled_from(Kind), st.data())
def test_frames(kind: Kind, data: st.DataObject) -> None:
    valid = st.binary(max_size=32).map(lambda b: frame(kind, b))
    raw = data.draw(corrupted(valid))
    decodes_or_raises(lambda: unframe("obj", raw, kind), FRAME_ERRORS, tuple[int, bytes])


# --------------------------------------------------------- log, checkpoints

ops = st.lists(st.tuples(keys_, st.none() | st.binary(max_size=8)), max_size=4).map(
    lambda pairs: [x for pair in pairs for x in pair]
)
logs = st.builds(encode_log, st.just(SEQ), st.binary(max_size=8), ops, st.booleans())
checkpoints = st.lists(
    st.tuples(keys_, st.binary(max_size=8)), max_size=4, unique_by=lambda p: p[0]
).flatmap(
    lambda items: st.builds(
        encode_checkpoint,
        st.just(SEQ),
        st.binary(max_size=8),
        st.just([k for k, _ in items]),
        st.just([v for _, v in items]),
        st.lists(st.integers(0, 2**63), max_size=3),
    )
)


@FUZZ
@given(st.data())
def test_log_objects(data: st.DataObject) -> None:
    raw = data.draw(corrupted(logs, body=_unframe(Kind.LOG)))
    decodes_or_raises(lambda: decode_log(log_name(SEQ), raw), FRAME_ERRORS, LogObject)


@FUZZ
@given(st.data())
def test_checkpoints(data: st.DataObject) -> None:
    raw = data.draw(corrupted(checkpoints, body=_unframe(Kind.CHECKPOINT)))
    decodes_or_raises(lambda: decode_checkpoint(ckpt_name(SEQ), raw), FRAME_ERRORS, Checkpoint)


async def _load(objects: dict[str, bytes]) -> Loaded:
    store = MemoryObjectStore()
    for name, data in objects.items():
        await store.put(name, data)
    return await load(store)


@FUZZ
@given(st.data())
def test_loading_a_store_of_corrupt_objects(data: st.DataObject) -> None:
    """The loader over a checkpoint and two log objects, one of them corrupt:
    the state it rebuilds maps bytes to bytes, or it raises `CorruptObject`."""
    bad = data.draw(st.integers(0, 2))
    sources = [(ckpt_name(SEQ), checkpoints, Kind.CHECKPOINT)]
    for seq in (SEQ + 1, SEQ + 2):
        valid = logs.map(lambda b, seq=seq: encode_log(seq, *_log_fields(b)))
        sources.append((log_name(seq), valid, Kind.LOG))
    objects = {
        name: data.draw(corrupted(valid, body=_unframe(kind)) if i == bad else valid)
        for i, (name, valid, kind) in enumerate(sources)
    }
    loaded = decodes_or_raises(lambda: asyncio.run(_load(objects)), FRAME_ERRORS, Loaded)
    if loaded is not None:
        decodes_or_raises(lambda: dict(loaded.state.scan()), (), dict[bytes, bytes])


def _log_fields(data: bytes) -> tuple[bytes, list[bytes | None], bool]:
    log = decode_log(log_name(SEQ), data)
    return log.writer, log.ops, log.marker


# ------------------------------------------------------------------ queue

records = st.builds(
    JobRecord,
    id=ids,
    queue=st.text(max_size=8),
    payload=st.binary(max_size=8),
    status=st.sampled_from(JobStatus),
    attempts=st.integers(0, 10),
    max_attempts=st.integers(0, 10),
    enqueued_at=u64,
    priority=st.integers(0, 2**32 - 1),
    payload_ref=st.none() | st.text(max_size=8),
    headers=st.dictionaries(st.text(max_size=4), st.text(max_size=4), max_size=2),
    claimed_at=opt_u64,
    run_at=opt_u64,
    woken_at=opt_u64,
    wake_payload=st.none() | st.binary(max_size=8),
    last_error=st.none() | st.text(max_size=8),
    dedup_key=st.none() | st.text(max_size=8),
    completed_at=opt_u64,
    failed_at=opt_u64,
    cancel_requested=st.booleans(),
).map(encode_record)

history = st.lists(
    st.builds(
        HistoryEntry,
        attempt=st.integers(0, 100),
        recorded_at=u64,
        outcome=st.sampled_from(AttemptOutcome),
        claimed_at=opt_u64,
        error=st.none() | st.text(max_size=8),
    ).map(encode_history_entry),
    min_size=1,
    max_size=3,
).map(b"".join)


@FUZZ
@given(st.data())
def test_job_records(data: st.DataObject) -> None:
    raw = data.draw(corrupted(records, names=_names(JobRecord)))
    decodes_or_raises(lambda: decode_record(raw), CorruptRecord, JobRecord)


@FUZZ
@given(st.data())
def test_attempt_histories(data: st.DataObject) -> None:
    raw = data.draw(corrupted(history, names=_names(HistoryEntry)))
    decodes_or_raises(lambda: decode_history(raw), CorruptRecord, list[HistoryEntry])


primary_keys = st.builds(
    lambda status, queue, id, priority, at: keys.primary_key(
        status, queue, id, priority=priority, at=at
    ),
    st.sampled_from(JobStatus),
    st.text(max_size=8),
    ids,
    st.integers(0, 2**32 - 1),
    u64,
)
stats_keys = st.builds(keys.stats_key, st.text(max_size=8), st.text(max_size=8))


@FUZZ
@given(st.data())
def test_record_and_stats_keys(data: st.DataObject) -> None:
    raw = data.draw(corrupted(primary_keys | stats_keys))
    decodes_or_raises(lambda: keys.parse_primary(raw), (), PrimaryKey | None)
    decodes_or_raises(lambda: keys.parse_stats_key(raw), (), tuple[str, str] | None)


@FUZZ
@given(st.data())
def test_counters_and_heartbeats(data: st.DataObject) -> None:
    beats = st.builds(Heartbeat, u64, u64, u64, u64, st.booleans()).map(encode_heartbeat)
    raw = data.draw(corrupted(beats | st.binary(min_size=8, max_size=8)))
    decodes_or_raises(lambda: decode_counter(raw), (), int)
    state = State([(keys.heartbeat_key(), raw)])
    decodes_or_raises(lambda: read_heartbeat(state), (), Heartbeat | None)


def test_a_history_cut_inside_an_entry_is_corrupt() -> None:
    entry = encode_history_entry(HistoryEntry(1, 2, AttemptOutcome.RETRIED, error="boom"))
    assert decode_history(entry * 2) == [decode_history(entry)[0]] * 2
    with pytest.raises(CorruptRecord, match="truncated"):
        decode_history(entry * 2 + entry[:-3])  # a partial entry was silently dropped


def test_a_log_object_writer_is_never_an_allocation() -> None:
    # ``bytes(obj["w"])`` of a stored int allocated that many zero bytes.
    body = msgpack.packb({"w": 2**40, "s": SEQ, "m": False, "o": []})
    with pytest.raises(CorruptObject, match="bad field"):
        decode_log(log_name(SEQ), frame(Kind.LOG, body))
