"""Fuzzing the decorators' decoders: the codec's frames (MessagePack, pickles,
signed pickles, exception records), journal entries, archives, invocations
and invocation records, published values, stored failures, job results,
progress marks and the store's codec record.

Property (see `fuzzing`): any bytes decode to a well-typed value or raise
the decoder's typed error, nothing else. And with a signing key, nothing is
unpickled unless it is byte for byte a pickle the key's holder signed:
`EVIL_PICKLE` (a ``__reduce__`` with a side effect) never runs, whatever
framing surrounds it.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import decimal
import hashlib
import hmac
from collections.abc import Callable, Iterator
from typing import Any
from unittest import mock

import cloudpickle  # type: ignore[import-untyped]
import msgpack
import pytest
from fuzzing import (
    EVIL_PICKLE,
    FUZZ,
    TRIPPED,
    corrupted,
    decodes_or_raises,
    msgpack_values,
    pack,
)
from hypothesis import assume, example, given
from hypothesis import strategies as st

from durable.decorators import archive
from durable.decorators.codec import Codec
from durable.decorators.codec_record import CodecRecord
from durable.decorators.codec_record import decode_record as decode_codec_record
from durable.decorators.codec_record import encode_record as encode_codec_record
from durable.decorators.invocation import Invocation, decode_invocation, encode_invocation
from durable.decorators.jobs.handle import job_value
from durable.decorators.journal import CHILD, SIGNAL, SLEEP, START, STEP, Entry, decode_entry
from durable.decorators.journal import encode_entry as encode_journal_entry
from durable.decorators.outcome import FAILURE_MARKER, RunResult, _failure_bytes, encode_failure
from durable.decorators.progress import decode_mark, encode_mark
from durable.decorators.publish import _decode as decode_publish_record
from durable.decorators.publish import _encode as encode_publish_record
from durable.decorators.publish import decode_published
from durable.engine.jobs.codec import encode_output
from durable.engine.memo import MemoStore
from durable.engine.runs import TerminalStatus
from durable.errors import CodecError, CorruptEngineRecord, UntrustedPayload
from durable.store.objects import MemoryObjectStore

KEY = b"k" * 32
OTHER_KEY = b"o" * 32
SIGNED = Codec(signing_key=KEY)
UNSIGNED = Codec()
STRICT = Codec(mode="msgpack")
CODEC_ERRORS = (CodecError, UntrustedPayload)
RUN = "run-1"

text = st.text(max_size=8)
plain = msgpack_values(6).filter(lambda v: "ext" not in repr(v).lower())


class Refused(Exception):
    """An exception that pickles: stored records carry its pickle."""


# ------------------------------------------------------------------ frames


def _mac(key: bytes, payload: bytes) -> bytes:
    return hmac.new(key, b"\x01s" + payload, hashlib.sha256).digest()


def _error_record(pickle_frame: bytes) -> bytes:
    record = {"type": "Refused", "module": __name__, "message": "m", "traceback": "tb"}
    return b"\x01e" + pack({**record, "pickle": pickle_frame})


#: Frames around `EVIL_PICKLE` that a keyed codec must refuse: unsigned,
#: signed with another key, a signature of the wrong length, a valid
#: signature of other bytes; each alone and as an exception record's pickle.
EVIL_FRAMES = [
    b"\x01p" + EVIL_PICKLE,
    b"\x01s" + _mac(OTHER_KEY, EVIL_PICKLE) + EVIL_PICKLE,
    b"\x01s" + _mac(KEY, EVIL_PICKLE)[:31] + EVIL_PICKLE,
    b"\x01s" + _mac(KEY, b"other") + EVIL_PICKLE,
]
EVIL_FRAMES += [_error_record(f) for f in EVIL_FRAMES]

values = st.one_of(
    plain,
    st.builds(frozenset, st.lists(st.integers(), max_size=3)),  # not plain: a pickle
    st.builds(decimal.Decimal, st.integers()),
    st.builds(tuple, st.lists(plain, max_size=3)),
)
#: The pickles the key's holder (the test) signed: the only ones a keyed
#: codec may hand to the unpickler.
SIGNED_PICKLES: set[bytes] = set()


def _signed(frame: bytes) -> bytes:
    """``frame`` (written by `SIGNED`), its signed pickles noted."""
    if frame[1:2] == b"e":
        frame = msgpack.unpackb(frame[2:]).get("pickle", b"")
    if frame[1:2] == b"s":
        SIGNED_PICKLES.add(frame[2 + 32 :])
    return frame


def _sign_value(value: object) -> bytes:
    frame = SIGNED.dumps(value, what="fuzz")
    _signed(frame)
    return frame


def _sign_error(error: BaseException) -> bytes:
    frame = SIGNED.dumps_error(error, what="fuzz")
    _signed(frame)
    return frame


errors = st.builds(lambda m: Refused(m), text) | st.builds(ValueError, text)
m_frames = plain.map(_sign_value)
e_frames = st.one_of(
    errors.map(_sign_error),
    errors.map(lambda e: STRICT.dumps_error(e, what="fuzz")),
    st.sampled_from(EVIL_FRAMES[4:]),
)
p_frames = st.one_of(values.map(_sign_value), st.sampled_from(EVIL_FRAMES))
ERROR_FIELDS = ("type", "module", "message", "traceback", "pickle")


def frames() -> st.SearchStrategy[bytes]:
    """Corrupted codec frames of every kind, `EVIL_PICKLE` in many of them."""
    return st.one_of(
        corrupted(m_frames, body=(lambda b: b[2:], lambda b: b"\x01m" + b)),
        corrupted(e_frames, body=(lambda b: b[2:], lambda b: b"\x01e" + b), names=ERROR_FIELDS),
        corrupted(p_frames),
    )


@contextlib.contextmanager
def unpickles() -> Iterator[list[bytes]]:
    """Every payload the codec hands to the unpickler while the block runs;
    `EVIL_PICKLE` must not have run."""
    seen: list[bytes] = []
    real = cloudpickle.loads

    def spy(payload: bytes, *args: Any, **kwargs: Any) -> Any:
        seen.append(bytes(payload))
        return real(payload, *args, **kwargs)

    TRIPPED.clear()
    with mock.patch("durable.decorators.codec.cloudpickle.loads", spy):
        yield seen
    assert not TRIPPED, "a pickle that runs code on load was unpickled"


def _signed_by_key(payload: bytes) -> bool:
    """Whether the test signed ``payload`` (a benign value's pickle)."""
    return payload in SIGNED_PICKLES and EVIL_PICKLE not in payload


@FUZZ
@given(frames())
def test_a_keyed_codec_never_unpickles_what_it_cannot_verify(raw: bytes) -> None:
    with unpickles() as seen:
        decodes_or_raises(lambda: SIGNED.loads(raw, what="fuzz"), CODEC_ERRORS)
        decodes_or_raises(lambda: SIGNED.loads_error(raw, what="fuzz"), CodecError, BaseException)
    assert all(_signed_by_key(p) for p in seen), "an unverified pickle reached the unpickler"


@FUZZ
@given(frames())
def test_a_msgpack_codec_never_unpickles(raw: bytes) -> None:
    with unpickles() as seen:
        decodes_or_raises(lambda: STRICT.loads(raw, what="fuzz"), CODEC_ERRORS)
        decodes_or_raises(lambda: STRICT.loads_error(raw, what="fuzz"), CodecError, BaseException)
    assert not seen


@FUZZ
@given(frames())
def test_an_unkeyed_codec_decodes_plain_frames_or_raises(raw: bytes) -> None:
    # Without a key unsigned pickles are read by design: keep random bytes
    # away from the unpickler here (the keyed tests cover the pickle frames).
    assume(b"\x01p" not in raw)
    decodes_or_raises(lambda: UNSIGNED.loads(raw, what="fuzz"), CODEC_ERRORS)
    decodes_or_raises(lambda: UNSIGNED.loads_error(raw, what="fuzz"), CodecError, BaseException)


def test_every_evil_frame_is_refused_by_a_keyed_codec() -> None:
    with unpickles() as seen:
        for raw in EVIL_FRAMES[:4]:
            with pytest.raises(UntrustedPayload):
                SIGNED.loads(raw, what="fuzz")
        for raw in EVIL_FRAMES[4:]:
            error = SIGNED.loads_error(raw, what="fuzz")
            assert "not rebuilt" in "".join(getattr(error, "__notes__", []))
    assert seen == []
    with unpickles():  # the tripwire works: the same pickle, unframed, trips it
        with pytest.raises(AssertionError), unpickles():
            cloudpickle.loads(EVIL_PICKLE)
        TRIPPED.clear()


# ---------------------------------------------------------------- journal

entries = st.builds(
    Entry,
    name=text,
    kind=st.sampled_from([STEP, START, SLEEP, SIGNAL, CHILD]),
    ok=st.none() | m_frames,
    err=st.none() | e_frames,
    time=st.integers(0, 2**63),
    key=st.none() | text,
    suspended=st.none() | st.integers(0, 2**32),
    ref=st.booleans(),
).map(encode_journal_entry)
ENTRY_FIELDS = ("v", "name", "kind", "ok", "err", "time", "key", "suspended", "ref")


@FUZZ
@given(corrupted(entries, names=ENTRY_FIELDS))
@example(pack({"name": "s", "kind": STEP, "ref": None}))  # found: a ref that is no bool
def test_journal_entries(raw: bytes) -> None:
    entry = decodes_or_raises(lambda: decode_entry(raw, RUN, 3), CorruptEngineRecord, Entry)
    if entry is not None and entry.ok is not None:
        with unpickles():
            decodes_or_raises(lambda: SIGNED.loads(entry.ok, what="fuzz"), CODEC_ERRORS)


# ------------------------------------------------------- archives, records

archives = st.builds(
    archive.Archive,
    st.none() | st.binary(max_size=8),
    st.dictionaries(st.integers(0, 100), entries, min_size=1, max_size=2),
    st.dictionaries(text, st.binary(max_size=8), min_size=1, max_size=2),
).map(lambda a: pack(archive._encode(a)))


@FUZZ
@given(corrupted(archives, names=("v", "invocation", "journal", "published")))
@example(pack({"v": 1, "journal": [[float("inf"), b""]]}))  # found: OverflowError
@example(pack({"v": 1, "published": {b"k": b""}}))  # found: a published key that is no str
def test_archives(raw: bytes) -> None:
    try:  # the memo decodes the object's MessagePack; the archive reads the value
        value = msgpack.unpackb(raw, raw=False, strict_map_key=False)
    except Exception:
        return
    decodes_or_raises(lambda: archive._decode(value, RUN), CorruptEngineRecord, archive.Archive)


async def _invocation_payload(record: bytes) -> bytes:
    memos = MemoStore(MemoryObjectStore(), "memo")
    memo = memos.run_memo(RUN)
    await memo.put("durable.invocation/" + hashlib.sha256(b"big").hexdigest(), b"big")
    return await archive._invocation_payload(memo, RUN, record)


def _sign_invocation(name: str, args: list[Any], kwargs: dict[str, Any]) -> bytes:
    payload = encode_invocation(SIGNED, name, args, kwargs)
    invocation = decode_invocation(payload, RUN)
    for frame in (*invocation.args, *invocation.kwargs.values()):
        _signed(frame)
    return payload


invocations = st.builds(
    _sign_invocation, text, st.lists(values, max_size=2), st.dictionaries(text, values, max_size=2)
)
invocation_records = st.one_of(
    invocations.map(lambda p: pack({"v": 1, "payload": p})),
    st.just(pack({"v": 1, "sha256": hashlib.sha256(b"big").hexdigest()})),
)


@FUZZ
@given(st.data())
def test_invocation_records(data: st.DataObject) -> None:
    raw = data.draw(corrupted(invocation_records, names=("v", "payload", "sha256")))
    decodes_or_raises(lambda: asyncio.run(_invocation_payload(raw)), CorruptEngineRecord, bytes)


@FUZZ
@given(st.data())
def test_invocations(data: st.DataObject) -> None:
    raw = data.draw(corrupted(invocations, names=("v", "name", "args", "kwargs")))
    invocation = decodes_or_raises(lambda: decode_invocation(raw, RUN), CodecError, Invocation)
    if invocation is not None:
        with unpickles() as seen:
            decodes_or_raises(lambda: invocation.decode_args(SIGNED, RUN), CODEC_ERRORS)
        assert all(_signed_by_key(p) for p in seen)


published = st.builds(encode_publish_record, st.integers(0, 2**32), m_frames | p_frames)


@FUZZ
@given(st.data())
def test_published_values(data: st.DataObject) -> None:
    raw = data.draw(corrupted(published, names=("seq", "value")))
    decodes_or_raises(
        lambda: decode_publish_record(raw, RUN, "k"), CorruptEngineRecord, tuple[int, bytes]
    )
    with unpickles() as seen:
        decodes_or_raises(
            lambda: decode_published(SIGNED, raw, RUN, "k"),
            (CorruptEngineRecord, *CODEC_ERRORS),
        )
    assert all(_signed_by_key(p) for p in seen)


# -------------------------------------------------------- runs and jobs end


@FUZZ
@given(st.data())
def test_stored_failures(data: st.DataObject) -> None:
    """A failed run's reason (readable text, then its encoded exception in
    base64): `handle.result()` raises an exception, whatever the reason holds."""
    encoded = data.draw(corrupted(e_frames, names=ERROR_FIELDS))
    reason = data.draw(
        st.one_of(
            text,
            st.builds(lambda t: t + FAILURE_MARKER + base64.b64encode(encoded).decode(), text),
            st.builds(lambda t, s: t + FAILURE_MARKER + s, text, text),
            errors.map(_failure_reason),
        )
    )
    with unpickles() as seen:
        err = decodes_or_raises(lambda: _failure_bytes(SIGNED, RUN, reason), (), bytes)
        if err != _stored_exception(reason):  # the reader wrote (and signed) this record
            _signed(err)
        result = RunResult(RUN, TerminalStatus.FAILED, err=err)
        raised = _raised(lambda: result.value(SIGNED))
    assert isinstance(raised, BaseException)
    assert not isinstance(raised, AssertionError)
    assert all(_signed_by_key(p) for p in seen)


def _failure_reason(error: BaseException) -> str:
    """The `Fail` reason of a run that raised ``error`` (its pickle noted as signed)."""
    reason = encode_failure(SIGNED, RUN, error)
    _signed(base64.b64decode(reason.rpartition(FAILURE_MARKER)[2]))
    return reason


def _stored_exception(reason: str) -> bytes | None:
    """The encoded exception a `Fail` reason carries, if it carries one."""
    if FAILURE_MARKER not in reason:
        return None
    try:
        return base64.b64decode(reason.rpartition(FAILURE_MARKER)[2].encode("ascii"), validate=True)
    except (ValueError, UnicodeEncodeError):
        return None


def _raised(call: Callable[[], object]) -> BaseException | None:
    try:
        call()
    except BaseException as e:  # RunResult.value raises the stored exception, whatever it is
        return e
    return None


@FUZZ
@given(st.data())
def test_job_results(data: st.DataObject) -> None:
    """A ``@job``'s stored result (the codec's frame as MessagePack bin)."""
    valid = (m_frames | p_frames).map(lambda f: encode_output("fuzz", f))
    raw = data.draw(corrupted(valid))

    result = RunResult(RUN, TerminalStatus.SUCCEEDED, ok=raw)
    with unpickles() as seen:
        decodes_or_raises(lambda: job_value(SIGNED, result), (CorruptEngineRecord, *CODEC_ERRORS))
    assert all(_signed_by_key(p) for p in seen)


# ------------------------------------------- progress marks, codec records

marks = st.builds(encode_mark, st.integers(0, 2**32), st.integers(0, 2**32))


@FUZZ
@given(corrupted(marks))
def test_progress_marks(raw: bytes) -> None:
    decodes_or_raises(lambda: decode_mark(raw, RUN), CorruptEngineRecord, tuple[int, int])


codec_records = st.builds(
    CodecRecord,
    st.sampled_from(["auto", "msgpack"]),
    st.lists(st.text(alphabet="0123456789abcdef", min_size=32, max_size=32), max_size=3).map(tuple),
).map(encode_codec_record)


@FUZZ
@given(corrupted(codec_records, names=("v", "codec", "keys")))
def test_codec_records(raw: bytes) -> None:
    decodes_or_raises(lambda: decode_codec_record(raw), CorruptEngineRecord, CodecRecord)
