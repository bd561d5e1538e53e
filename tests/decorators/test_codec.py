"""The decorators' codec: plain data, pickles, signing, stored exceptions."""

from __future__ import annotations

import collections
import copyreg
import datetime
import enum
import hashlib
import hmac
import math
import os
import pickle
import subprocess
import sys
import textwrap
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

import cloudpickle  # type: ignore[import-untyped]
import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import durable.decorators.codec as codec_module
from durable._logging import capture_logs
from durable.decorators.codec import MAX_DEPTH, Codec
from durable.errors import CodecError, InvalidArgument, UntrustedPayload, WorkflowFailed

KEY = b"k" * 32
WHAT = "argument 'order' of workflow 'shop.checkout'"

# ------------------------------------------------------------------ helpers


def same(a: object, b: object) -> bool:
    """Equal with exactly the same types at every level; NaN equals NaN and
    -0.0 differs from 0.0."""
    if type(a) is not type(b):
        return False
    if isinstance(a, float):
        assert isinstance(b, float)
        if math.isnan(a):
            return math.isnan(b)
        return a == b and math.copysign(1.0, a) == math.copysign(1.0, b)
    if isinstance(a, list | tuple):
        assert isinstance(b, list | tuple)
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict):
        assert isinstance(b, dict)
        return list(a) == list(b) and all(same(a[k], b[k]) for k in a)
    return a == b


def kind(frame: bytes) -> bytes:
    """The frame header: version byte and kind byte."""
    return frame[:2]


@dataclass
class Order:
    id: str
    lines: list[str]


class Color(enum.Enum):
    RED = "red"


class Level(enum.IntEnum):
    LOW = 1


class Name(str):
    pass


class Point(NamedTuple):
    x: int
    y: int


class PaymentDeclined(Exception):
    def __init__(self, order: str) -> None:
        super().__init__(f"payment for {order} declined")
        self.order = order

    def __reduce__(self) -> tuple[Any, ...]:
        return (PaymentDeclined, (self.order,))


class TwoArgs(Exception):
    """Pickles (args is one message) but does not unpickle (needs two)."""

    def __init__(self, a: str, b: str) -> None:
        super().__init__(f"{a}/{b}")


class HoldsLock(Exception):
    def __init__(self) -> None:
        super().__init__("holds a lock")
        self.lock = threading.Lock()


class BadStr(Exception):
    def __str__(self) -> str:
        raise RuntimeError("no str")


class Evil:
    """Unpickling it creates a file: the side effect a refusal must prevent."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def __reduce__(self) -> tuple[Any, ...]:
        return (open, (str(self.path), "w"))


def evil_pickle(path: Path) -> bytes:
    return pickle.dumps(Evil(path), protocol=5)


def raised(error: BaseException) -> BaseException:
    """``error`` with a traceback through this function."""
    try:
        raise error
    except BaseException as e:
        return e


@pytest.fixture
def fresh_warning(monkeypatch: pytest.MonkeyPatch) -> None:
    """Forget that this process already warned about unsigned pickles."""
    monkeypatch.setattr(codec_module, "_unsigned_warned", False)


# --------------------------------------------------------------- plain data

scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**64 - 1)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text()
    | st.binary()
)
keys = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**64 - 1) | st.text() | st.binary(),
    lambda inner: st.lists(inner, max_size=3).map(tuple),
    max_leaves=5,
)
plain = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=5)
        | st.lists(inner, max_size=5).map(tuple)
        | st.dictionaries(keys, inner, max_size=5)
    ),
    max_leaves=30,
)


@settings(max_examples=300, deadline=None)
@given(plain)
def test_plain_data_round_trips_through_msgpack_with_exact_types(value: object) -> None:
    codec = Codec()
    data = codec.dumps(value, what=WHAT)
    assert kind(data) == b"\x01m"
    assert same(codec.loads(data, what=WHAT), value)


@settings(max_examples=200, deadline=None)
@given(plain)
def test_encoding_is_deterministic_and_the_same_in_every_mode(value: object) -> None:
    data = Codec().dumps(value, what=WHAT)
    assert Codec().dumps(value, what=WHAT) == data
    assert Codec(mode="msgpack").dumps(value, what=WHAT) == data
    assert Codec(signing_key=KEY).dumps(value, what=WHAT) == data
    # Re-encoding the decoded value gives the same bytes (stable input hashes).
    assert Codec().dumps(Codec().loads(data, what=WHAT), what=WHAT) == data


@pytest.mark.parametrize(
    "value",
    [
        float("nan"),
        -0.0,
        float("inf"),
        -(2**63),
        2**64 - 1,
        [],
        (),
        {},
        "",
        b"",
        [()],
        ((),),
        {"a": [(1, (2, [3, {"b": ()}]))]},
        {1: "one", -2: "minus two", False: "f", None: "n", b"k": 1, (1, "x"): 2, 1.5: 3},
        {"caf\u00e9": "\U0001f600"},
    ],
    ids=repr,
)
def test_edge_values_are_plain_and_round_trip(value: object) -> None:
    for codec in (Codec(), Codec(mode="msgpack")):
        data = codec.dumps(value, what=WHAT)
        assert kind(data) == b"\x01m"
        assert same(codec.loads(data, what=WHAT), value)


def test_dicts_keep_their_order_and_are_not_sorted() -> None:
    codec = Codec()
    ab, ba = {"a": 1, "b": 2}, {"b": 2, "a": 1}
    assert list(codec.loads(codec.dumps(ba, what=WHAT), what=WHAT)) == ["b", "a"]
    assert codec.dumps(ab, what=WHAT) != codec.dumps(ba, what=WHAT)


def test_the_stored_format_of_version_1_stays_readable() -> None:
    # Bytes written by format version 1: never change them, only add more.
    codec = Codec(signing_key=b"golden-key")
    value = bytes.fromhex("016d83a1619201c705019202c4017807c0a166cb8000000000000000")
    assert same(codec.loads(value, what=WHAT), {"a": [1, (2, b"x")], 7: None, "f": -0.0})
    signed = bytes.fromhex(
        "0173abdc8764788bccb11d95b8c80501c0efb9930a740d64fc85b4400c87150371568005950900"
        "0000000000008f94284b014b02902e"
    )
    assert codec.loads(signed, what=WHAT) == {1, 2}
    error = bytes.fromhex(
        "016585a474797065aa56616c75654572726f72a66d6f64756c65a86275696c74696e73a76d6573"
        "73616765a4626f6f6da974726163656261636bb156616c75654572726f723a20626f6f6d0aa670"
        "69636b6c65c4530173157bdc156725f36867ec3b4b0d9ca918cd161cb876ca8933630f86b670dc"
        "e80080059526000000000000008c086275696c74696e73948c0a56616c75654572726f72949394"
        "8c04626f6f6d94859452942e"
    )
    loaded = codec.loads_error(error, what="the error")
    assert type(loaded) is ValueError
    assert loaded.args == ("boom",)
    assert loaded.__notes__ == [
        "traceback of the original exception (the error):\nValueError: boom"
    ]


# ------------------------------------------------------------------ pickles


@pytest.mark.parametrize(
    "value",
    [
        Order("o1", ["apple"]),
        {1, 2},
        frozenset({"a"}),
        datetime.datetime(2024, 5, 1, 12, 30, tzinfo=datetime.UTC),
        ValueError("inside a value"),
        bytearray(b"mutable"),
        Color.RED,
        Level.LOW,
        Name("alice"),
        Point(1, 2),
        collections.OrderedDict(a=1),
        {"nested": [1, {2: Order("o2", [])}]},
        2**64,
        -(2**63) - 1,
        10**5000,
    ],
    ids=lambda v: type(v).__name__,
)
def test_other_values_are_pickled_and_keep_their_type(value: object) -> None:
    for codec in (Codec(signing_key=KEY), Codec()):
        data = codec.dumps(value, what=WHAT)
        assert kind(data) == (b"\x01s" if codec.signed else b"\x01p")
        back: Any = codec.loads(data, what=WHAT)
        assert type(back) is type(value)
        if isinstance(value, BaseException):
            assert repr(back) == repr(value)
        else:
            assert back == value


def test_pydantic_models_are_pickled() -> None:
    pydantic = pytest.importorskip("pydantic")

    class Item(pydantic.BaseModel):  # type: ignore[misc,name-defined]
        sku: str
        qty: int

    codec = Codec(signing_key=KEY)
    item = Item(sku="a", qty=2)
    assert codec.loads(codec.dumps(item, what=WHAT), what=WHAT) == item


def test_cyclic_and_too_deep_containers_are_pickled() -> None:
    codec = Codec()
    cyclic: list[Any] = [1]
    cyclic.append(cyclic)
    back = codec.loads(codec.dumps(cyclic, what=WHAT), what=WHAT)
    assert back[1] is back
    deep: list[Any] = []
    for _ in range(MAX_DEPTH + 5):
        deep = [deep]
    assert kind(codec.dumps(deep, what=WHAT)) == b"\x01p"
    shallow: list[Any] = []
    for _ in range(MAX_DEPTH - 1):
        shallow = [shallow]
    assert kind(codec.dumps(shallow, what=WHAT)) == b"\x01m"


def test_a_str_with_a_lone_surrogate_is_pickled() -> None:
    codec = Codec()
    data = codec.dumps({"s": "a\ud800"}, what=WHAT)
    assert kind(data) == b"\x01p"
    assert codec.loads(data, what=WHAT) == {"s": "a\ud800"}


def test_a_value_that_does_not_pickle_names_where_it_is() -> None:
    with pytest.raises(CodecError) as e:
        Codec().dumps({"a": [1, threading.Lock()]}, what="result of step 'fetch'")
    message = str(e.value)
    assert "cannot encode result of step 'fetch'" in message
    assert "value['a'][1] does not" in message
    assert "lock" in message
    assert "pass plain data" in message
    with pytest.raises(CodecError, match=r"does not pickle: TypeError: .*generator"):
        Codec().dumps((i for i in range(3)), what=WHAT)


def test_a_memoryview_is_pickled_and_comes_back_as_bytes() -> None:
    # cloudpickle's own choice: a memoryview pickles as the bytes it views.
    codec = Codec()
    data = codec.dumps(memoryview(b"view"), what=WHAT)
    assert kind(data) == b"\x01p"
    assert codec.loads(data, what=WHAT) == b"view"


def test_a_pickle_of_a_class_that_is_not_importable_names_the_fix() -> None:
    data = b"\x01p" + b"cno_such_module_xyz\nThing\n."
    with pytest.raises(CodecError) as e:
        Codec().loads(data, what="result of step 'fetch'")
    assert "cannot unpickle stored result of step 'fetch'" in str(e.value)
    assert "no_such_module_xyz" in str(e.value)
    assert "importable in this process" in str(e.value)


# ------------------------------------------------------------- msgpack mode


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (datetime.date(2024, 1, 1), "the value is a datetime.date;"),
        ({"a": [1, {2, 3}]}, "value['a'][1] is a set (pass a list or a tuple)"),
        (Name("x"), "the value is a test_codec.Name (convert it to a plain str)"),
        ({"b": bytearray(b"x")}, "value['b'] is a bytearray (convert it with bytes(...))"),
        ({frozenset(): 1}, "a key of the value (a dict) is a frozenset"),
        ({"k": {Name("x"): 1}}, "a key of the dict at value['k'] is a test_codec.Name"),
        ([0, 2**64], "value[1] is an int of 65 bits, outside MessagePack's range"),
        ([{"s": "\udc80"}], "value[0]['s'] is a str that is not valid UTF-8"),
    ],
    ids=lambda v: v if isinstance(v, str) else type(v).__name__,
)
def test_msgpack_mode_refuses_other_values_naming_type_and_place(
    value: object, expected: str
) -> None:
    with pytest.raises(CodecError) as e:
        Codec(mode="msgpack").dumps(value, what=WHAT)
    message = str(e.value)
    assert message.startswith(f"cannot encode {WHAT} with codec='msgpack': ")
    assert expected in message
    assert "pass plain data" in message
    assert "codec='auto'" in message
    assert isinstance(e.value, TypeError)


def test_msgpack_mode_refuses_cycles_and_deep_nesting() -> None:
    cyclic: list[Any] = []
    cyclic.append(cyclic)
    with pytest.raises(CodecError, match=f"nested deeper than {MAX_DEPTH} levels"):
        Codec(mode="msgpack").dumps(cyclic, what=WHAT)


def test_msgpack_mode_never_unpickles(tmp_path: Path) -> None:
    target = tmp_path / "pwned"
    for data in (
        b"\x01p" + evil_pickle(target),
        Codec(signing_key=KEY).dumps({1}, what=WHAT),
    ):
        with pytest.raises(CodecError, match="codec='msgpack' never unpickles"):
            Codec(mode="msgpack", signing_key=KEY).loads(data, what=WHAT)
    assert not target.exists()


# ------------------------------------------------------------------ signing


def test_the_evil_pickle_does_have_a_side_effect_when_trusted(
    tmp_path: Path, fresh_warning: None
) -> None:
    # The control for the refusal tests below: unpickling it creates the file.
    target = tmp_path / "pwned"
    file = Codec().loads(b"\x01p" + evil_pickle(target), what=WHAT)
    file.close()
    assert target.exists()


def test_an_unsigned_pickle_is_refused_with_a_key_and_never_unpickled(tmp_path: Path) -> None:
    target = tmp_path / "pwned"
    with pytest.raises(UntrustedPayload) as e:
        Codec(signing_key=KEY).loads(b"\x01p" + evil_pickle(target), what=WHAT)
    assert not target.exists()
    assert e.value.what == WHAT
    assert f"refused to unpickle {WHAT}: it is not signed" in str(e.value)


def test_a_tampered_pickle_is_refused_and_never_unpickled(tmp_path: Path) -> None:
    target = tmp_path / "pwned"
    codec = Codec(signing_key=KEY)
    good = codec.dumps(Order("o", []), what=WHAT)
    mac = good[2:34]
    # The legitimate signature over another payload.
    swapped = b"\x01s" + mac + evil_pickle(target)
    # A bit flipped in the payload, and one in the signature.
    flipped_payload = good[:-1] + bytes([good[-1] ^ 1])
    flipped_mac = good[:2] + bytes([good[2] ^ 1]) + good[3:]
    for data in (swapped, flipped_payload, flipped_mac, good[:20]):
        with pytest.raises(UntrustedPayload, match="signature does not match"):
            codec.loads(data, what=WHAT)
    assert not target.exists()


def test_a_pickle_signed_with_another_key_is_refused(tmp_path: Path) -> None:
    target = tmp_path / "pwned"
    other = Codec(signing_key=b"another key")
    header = b"\x01s"
    payload = evil_pickle(target)
    # The documented signature: HMAC-SHA256 over the frame header and the pickle.
    forged = header + hmac.new(b"another key", header + payload, hashlib.sha256).digest() + payload
    with pytest.raises(UntrustedPayload, match="tampered, or signed with another key"):
        Codec(signing_key=KEY).loads(forged, what=WHAT)
    assert not target.exists()
    # With the key that signed it, it is trusted (and the file appears).
    other.loads(forged, what=WHAT).close()
    assert target.exists()


def test_a_signed_pickle_is_refused_without_a_key(tmp_path: Path) -> None:
    data = Codec(signing_key=KEY).dumps({1, 2}, what=WHAT)
    with pytest.raises(UntrustedPayload) as e:
        Codec().loads(data, what=WHAT)
    assert "no signing_key to verify it" in str(e.value)
    assert "pass the signing_key of the process that wrote it" in str(e.value)


def test_signatures_are_compared_in_constant_time(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[tuple[bytes, bytes]] = []
    real = hmac.compare_digest

    def spy(a: bytes, b: bytes) -> bool:
        calls.append((a, b))
        return real(a, b)

    monkeypatch.setattr(hmac, "compare_digest", spy)
    codec = Codec(signing_key=KEY)
    data = codec.dumps({1}, what=WHAT)
    assert codec.loads(data, what=WHAT) == {1}
    assert len(calls) == 1
    assert calls[0][0] == data[2:34]


def test_a_str_key_is_its_utf8_bytes() -> None:
    data = Codec(signing_key="s\u00e9cret").dumps({1}, what=WHAT)
    assert Codec(signing_key="s\u00e9cret".encode()).loads(data, what=WHAT) == {1}


def test_the_key_is_not_shown_in_repr() -> None:
    codec = Codec(signing_key=b"top secret")
    assert repr(codec) == "Codec(mode='auto', signed=True)"
    assert codec.signed
    assert codec.mode == "auto"
    assert not Codec().signed


@pytest.mark.parametrize(
    ("kwargs", "expected"),
    [
        ({"signing_key": b""}, "signing_key is empty"),
        ({"signing_key": ""}, "signing_key is empty"),
        ({"signing_key": 42}, "signing_key is a int; pass bytes or a str"),
        ({"mode": "json"}, "codec mode 'json' is not one of 'auto', 'msgpack'"),
    ],
)
def test_bad_codec_options_are_refused(kwargs: dict[str, Any], expected: str) -> None:
    # A bad option (InvalidArgument, a ValueError), not a value the codec
    # cannot encode (CodecError).
    with pytest.raises(InvalidArgument, match=expected) as e:
        Codec(**kwargs)
    assert not isinstance(e.value, CodecError)


# ----------------------------------------------------- the unsigned warning


def test_one_warning_per_process_for_unsigned_pickles(fresh_warning: None) -> None:
    codec = Codec()
    with capture_logs() as logs:
        codec.dumps({"plain": 1}, what=WHAT)
        assert logs == []
        data = codec.dumps({1}, what=WHAT)
        codec.dumps({2}, what=WHAT)
        codec.loads(data, what=WHAT)
    assert len(logs) == 1
    assert logs[0]["log_level"] == "warning"
    assert logs[0]["event"] == "unsigned pickle"
    assert logs[0]["action"] == "written"
    assert logs[0]["what"] == WHAT
    assert "Engine(signing_key=...)" in logs[0]["hint"]


def test_reading_an_unsigned_pickle_warns_too(fresh_warning: None) -> None:
    data = b"\x01p" + pickle.dumps({1}, protocol=5)
    with capture_logs() as logs:
        assert Codec().loads(data, what=WHAT) == {1}
    assert [(e["event"], e["action"]) for e in logs] == [("unsigned pickle", "read")]


def test_signed_pickles_do_not_warn(fresh_warning: None) -> None:
    codec = Codec(signing_key=KEY)
    with capture_logs() as logs:
        codec.loads(codec.dumps({1}, what=WHAT), what=WHAT)
    assert logs == []


# --------------------------------------------------------------- exceptions


def test_an_exception_comes_back_as_itself_with_its_traceback_as_a_note() -> None:
    codec = Codec(signing_key=KEY)
    error = raised(PaymentDeclined("o-42"))
    back = codec.loads_error(codec.dumps_error(error, what="x"), what="error of run 'r1'")
    assert type(back) is PaymentDeclined
    assert back.order == "o-42"
    assert str(back) == "payment for o-42 declined"
    (note,) = back.__notes__
    assert note.startswith("traceback of the original exception (error of run 'r1'):\n")
    assert "in raised" in note
    assert note.rstrip().endswith("PaymentDeclined: payment for o-42 declined")


def test_a_chained_exception_keeps_the_chain_in_its_traceback_text() -> None:
    codec = Codec(signing_key=KEY)
    try:
        try:
            raise KeyError("inner")
        except KeyError as inner:
            raise RuntimeError("outer") from inner
    except RuntimeError as e:
        error = e
    back = codec.loads_error(codec.dumps_error(error, what="x"), what="x")
    assert type(back) is RuntimeError
    assert "KeyError: 'inner'" in back.__notes__[0]
    assert "direct cause" in back.__notes__[0]


def check_failed(back: BaseException, type_name: str, message: str, reason: str) -> None:
    assert isinstance(back, WorkflowFailed)
    assert back.type_name == type_name
    assert back.message == message
    assert back.remote_traceback is not None
    assert back.remote_traceback.rstrip().endswith(message)
    assert reason in back.__notes__[0]
    assert back.__notes__[0].startswith("the original exception was not rebuilt: ")
    assert back.__notes__[1].startswith("traceback of the original exception")


def test_an_exception_that_does_not_pickle_comes_back_as_workflow_failed() -> None:
    codec = Codec(signing_key=KEY)
    data = codec.dumps_error(raised(HoldsLock()), what="x")
    back = codec.loads_error(data, what="error of step 'charge'", run_id="r1")
    check_failed(back, "test_codec.HoldsLock", "holds a lock", "holds no pickle")
    assert isinstance(back, WorkflowFailed)
    assert back.run_id == "r1"
    assert str(back) == "run 'r1' failed with test_codec.HoldsLock: holds a lock"


def test_without_a_run_id_the_message_names_what() -> None:
    codec = Codec(mode="msgpack")
    back = codec.loads_error(
        codec.dumps_error(ValueError("boom"), what="x"), what="the exception of run 'r1'"
    )
    assert str(back) == "the exception of run 'r1' is a ValueError: boom"


def test_an_exception_that_does_not_unpickle_comes_back_as_workflow_failed() -> None:
    codec = Codec(signing_key=KEY)
    back = codec.loads_error(codec.dumps_error(raised(TwoArgs("a", "b")), what="x"), what="x")
    check_failed(back, "test_codec.TwoArgs", "a/b", "cannot unpickle stored x")


def test_msgpack_mode_stores_no_pickle_and_reads_none() -> None:
    auto = Codec()
    strict = Codec(mode="msgpack")
    error = raised(PaymentDeclined("o"))
    back = strict.loads_error(strict.dumps_error(error, what="x"), what="x")
    check_failed(back, "test_codec.PaymentDeclined", "payment for o declined", "holds no pickle")
    back = strict.loads_error(auto.dumps_error(error, what="x"), what="x")
    check_failed(back, "test_codec.PaymentDeclined", "payment for o declined", "never unpickles")


def test_an_unsigned_exception_pickle_is_not_rebuilt_with_a_key(
    tmp_path: Path, fresh_warning: None
) -> None:
    unsigned = Codec().dumps_error(raised(ValueError("boom")), what="x")
    with capture_logs() as logs:
        back = Codec(signing_key=KEY).loads_error(unsigned, what="error of run 'r1'")
    check_failed(back, "ValueError", "boom", "refused to unpickle error of run 'r1'")
    assert [e["event"] for e in logs] == ["untrusted exception pickle refused"]
    assert logs[0]["reason"] == "it is not signed"
    # A tampered one, whose unpickling would create a file, is not unpickled.
    target = tmp_path / "pwned"
    record = Codec(signing_key=KEY).dumps_error(ValueError("boom"), what="x")
    fields = msgpack.unpackb(record[2:])
    fields["pickle"] = b"\x01s" + fields["pickle"][2:34] + evil_pickle(target)
    tampered = record[:2] + msgpack.packb(fields)
    back = Codec(signing_key=KEY).loads_error(tampered, what="x")
    check_failed(back, "ValueError", "boom", "signature does not match")
    assert not target.exists()


def test_a_signed_exception_is_not_rebuilt_without_the_key() -> None:
    data = Codec(signing_key=KEY).dumps_error(ValueError("boom"), what="x")
    back = Codec().loads_error(data, what="x")
    check_failed(back, "ValueError", "boom", "no signing_key to verify it")


def test_odd_exceptions_still_encode() -> None:
    codec = Codec(signing_key=KEY)
    back = codec.loads_error(codec.dumps_error(BadStr(), what="x"), what="x")
    assert type(back) is BadStr
    failed = codec.loads_error(Codec(mode="msgpack").dumps_error(BadStr(), what="x"), what="x")
    assert isinstance(failed, WorkflowFailed)
    assert failed.message == "<test_codec.BadStr whose str() failed>"
    back = codec.loads_error(codec.dumps_error(KeyboardInterrupt(), what="x"), what="x")
    assert type(back) is KeyboardInterrupt
    back = codec.loads_error(codec.dumps_error(ValueError("a\ud800b"), what="x"), what="x")
    assert back.args == ("a\ud800b",)


def test_huge_messages_and_tracebacks_are_clipped_to_fit_a_kv_value() -> None:
    codec = Codec(mode="msgpack")
    error = raised(ValueError("x" * 1_000_000))
    data = codec.dumps_error(error, what="x")
    assert len(data) < 64 * 1024
    back = codec.loads_error(data, what="x")
    assert isinstance(back, WorkflowFailed)
    assert back.message.startswith("x" * 1000)
    assert "characters cut" in back.message
    assert back.remote_traceback is not None
    assert back.remote_traceback.startswith("\n[... ")
    # A pickle too large for a KV value is left out.
    data = Codec(signing_key=KEY).dumps_error(error, what="x")
    assert len(data) < 64 * 1024
    back = Codec(signing_key=KEY).loads_error(data, what="x")
    assert isinstance(back, WorkflowFailed)
    assert "the record holds no pickle of it" in back.__notes__[0]


# ------------------------------ reducers other libraries put in copyreg

# tblib's pickling_support.install(), which importing distributed runs (and
# distributed runs again for each exception a task raises), registers in the
# process-wide copyreg.dispatch_table a reducer for every exception class,
# which pickles the traceback too and needs tblib to read back. The codec must
# store and read exactly what it does without it.


def _is_tblib(reducer: object) -> bool:
    return str(getattr(getattr(reducer, "func", reducer), "__module__", "")).startswith("tblib")


@contextmanager
def copyreg_dispatch_table(entries: dict[Any, Any]) -> Iterator[None]:
    """Run with ``copyreg.dispatch_table`` holding exactly ``entries``; the
    table is put back as it was, whatever happens."""
    saved = dict(copyreg.dispatch_table)
    copyreg.dispatch_table.clear()
    copyreg.dispatch_table.update(entries)
    try:
        yield
    finally:
        copyreg.dispatch_table.clear()
        copyreg.dispatch_table.update(saved)


def chained() -> BaseException:
    try:
        try:
            raise KeyError("inner")
        except KeyError as inner:
            raise RuntimeError("outer") from inner
    except RuntimeError as e:
        return e


def describe(value: object) -> object:
    """What a round trip gave back, comparable with ``==``."""
    if isinstance(value, BaseException):
        return (
            type(value),
            value.args,
            str(value),
            getattr(value, "__notes__", None),
            value.__traceback__ is None,
            describe(value.__cause__) if value.__cause__ is not None else None,
            describe(value.__context__) if value.__context__ is not None else None,
        )
    if isinstance(value, list):
        return [describe(v) for v in value]
    return value


def attempt(action: Callable[[], object]) -> object:
    try:
        return action()
    except CodecError as e:
        return ("CodecError", str(e))


def codec_outcomes() -> list[object]:
    """The stored bytes and round trips of exceptions and values holding them."""
    errors = [
        raised(PaymentDeclined("o-42")),
        raised(TwoArgs("a", "b")),  # does not unpickle
        raised(ValueError("boom")),
        raised(HoldsLock()),  # does not pickle
        chained(),
    ]
    values = [[raised(ValueError("in a list")), Order("o", ["x"])], raised(TwoArgs("c", "d"))]
    codec = Codec(signing_key=KEY)
    outcomes: list[object] = []
    for error in errors:
        data = codec.dumps_error(error, what="x")
        outcomes += [data, describe(codec.loads_error(data, what="x"))]
    for value in values:
        data = codec.dumps(value, what="x")
        outcomes += [data, attempt(lambda data=data: describe(codec.loads(data, what="x")))]
    # A traceback on its own does not pickle.
    outcomes.append(attempt(lambda: codec.dumps(errors[0].__traceback__, what="x")))
    return outcomes


def test_exceptions_are_stored_and_read_the_same_after_tblib_registers_its_reducers() -> None:
    tblib_pickling = pytest.importorskip("tblib.pickling_support")
    clean = {cls: r for cls, r in copyreg.dispatch_table.items() if not _is_tblib(r)}
    with copyreg_dispatch_table(clean):
        expected = codec_outcomes()
        plain = cloudpickle.dumps(raised(TwoArgs("a", "b")), protocol=5)
    with copyreg_dispatch_table(clean):
        tblib_pickling.install()
        # tblib's reducers are in place: plain cloudpickle now writes other bytes.
        assert cloudpickle.dumps(raised(TwoArgs("a", "b")), protocol=5) != plain
        assert codec_outcomes() == expected
    with copyreg_dispatch_table(clean):
        tblib_pickling.install(raised(TwoArgs("a", "b")))  # what distributed does per error
        assert codec_outcomes() == expected
    assert expected[-1][0] == "CodecError"  # type: ignore[index]
    assert "cannot pickle 'traceback' object" in expected[-1][1]  # type: ignore[index]


IMPORTS_DISTRIBUTED = textwrap.dedent(
    """
    import hashlib, sys
    from durable.decorators.codec import Codec

    class TwoArgs(Exception):
        def __init__(self, a, b):
            super().__init__(f"{a}/{b}")

    def raised(error):
        try:
            raise error
        except BaseException as e:
            return e

    def outcomes():
        codec = Codec(signing_key=b"k" * 32)
        out = []
        for error in (raised(ValueError("boom")), raised(TwoArgs("a", "b"))):
            data = codec.dumps_error(error, what="x")
            back = codec.loads_error(data, what="x")
            out += [data.hex(), type(back).__name__, str(back), back.__traceback__ is None]
        data = codec.dumps([raised(KeyError("k"))], what="x")
        (back,) = codec.loads(data, what="x")
        out += [data.hex(), repr(back), back.__traceback__ is None]
        return out

    before = outcomes()
    import distributed  # noqa: F401
    after = outcomes()
    differ = [i for i, (b, a) in enumerate(zip(before, after, strict=True)) if b != a]
    print(f"items that differ: {differ}" if differ else "same")
    """
)


@pytest.mark.slow
def test_importing_distributed_does_not_change_what_the_codec_stores() -> None:
    pytest.importorskip("distributed")
    root = Path(__file__).resolve().parents[2]
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(root), os.environ.get("PYTHONPATH", "")]),
    }
    done = subprocess.run(
        [sys.executable, "-c", IMPORTS_DISTRIBUTED],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "same", done.stdout


# ------------------------------------------------------------ corrupt input


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        (b"", "stored x is corrupt: 0 bytes is no frame"),
        (b"\x01", "stored x is corrupt: 1 bytes is no frame"),
        (b"\x01z", r"unknown frame header b'\\x01z'"),
        (b"\x00m\xc0", "unknown frame header"),
        (b"\x02m\xc0", "codec format version 2, this durable reads versions up to 1: upgrade"),
        (b"\x01m\xc1", "stored x is corrupt MessagePack"),
        (b"\x01m\xc0\xc0", "stored x is corrupt MessagePack"),
        (b"\x01m\xc7\x01\x09\x00", "unknown MessagePack ext type 9"),
        (Codec().dumps_error(ValueError(), what="x"), "stored x is an exception record"),
    ],
)
def test_loads_refuses_what_is_not_a_value_frame(data: bytes, expected: str) -> None:
    with pytest.raises(CodecError, match=expected):
        Codec().loads(data, what="x")


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        (b"\x01m\xc0", "stored x is not an exception record"),
        (b"\x01e\xc1", "stored x is a corrupt exception record"),
        (b"\x01e\x93\x01\x02\x03", "it holds a list, not a map"),
        (b"\x01e\x80", "field 'type' is not a str"),
    ],
)
def test_loads_error_refuses_what_is_not_an_exception_record(data: bytes, expected: str) -> None:
    with pytest.raises(CodecError, match=expected):
        Codec().loads_error(data, what="x")


def test_an_exception_record_whose_pickle_field_is_not_a_pickle_frame() -> None:
    codec = Codec()
    record = codec.dumps_error(ValueError("boom"), what="x")
    fields = msgpack.unpackb(record[2:])
    fields["pickle"] = codec.dumps([1], what="x")  # a MessagePack frame
    back = codec.loads_error(record[:2] + msgpack.packb(fields), what="x")
    check_failed(back, "ValueError", "boom", "stored x holds a frame of kind 'm'")
    fields["pickle"] = b"\x01p" + pickle.dumps("not an exception")
    back = codec.loads_error(record[:2] + msgpack.packb(fields), what="x")
    check_failed(back, "ValueError", "boom", "stored x unpickled to a str")
