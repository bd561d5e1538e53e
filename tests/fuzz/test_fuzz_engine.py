"""Fuzzing the engine's decoders: run records, step pointers, terminal and
result records, outcomes, group members and manifests, memo entries,
step-output replay records, reply markers, typed jobs and their outputs,
bulk items and results, webhook jobs' headers.

Property (see `fuzzing`): any bytes decode to a well-typed value or raise
the decoder's typed error, nothing else.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import pytest
from fuzzing import FUZZ, corrupted, decodes_or_raises, msgpack_values
from hypothesis import given
from hypothesis import strategies as st

from durable.engine import memo_codec
from durable.engine.bulk.codec import (
    BulkItem,
    decode_item,
    decode_result,
    encode_item,
    encode_result,
)
from durable.engine.bulk.cost import CostReport
from durable.engine.jobs.codec import decode_job, decode_output, encode_job, encode_output, job_name
from durable.engine.jobs.job import Job
from durable.engine.outcomes import (
    After,
    Cancel,
    Continue,
    Fail,
    Immediate,
    OnSignal,
    StepErrorKind,
    Succeed,
)
from durable.engine.records import (
    GroupManifest,
    GroupMembership,
    MemberRecord,
    RunRecord,
    RunResultRecord,
    StepPointer,
    TerminalRecord,
    decode_group_manifest,
    decode_member_record,
    decode_run_outcome,
    decode_run_record,
    decode_run_result,
    decode_step_pointer,
    decode_terminal_record,
    encode_group_manifest,
    encode_member_record,
    encode_run_outcome,
    encode_run_record,
    encode_run_result,
    encode_step_pointer,
    encode_terminal_record,
)
from durable.engine.remote import ReplyMarker, ReplyState, decode_reply_marker, encode_reply_marker
from durable.engine.replay import ReplayRecord, decode_replay, encode_replay
from durable.engine.runs import RunOutcome, RunTermination, TerminalStatus
from durable.engine.webhooks.request import (
    HEADER_METHOD,
    HEADER_TIMEOUT_MS,
    HEADER_URL,
    HTTP_HEADER_PREFIX,
    Delivery,
    parse_delivery,
)
from durable.errors import (
    CorruptEngineRecord,
    CorruptObject,
    InvalidArgument,
    JobTypeError,
    UnsupportedFormat,
)
from durable.store.framing import Kind, frame, unframe

ids = st.from_regex(r"[A-Za-z0-9_-]{1,12}", fullmatch=True)
u64 = st.integers(0, 2**64 - 1)
text = st.text(max_size=8)
opt_text = st.none() | text
headers = st.dictionaries(text, text, max_size=2)
digests = st.binary(min_size=32, max_size=32)

terminations = st.builds(
    RunTermination,
    st.sampled_from(TerminalStatus),
    u64,
    u64,
    opt_text,
    st.none() | st.sampled_from(StepErrorKind),
)
outcomes = st.builds(
    RunOutcome,
    ids,
    st.sampled_from(TerminalStatus),
    u64,
    st.none() | st.binary(max_size=8),
    opt_text,
    headers,
)
memberships = st.none() | st.builds(GroupMembership, ids, text.filter(bool))


def _names(*classes: type) -> tuple[str, ...]:
    names = {"v", "terminated", "group_id", "member_key", "members", "key", "input"}
    for cls in classes:
        names.update(f.name for f in dataclasses.fields(cls))
    return tuple(sorted(names))


ENGINE_NAMES = _names(RunRecord, RunTermination, RunOutcome, TerminalRecord, StepPointer)

#: decoder -> (valid encodings, the type a decode returns)
RECORDS: dict[str, tuple[Callable[..., Any], st.SearchStrategy[bytes], Any]] = {
    "run record": (
        decode_run_record,
        st.builds(RunRecord, ids, digests, u64, headers, st.booleans(), memberships).map(
            encode_run_record
        ),
        RunRecord,
    ),
    "step pointer": (
        decode_step_pointer,
        st.builds(StepPointer, u64, ids).map(encode_step_pointer),
        StepPointer,
    ),
    "terminal record": (
        decode_terminal_record,
        st.builds(TerminalRecord, terminations, st.none() | digests, st.none() | outcomes).map(
            encode_terminal_record
        ),
        TerminalRecord,
    ),
    "run outcome": (decode_run_outcome, outcomes.map(encode_run_outcome), RunOutcome),
    "run result": (
        decode_run_result,
        st.builds(RunResultRecord, terminations, outcomes).map(encode_run_result),
        RunResultRecord,
    ),
    "member record": (
        decode_member_record,
        st.builds(MemberRecord, ids, st.none() | terminations).map(encode_member_record),
        MemberRecord,
    ),
    "group manifest": (
        decode_group_manifest,
        st.builds(
            GroupManifest,
            ids,
            st.lists(st.tuples(text.filter(bool), st.binary(max_size=8)), max_size=3).map(tuple),
            u64,
        ).map(encode_group_manifest),
        GroupManifest,
    ),
}


@FUZZ
@given(st.sampled_from(sorted(RECORDS)), st.data())
def test_engine_records(name: str, data: st.DataObject) -> None:
    decode, valid, expect = RECORDS[name]
    raw = data.draw(corrupted(valid, names=ENGINE_NAMES))
    decodes_or_raises(lambda: decode(raw, name), CorruptEngineRecord, expect)


# ------------------------------------------------------------------- memo

MEMO = "memos/run-1/run/x"


@FUZZ
@given(st.data())
def test_memo_entries(data: st.DataObject) -> None:
    key = data.draw(text)
    valid = msgpack_values().map(lambda v: memo_codec.encode_entry(key, v)[0])
    body = (lambda b: unframe(MEMO, b, Kind.MEMO)[1], lambda b: frame(Kind.MEMO, b))
    raw = data.draw(corrupted(valid, body=body, names=("k", "v")))
    decodes_or_raises(
        lambda: memo_codec.decode_entry(MEMO, raw, key), (CorruptObject, UnsupportedFormat)
    )


# ---------------------------------------------------------- replay records

triggers = st.one_of(
    st.builds(Immediate),
    st.builds(After, st.floats(0, 1e6)),
    st.builds(OnSignal, text.filter(bool), st.floats(0.001, 1e6)),
)
step_outcomes = st.one_of(
    st.builds(Continue, st.binary(max_size=8), triggers),
    st.builds(Succeed, st.binary(max_size=8)),
    st.builds(Fail, text),
    st.builds(Cancel, text),
)
replays = st.builds(
    ReplayRecord,
    u64,
    step_outcomes,
    st.dictionaries(st.binary(max_size=4), st.binary(max_size=4), max_size=2),
    st.frozensets(st.binary(max_size=4), max_size=2),
).map(encode_replay)


@FUZZ
@given(st.data())
def test_replay_records(data: st.DataObject) -> None:
    body = (lambda b: unframe("r", b, Kind.REPLAY)[1], lambda b: frame(Kind.REPLAY, b))
    names = ("v", "at", "o", "puts", "dels", "t", "p", "w", "r", "k", "d", "c")
    raw = data.draw(corrupted(replays, body=body, names=names))
    decodes_or_raises(
        lambda: decode_replay("r", raw), (CorruptObject, UnsupportedFormat), ReplayRecord
    )


@FUZZ
@given(st.data())
def test_reply_markers(data: st.DataObject) -> None:
    valid = st.builds(ReplyMarker, text, st.sampled_from(ReplyState)).map(encode_reply_marker)
    raw = data.draw(corrupted(valid, names=("v", "key", "state")))
    decodes_or_raises(lambda: decode_reply_marker(raw), CorruptEngineRecord, ReplyMarker)


# ------------------------------------------------------------------- jobs


@dataclasses.dataclass(frozen=True)
class Resize(Job[int]):
    """A typed job for the fuzz: its fields come back from the payload."""

    NAME = "fuzz.resize"
    image: str
    width: int

    async def run(self, ctx: Any) -> int:
        return self.width


@dataclasses.dataclass(frozen=True)
class Size:
    """A typed job's output type."""

    width: int
    height: int


@dataclasses.dataclass(frozen=True)
class Measure(Job[Size]):
    """A typed job whose output is a dataclass."""

    NAME = "fuzz.measure"
    image: str

    async def run(self, ctx: Any) -> Size:
        return Size(1, 1)


JOB_TYPES: dict[str, type[Job[Any]]] = {Resize.NAME: Resize, Measure.NAME: Measure}
jobs = st.one_of(st.builds(Resize, text, u64), st.builds(Measure, text)).map(encode_job)


@FUZZ
@given(st.data())
def test_typed_jobs(data: st.DataObject) -> None:
    raw = data.draw(corrupted(jobs, names=("job", "input", "image", "width")))
    decodes_or_raises(lambda: job_name(raw), JobTypeError, str)
    job = decodes_or_raises(lambda: decode_job(raw, JOB_TYPES), JobTypeError)
    # Field values are not checked against the annotations (documented): the type is.
    assert job is None or isinstance(job, Resize | Measure)


@FUZZ
@given(st.sampled_from([None, Resize, Measure]), st.data())
def test_typed_job_outputs(cls: type[Job[Any]] | None, data: st.DataObject) -> None:
    valid = st.one_of(msgpack_values(), st.builds(Size, u64, u64), st.binary(max_size=8)).map(
        lambda v: encode_output("fuzz", v)
    )
    raw = data.draw(corrupted(valid, names=("width", "height")))
    decodes_or_raises(lambda: decode_output(raw, cls), (JobTypeError, CorruptEngineRecord))


# ------------------------------------------------------------------- bulk


@FUZZ
@given(st.data())
def test_bulk_items_and_results(data: st.DataObject) -> None:
    items = st.builds(encode_item, text, msgpack_values(4).filter(_plain))
    results = st.builds(
        encode_result,
        msgpack_values(4).filter(_plain),
        st.dictionaries(text.filter(bool), st.integers(0, 100)).map(CostReport),
    )
    names = ("key", "input", "invalid", "output", "cost")
    raw = data.draw(corrupted(items | results, names=names))
    decodes_or_raises(lambda: decode_item(raw, "run-1"), CorruptEngineRecord, BulkItem)
    decodes_or_raises(
        lambda: decode_result(raw, "run-1"), CorruptEngineRecord, tuple[Any, CostReport]
    )


def _plain(value: object) -> bool:
    """Values `canonical` sorts (map keys of one comparable kind)."""
    try:
        memo_codec.canonical(value)
    except TypeError:
        return False
    return True


def test_a_replay_record_payload_is_never_an_allocation() -> None:
    # ``bytes(o["p"])`` of a stored int allocated that many zero bytes.
    import msgpack

    body = {"v": 1, "at": 0, "o": {"t": "continue", "p": 2**40, "w": {"k": "now"}}, "dels": []}
    with pytest.raises(CorruptObject):
        decode_replay("r", frame(Kind.REPLAY, msgpack.packb(body)))


# --------------------------------------------------------------- webhooks

_HEADER_NAMES = st.sampled_from([HEADER_URL, HEADER_METHOD, HEADER_TIMEOUT_MS])
_HEADER_VALUES = st.one_of(
    text,
    st.sampled_from(["https://example.com/x", "http://[::1", "ftp://x", "0", "00", "²", "GET"]),
    st.from_regex(r"[0-9]{1,25}", fullmatch=True),
)


@FUZZ
@given(
    st.dictionaries(
        _HEADER_NAMES | text | text.map(lambda t: HTTP_HEADER_PREFIX + t), _HEADER_VALUES
    )
)
def test_webhook_deliveries(headers: dict[str, str]) -> None:
    """A webhook job's stored headers (the job record checked they are strs)."""
    decodes_or_raises(lambda: parse_delivery(headers), InvalidArgument, Delivery)
