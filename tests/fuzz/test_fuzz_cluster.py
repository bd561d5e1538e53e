"""Fuzzing the cluster's decoders: inbox requests (any bytes a shared bucket
may hold under ``inbox/``) and the owner's done records.

Property (see `fuzzing`): any bytes decode to a well-typed value or raise
the decoder's typed error (`CorruptRequest`, `CorruptEngineRecord`), nothing
else; valid encodings round-trip.
"""

from __future__ import annotations

import dataclasses

from fuzzing import FUZZ, corrupted, decodes_or_raises
from hypothesis import given
from hypothesis import strategies as st

from durable.cluster.done import DoneRecord, decode_done, encode_done
from durable.cluster.requests import (
    NONCE_SIZE,
    REQ_PREFIX,
    CancelRequest,
    ClearSignalRequest,
    GroupMarkRequest,
    Request,
    SignalRequest,
    SubmitRequest,
    decode_request,
    encode_request,
    submit_name,
)
from durable.engine.records import GroupMembership
from durable.engine.runs import RunOptions, RunSpec
from durable.errors import CorruptEngineRecord, CorruptRequest
from durable.store.framing import Kind, frame, unframe

ids = st.from_regex(r"[A-Za-z0-9_-]{1,12}", fullmatch=True)
text = st.text(max_size=8)
keys = text.filter(bool)
queues = st.sampled_from(["workflow-steps", "jobs", "q"])
nonces = st.binary(min_size=NONCE_SIZE, max_size=NONCE_SIZE)
options = st.builds(
    RunOptions,
    st.dictionaries(text, text, max_size=2),
    st.none() | st.integers(0, 2**32 - 1),
    st.none() | st.integers(1, 2**32 - 1),
    st.none() | st.integers(0, 2**64 - 1),
)
RUN = "run-1"
REQ = REQ_PREFIX + "01J0000000000000000000000A"

submits = st.builds(
    SubmitRequest,
    queues,
    nonces,
    st.builds(RunSpec, st.binary(max_size=16), st.just(RUN), options),
    st.none() | st.builds(GroupMembership, ids, keys),
    st.dictionaries(
        st.binary(max_size=6).map(lambda b: b"workflow/" + b), st.binary(max_size=8), max_size=2
    ),
)
others = st.one_of(
    st.builds(SignalRequest, queues, nonces, keys, st.binary(max_size=16)),
    st.builds(CancelRequest, queues, nonces, ids),
    st.builds(ClearSignalRequest, queues, nonces, keys),
    st.builds(GroupMarkRequest, queues, nonces, ids),
)

NAMES = tuple(
    sorted(
        {"v", "kind", "nonce", "queue", "run_id", "input", "headers", "priority"}
        | {"max_attempts", "run_at_ms", "group_id", "member_key", "internal", "key", "payload"}
    )
)
BODY = (lambda b: unframe("r", b, Kind.INBOX)[1], lambda b: frame(Kind.INBOX, b))


@FUZZ
@given(submits | others)
def test_requests_round_trip(request: Request) -> None:
    name = submit_name(RUN) if isinstance(request, SubmitRequest) else REQ
    assert decode_request(name, encode_request(request)) == request


@FUZZ
@given(st.data())
def test_submit_requests(data: st.DataObject) -> None:
    raw = data.draw(corrupted(submits.map(encode_request), body=BODY, names=NAMES))
    decodes_or_raises(lambda: decode_request(submit_name(RUN), raw), CorruptRequest, Request)


@FUZZ
@given(st.data())
def test_other_requests(data: st.DataObject) -> None:
    raw = data.draw(corrupted(others.map(encode_request), body=BODY, names=NAMES))
    decodes_or_raises(lambda: decode_request(REQ, raw), CorruptRequest, Request)


@FUZZ
@given(st.data())
def test_requests_under_any_name(data: st.DataObject) -> None:
    name = data.draw(st.text(max_size=24) | st.sampled_from([REQ, submit_name(RUN), "inbox/x"]))
    raw = data.draw(corrupted((submits | others).map(encode_request), body=BODY, names=NAMES))
    decodes_or_raises(lambda: decode_request(name, raw), CorruptRequest, Request)


@FUZZ
@given(st.data())
def test_done_records(data: st.DataObject) -> None:
    valid = st.builds(
        DoneRecord, st.integers(0, 2**64 - 1), st.none() | text, st.none() | text
    ).map(encode_done)
    raw = data.draw(corrupted(valid, names=tuple(f.name for f in dataclasses.fields(DoneRecord))))
    decodes_or_raises(lambda: decode_done(raw), CorruptEngineRecord, DoneRecord)
