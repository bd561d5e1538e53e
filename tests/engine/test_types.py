"""The engine's value types: construction and validation, reserved names, records."""

from __future__ import annotations

import contextlib
import datetime as dt
import math
import pickle
from collections.abc import Callable
from typing import Any

import msgpack
import pytest
from hypothesis import given
from hypothesis import strategies as st

import durable.engine as public
from durable import errors
from durable.engine import (
    DEFAULT_QUEUE_NAME,
    ENGINE_RECORD_VERSION,
    HEADER_RUN_ID,
    HEADER_SIGNAL_DELIVERED,
    HEADER_SIGNAL_WAIT,
    HEADER_STEP,
    HEADER_TERMINAL,
    MAX_RUN_ID_LEN,
    RESERVED_HEADER_PREFIX,
    RESERVED_KV_PREFIX,
    After,
    Cancel,
    Cancelling,
    Continue,
    Fail,
    Immediate,
    OnSignal,
    Pending,
    RunEnd,
    Running,
    RunOptions,
    RunOutcome,
    RunRecord,
    RunResultRecord,
    RunSpec,
    RunState,
    RunStatus,
    RunTermination,
    StepError,
    StepErrorKind,
    StepOutcome,
    StepPointer,
    SubmitOutcome,
    Succeed,
    TerminalRecord,
    TerminalStatus,
    Terminated,
    decode_run_outcome,
    decode_run_record,
    decode_run_result,
    decode_step_pointer,
    decode_terminal_record,
    default_memo_prefix,
    encode_run_outcome,
    encode_run_record,
    encode_run_result,
    encode_step_pointer,
    encode_terminal_record,
    input_digest,
    validate_run_id,
)
from durable.errors import (
    CorruptEngineRecord,
    EngineError,
    InputMismatch,
    InvalidArgument,
    InvalidId,
    InvalidQueueName,
    ReservedHeader,
    ReservedKey,
)
from durable.store.queue import PermanentFailure, SettlementEffects

DIGEST = input_digest(b"input")
TERMINATION = RunTermination(
    TerminalStatus.FAILED, 3, 1_700_000_000_000, "boom", StepErrorKind.PERMANENT
)
OUTCOME = RunOutcome("run-1", TerminalStatus.FAILED, 3, error="boom", headers={"k": "v"})


# ------------------------------------------------------------------ outcomes


def test_continue_constructors_pick_their_trigger() -> None:
    assert StepOutcome.continue_now(b"p") == Continue(b"p", Immediate())
    assert Continue(b"p").when == Immediate()
    assert StepOutcome.continue_after(b"p", 2) == Continue(b"p", After(2.0))
    assert StepOutcome.continue_after(b"p", dt.timedelta(minutes=1)).when == After(60.0)
    assert StepOutcome.continue_after(b"p", 0).when == After(0.0)
    waiting = StepOutcome.continue_on_signal(b"p", "payment:1", dt.timedelta(days=7))
    assert waiting == Continue(b"p", OnSignal("payment:1", 7 * 24 * 3600.0))
    assert isinstance(waiting.when, OnSignal)
    assert isinstance(waiting.when.timeout, float)


def test_outcome_variants_hold_their_fields() -> None:
    assert Succeed(b"r").result == b"r"
    assert Fail("no").reason == "no"
    assert Cancel("stop").reason == "stop"
    assert Continue(bytearray(b"p")).payload == b"p"
    assert type(Continue(memoryview(b"p")).payload) is bytes
    for outcome in (Succeed(b""), Fail(""), Cancel(""), Continue(b"")):
        assert isinstance(outcome, StepOutcome)


@pytest.mark.parametrize("delay", [-1, -0.001, math.nan, math.inf, "1", True, None])
def test_a_bad_delay_is_rejected_naming_it(delay: Any) -> None:
    with pytest.raises(InvalidArgument, match="delay") as info:
        StepOutcome.continue_after(b"p", delay)
    assert repr(delay) in str(info.value)
    with pytest.raises(InvalidArgument, match=r"After\.delay"):
        After(delay)


@pytest.mark.parametrize("timeout", [0, -1, dt.timedelta(0), math.nan, "5", False])
def test_a_bad_signal_timeout_is_rejected_naming_it(timeout: Any) -> None:
    with pytest.raises(InvalidArgument, match="timeout") as info:
        StepOutcome.continue_on_signal(b"p", "key", timeout)
    assert repr(timeout) in str(info.value)


@pytest.mark.parametrize("key", ["", 7, None, b"key", "\ud800"])
def test_a_bad_correlation_key_is_rejected_naming_it(key: Any) -> None:
    with pytest.raises(InvalidArgument, match="correlation_key") as info:
        OnSignal(key, 5)
    assert repr(key) in str(info.value)


@pytest.mark.parametrize(
    ("build", "name", "bad"),
    [
        (lambda: Continue("text"), "Continue.payload", "'text'"),
        (lambda: Continue(b"p", 5), "Continue.when", "5"),
        (lambda: Continue(b"p", public.Trigger()), "Continue.when", "Trigger"),
        (lambda: Succeed(None), "Succeed.result", "None"),
        (lambda: Fail(b"why"), "Fail.reason", "b'why'"),
        (lambda: Cancel(3), "Cancel.reason", "3"),
    ],
)
def test_bad_outcome_fields_are_rejected(build: Callable[[], object], name: str, bad: str) -> None:
    with pytest.raises(InvalidArgument) as info:
        build()
    assert name in str(info.value)
    assert bad in str(info.value)


def test_outcomes_are_frozen() -> None:
    with pytest.raises(AttributeError):
        Succeed(b"r").result = b"x"  # type: ignore[misc]


# --------------------------------------------------------------- step errors


def test_step_error_constructors() -> None:
    t, p = StepError.transient("later"), StepError.permanent("never")
    assert (t.message, t.kind) == ("later", StepErrorKind.TRANSIENT)
    assert (p.message, p.kind) == ("never", StepErrorKind.PERMANENT)
    assert isinstance(t, Exception)
    assert str(p) == "never"
    assert t == StepError("later", StepErrorKind.TRANSIENT)
    assert t != p
    assert hash(t) == hash(StepError.transient("later"))
    assert pickle.loads(pickle.dumps(p)) == p
    assert "never" in repr(p)


def test_step_error_rejects_bad_fields() -> None:
    with pytest.raises(InvalidArgument, match="'transient'"):
        StepError("m", "transient")  # type: ignore[arg-type]
    with pytest.raises(InvalidArgument, match=r"StepError\.message"):
        StepError(None, StepErrorKind.TRANSIENT)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("error", "kind"),
    [
        (errors.ObjectStoreError("backend down"), StepErrorKind.TRANSIENT),
        (errors.StoreNotInitialized("memory://x"), StepErrorKind.TRANSIENT),
        (errors.JobNotFound("j"), StepErrorKind.PERMANENT),
        (InputMismatch("r"), StepErrorKind.PERMANENT),
        (PermanentFailure("bad input"), StepErrorKind.PERMANENT),
        (ValueError("oops"), StepErrorKind.TRANSIENT),
        (KeyError("k"), StepErrorKind.TRANSIENT),
        (RuntimeError(), StepErrorKind.TRANSIENT),
    ],
    ids=lambda v: type(v).__name__,
)
def test_from_exception_uses_the_errors_permanence(error: Exception, kind: StepErrorKind) -> None:
    step_error = StepError.from_exception(error)
    assert step_error.kind is kind
    assert step_error.__cause__ is error
    assert step_error.message
    if str(error):
        assert str(error) in step_error.message


def test_from_exception_keeps_a_step_error() -> None:
    original = StepError.permanent("p")
    assert StepError.from_exception(original) is original


# ---------------------------------------------------------------- run ids


def test_run_ids_are_validated() -> None:
    assert validate_run_id("A-z_09") == "A-z_09"
    assert validate_run_id("x" * MAX_RUN_ID_LEN) == "x" * 128
    assert MAX_RUN_ID_LEN == 128


@pytest.mark.parametrize("bad", ["", "x" * 129, "a b", "run/1", "é", "a.b"])
def test_a_bad_run_id_names_the_run_id(bad: str) -> None:
    with pytest.raises(InvalidId, match="run id") as info:
        validate_run_id(bad)
    assert repr(bad) in str(info.value)
    assert isinstance(info.value, ValueError)
    with pytest.raises(InvalidId):
        RunSpec(b"", run_id=bad)


def test_a_run_id_must_be_a_str() -> None:
    with pytest.raises(InvalidId, match="run id must be a str"):
        validate_run_id(7)  # type: ignore[arg-type]


# ------------------------------------------------------------ run options


def test_run_options_defaults_and_values() -> None:
    opts = RunOptions()
    assert (opts.headers, opts.priority, opts.max_attempts_per_step, opts.run_at) == (
        {},
        None,
        None,
        None,
    )
    assert opts.run_at_ms() is None
    headers = {"callback_url": "https://x"}
    opts = RunOptions(headers, priority=0, max_attempts_per_step=1, run_at=5)
    headers["later"] = "x"
    assert opts.headers == {"callback_url": "https://x"}  # a copy
    assert opts.run_at_ms() == 5
    at = dt.datetime(2024, 1, 1, tzinfo=dt.UTC)
    assert RunOptions(run_at=at).run_at_ms() == 1_704_067_200_000
    assert RunOptions(priority=2**32 - 1, max_attempts_per_step=2**32 - 1).priority == 2**32 - 1


@pytest.mark.parametrize(
    "header", [HEADER_RUN_ID, "workflow.", "workflow.custom", RESERVED_HEADER_PREFIX + "step"]
)
def test_a_reserved_header_is_rejected_naming_it(header: str) -> None:
    with pytest.raises(ReservedHeader) as info:
        RunOptions(headers={"ok": "1", header: "v"})
    message = str(info.value)
    assert repr(header) in message
    assert "rename" in message
    assert info.value.header == header
    assert isinstance(info.value, ValueError)


def test_headers_that_merely_contain_the_prefix_are_allowed() -> None:
    assert RunOptions(headers={"my.workflow.x": "1", "workflow": "2", "Workflow.x": "3"})


@pytest.mark.parametrize(
    ("kwargs", "name", "bad"),
    [
        ({"headers": {"k": 1}}, "headers", "1"),
        ({"headers": {2: "v"}}, "headers", "2"),
        ({"headers": [("k", "v")]}, "headers", "[('k', 'v')]"),
        ({"priority": -1}, "priority", "-1"),
        ({"priority": 2**32}, "priority", str(2**32)),
        ({"priority": True}, "priority", "True"),
        ({"priority": 1.0}, "priority", "1.0"),
        ({"max_attempts_per_step": 0}, "max_attempts_per_step", "0"),
        ({"max_attempts_per_step": "3"}, "max_attempts_per_step", "'3'"),
        ({"run_at": -1}, "run_at", "-1"),
        ({"run_at": 1.5}, "run_at", "1.5"),
        ({"run_at": dt.datetime(2024, 1, 1)}, "run_at", "datetime.datetime(2024, 1, 1, 0, 0)"),
    ],
)
def test_bad_run_options_are_rejected_naming_the_value(
    kwargs: dict[str, Any], name: str, bad: str
) -> None:
    with pytest.raises(InvalidArgument) as info:
        RunOptions(**kwargs)
    assert name in str(info.value)
    assert bad in str(info.value)


# --------------------------------------------------------------- run spec


def test_run_spec_defaults_and_effects() -> None:
    spec = RunSpec(b"in")
    assert (spec.input, spec.run_id, spec.options, spec.effects) == (
        b"in",
        None,
        RunOptions(),
        None,
    )
    effects = SettlementEffects().kv_put(b"app/x", b"1").kv_delete(b"app/y")
    spec = RunSpec(bytearray(b"in"), "run-1", RunOptions(priority=5), effects)
    assert spec.input == b"in"
    assert type(spec.input) is bytes
    assert spec.effects is effects


@pytest.mark.parametrize(
    "effects",
    [
        SettlementEffects().kv_put(b"workflow/runs/x", b"1"),
        SettlementEffects().kv_delete(b"workflow/steps/x"),
    ],
)
def test_run_spec_effects_may_not_touch_reserved_keys(effects: SettlementEffects) -> None:
    with pytest.raises(ReservedKey) as info:
        RunSpec(b"", effects=effects)
    assert "workflow/" in str(info.value)
    assert info.value.prefix == RESERVED_KV_PREFIX


@pytest.mark.parametrize(
    ("kwargs", "name", "bad"),
    [
        ({"input": "text"}, "RunSpec.input", "'text'"),
        ({"input": b"", "options": {"priority": 1}}, "RunSpec.options", "{'priority': 1}"),
        ({"input": b"", "effects": {}}, "RunSpec.effects", "{}"),
    ],
)
def test_bad_run_spec_fields_are_rejected(kwargs: dict[str, Any], name: str, bad: str) -> None:
    with pytest.raises(InvalidArgument) as info:
        RunSpec(**kwargs)
    assert name in str(info.value)
    assert bad in str(info.value)


def test_run_spec_validates_effects_filled_directly() -> None:
    effects = SettlementEffects(kv_puts={b"k": b"v"}, kv_deletes=[b"k"])
    with pytest.raises(errors.ConflictingKvEffect):
        RunSpec(b"", effects=effects)


# ---------------------------------------------------------------- results


def test_terminal_status_strings() -> None:
    assert [s.as_str() for s in TerminalStatus] == ["succeeded", "failed", "cancelled"]


def test_states_termination_outcome_and_end() -> None:
    assert SubmitOutcome("r", "j", True).newly_submitted
    assert RunStatus("r", Pending(), 0).state == Pending()
    assert Running() != Cancelling()
    for state in (Pending(), Running(), Cancelling(), Terminated(TERMINATION)):
        assert isinstance(state, RunState)
    status = RunStatus("run-1", Terminated(TERMINATION), 3)
    assert isinstance(status.state, Terminated)
    assert status.state.termination.error_kind is StepErrorKind.PERMANENT
    success = RunTermination(TerminalStatus.SUCCEEDED, 0, 0)
    assert (success.error, success.error_kind) == (None, None)
    assert RunEnd(success).outcome is None
    assert RunEnd(TERMINATION, OUTCOME).outcome == OUTCOME
    assert RunOutcome("r", TerminalStatus.SUCCEEDED, 0, result=bytearray(b"x")).result == b"x"


@pytest.mark.parametrize(
    ("build", "name", "bad"),
    [
        (lambda: RunTermination("failed", 0, 0), "status", "'failed'"),
        (lambda: RunTermination(TerminalStatus.FAILED, -1, 0), "final_step", "-1"),
        (lambda: RunTermination(TerminalStatus.FAILED, 0, -5), "terminated_at_ms", "-5"),
        (lambda: RunTermination(TerminalStatus.FAILED, 0, 0, b"e"), "error", "b'e'"),
        (lambda: RunTermination(TerminalStatus.FAILED, 0, 0, "e", "x"), "error_kind", "'x'"),
        (lambda: RunOutcome("r", "succeeded", 0), "status", "'succeeded'"),
        (lambda: RunOutcome("r", TerminalStatus.FAILED, 0, result="x"), "result", "'x'"),
        (lambda: RunOutcome("r", TerminalStatus.FAILED, 0, headers={"k": 0}), "headers", "0"),
        (lambda: RunStatus("r", RunState(), 0), "state", "RunState"),
        (lambda: RunStatus("r", "Pending", 0), "state", "'Pending'"),
        (lambda: RunStatus("r", Pending(), -2), "current_step", "-2"),
        (lambda: Terminated(None), "termination", "None"),
    ],
)
def test_bad_result_fields_are_rejected(build: Callable[[], object], name: str, bad: str) -> None:
    with pytest.raises(InvalidArgument) as info:
        build()
    assert name in str(info.value)
    assert bad in str(info.value)


def test_run_outcome_and_status_check_the_run_id() -> None:
    with pytest.raises(InvalidId, match="'bad id'"):
        RunOutcome("bad id", TerminalStatus.SUCCEEDED, 0)
    with pytest.raises(InvalidId, match="'bad id'"):
        RunStatus("bad id", Pending(), 0)


# ---------------------------------------------------------- reserved names


def test_reserved_names() -> None:
    assert DEFAULT_QUEUE_NAME == "workflow-steps"
    assert RESERVED_KV_PREFIX == b"workflow/"
    assert RESERVED_HEADER_PREFIX == "workflow."
    assert (HEADER_RUN_ID, HEADER_STEP, HEADER_TERMINAL) == (
        "workflow.run_id",
        "workflow.step",
        "workflow.terminal",
    )
    assert (HEADER_SIGNAL_WAIT, HEADER_SIGNAL_DELIVERED) == (
        "workflow.signal_wait",
        "workflow.signal_delivered",
    )
    assert default_memo_prefix(DEFAULT_QUEUE_NAME) == "workflow-steps-memo"
    assert default_memo_prefix("orders") == "orders-memo"
    with pytest.raises(InvalidQueueName):
        default_memo_prefix("q" * 256)


# ------------------------------------------------------------------ errors


def test_engine_errors_are_permanent_and_name_what_went_wrong() -> None:
    mismatch = InputMismatch("run-7")
    assert "'run-7'" in str(mismatch)
    assert "different input" in str(mismatch)
    assert mismatch.run_id == "run-7"
    corrupt = CorruptEngineRecord("run record of run 'r'", "truncated")
    assert (corrupt.what, corrupt.reason) == ("run record of run 'r'", "truncated")
    for err in (
        mismatch,
        ReservedHeader("workflow.x", "workflow."),
        InvalidArgument("bad"),
        corrupt,
    ):
        assert isinstance(err, EngineError)
        assert isinstance(err, errors.DurableError)
        assert err.transient is False
    for cls in (InputMismatch, ReservedHeader, InvalidArgument):
        assert issubclass(cls, ValueError)


def test_every_public_name_is_exported_sorted_and_documented() -> None:
    def order(name: str) -> tuple[int, str]:
        group = 0 if name.isupper() else 1 if name[0].isupper() else 2
        return group, name.lower()

    assert public.__all__ == sorted(set(public.__all__), key=order)
    assert public.__doc__
    for name in public.__all__:
        obj = getattr(public, name)
        if isinstance(obj, int | str | bytes):
            continue
        assert obj.__doc__, f"{name} has no docstring"
    for name in errors.__all__:
        assert getattr(errors, name).__doc__
    assert errors.__all__ == sorted(errors.__all__)


# ----------------------------------------------------------------- records

RUN_RECORD = RunRecord("run-1", DIGEST, 1_700_000_000_000, {"k": "v"}, cancel_requested=True)
POINTER = StepPointer(4, "01HZX3B2W3R8R8R8R8R8R8R8R8")
TERMINAL = TerminalRecord(TERMINATION, DIGEST)
RESULT = RunResultRecord(TERMINATION, OUTCOME)

ROUND_TRIPS: list[tuple[object, Callable[[Any], bytes], Callable[..., object]]] = [
    (RUN_RECORD, encode_run_record, decode_run_record),
    (RunRecord("r", DIGEST, 0), encode_run_record, decode_run_record),
    (POINTER, encode_step_pointer, decode_step_pointer),
    (TERMINAL, encode_terminal_record, decode_terminal_record),
    (
        TerminalRecord(RunTermination(TerminalStatus.SUCCEEDED, 0, 1)),
        encode_terminal_record,
        decode_terminal_record,
    ),
    (OUTCOME, encode_run_outcome, decode_run_outcome),
    (
        RunOutcome("r", TerminalStatus.SUCCEEDED, 2, result=b"\x00\xff"),
        encode_run_outcome,
        decode_run_outcome,
    ),
    (RESULT, encode_run_result, decode_run_result),
]
DECODERS = [
    decode_run_record,
    decode_step_pointer,
    decode_terminal_record,
    decode_run_outcome,
    decode_run_result,
]


@pytest.mark.parametrize(("value", "encode", "decode"), ROUND_TRIPS)
def test_records_round_trip(
    value: object, encode: Callable[[Any], bytes], decode: Callable[..., object]
) -> None:
    data = encode(value)
    assert decode(data) == value
    m = msgpack.unpackb(data, raw=False)
    assert m["v"] == ENGINE_RECORD_VERSION


def test_records_use_named_fields_and_bin_bytes() -> None:
    m = msgpack.unpackb(encode_run_record(RUN_RECORD), raw=False)
    assert m == {
        "v": 1,
        "run_id": "run-1",
        "input_sha256": DIGEST,
        "submitted_at_ms": 1_700_000_000_000,
        "headers": {"k": "v"},
        "cancel_requested": True,
    }
    raw = msgpack.unpackb(
        encode_run_outcome(RunOutcome("r", TerminalStatus.SUCCEEDED, 0, result=b"x")), raw=True
    )
    assert raw[b"result"] == b"x"  # bin: stays bytes even when str are read raw
    assert raw[b"status"] == b"succeeded"


def test_run_record_helpers() -> None:
    record = RunRecord.for_input("r", b"input", 5, {"a": "b"})
    assert record.input_sha256 == DIGEST
    assert len(DIGEST) == 32
    assert record.matches_input(b"input")
    assert not record.matches_input(b"other")
    assert not record.cancel_requested
    assert record.with_cancel_requested().cancel_requested
    assert RunRecord.for_input("r", b"", 0).headers == {}


@pytest.mark.parametrize(
    ("build", "name", "bad"),
    [
        (lambda: RunRecord("r", b"short", 0), "input_sha256", "b'short'"),
        (lambda: RunRecord("r", DIGEST, -1), "submitted_at_ms", "-1"),
        (lambda: RunRecord("r", DIGEST, 0, cancel_requested=1), "cancel_requested", "1"),
        (lambda: RunRecord("r", DIGEST, 0, {"workflow.x": 1}), "headers", "1"),
        (lambda: StepPointer(-1, "j"), "step_number", "-1"),
        (lambda: TerminalRecord(OUTCOME), "termination", "RunOutcome"),
        (lambda: TerminalRecord(TERMINATION, b"x" * 31), "input_sha256", "xxx"),
        (lambda: RunResultRecord(OUTCOME, OUTCOME), "termination", "RunOutcome"),
        (lambda: RunResultRecord(TERMINATION, None), "outcome", "None"),
    ],
)
def test_bad_record_fields_are_rejected(build: Callable[[], object], name: str, bad: str) -> None:
    with pytest.raises(InvalidArgument) as info:
        build()
    assert name in str(info.value)
    assert bad in str(info.value)


def test_a_step_pointer_checks_its_job_id() -> None:
    with pytest.raises(InvalidId, match="job id"):
        StepPointer(0, "not a job id")


def _packed(**fields: Any) -> bytes:
    return msgpack.packb(fields, use_bin_type=True)


def test_unknown_fields_are_ignored() -> None:
    extra = {"added_later": [1, 2], "nested": {"x": b"y"}}
    run = _packed(v=1, run_id="r", input_sha256=DIGEST, submitted_at_ms=3, **extra)
    assert decode_run_record(run) == RunRecord("r", DIGEST, 3)
    pointer = _packed(v=1, step_number=2, job_id="j", **extra)
    assert decode_step_pointer(pointer) == StepPointer(2, "j")
    terminal = _packed(v=1, status="cancelled", final_step=1, terminated_at_ms=9, **extra)
    assert decode_terminal_record(terminal) == TerminalRecord(
        RunTermination(TerminalStatus.CANCELLED, 1, 9)
    )
    outcome = {"run_id": "r", "status": "succeeded", "final_step": 0, **extra}
    assert decode_run_outcome(_packed(v=1, **outcome)) == RunOutcome(
        "r", TerminalStatus.SUCCEEDED, 0
    )
    termination = {"status": "succeeded", "final_step": 0, "terminated_at_ms": 0, **extra}
    result = decode_run_result(_packed(v=1, termination=termination, outcome=outcome, **extra))
    assert result.outcome.result is None
    assert result.termination.status is TerminalStatus.SUCCEEDED


def test_missing_optional_fields_take_their_defaults() -> None:
    record = decode_run_record(_packed(v=1, run_id="r", input_sha256=DIGEST, submitted_at_ms=0))
    assert (record.headers, record.cancel_requested) == ({}, False)
    terminal = decode_terminal_record(
        _packed(v=1, status="failed", final_step=0, terminated_at_ms=0)
    )
    assert terminal.input_sha256 is None
    assert (terminal.termination.error, terminal.termination.error_kind) == (None, None)
    outcome = decode_run_outcome(_packed(v=1, run_id="r", status="failed", final_step=0))
    assert (outcome.result, outcome.error, outcome.headers) == (None, None, {})
    # explicit nils read like absent fields
    record = decode_run_record(
        _packed(v=1, run_id="r", input_sha256=DIGEST, submitted_at_ms=0, headers=None)
    )
    assert record.headers == {}


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (b"", "not MessagePack"),
        (b"\xc1", "not MessagePack"),
        (b"\x92\x01\x02", "expected a map, found list"),
        (
            _packed(v=1, run_id="r", input_sha256=DIGEST, submitted_at_ms=0) + b"\x00",
            "not MessagePack",
        ),
        (_packed(run_id="r", input_sha256=DIGEST, submitted_at_ms=0), "no format version"),
        (_packed(v="1", run_id="r"), "no format version"),
        (_packed(v=2, run_id="r", input_sha256=DIGEST, submitted_at_ms=0), "format version 2"),
        (_packed(v=1, input_sha256=DIGEST, submitted_at_ms=0), "'run_id'"),
        (_packed(v=1, run_id=5, input_sha256=DIGEST, submitted_at_ms=0), "'run_id'"),
        (_packed(v=1, run_id="r", input_sha256="x" * 32, submitted_at_ms=0), "'input_sha256'"),
        (_packed(v=1, run_id="r", input_sha256=b"x", submitted_at_ms=0), "32-byte"),
        (_packed(v=1, run_id="r", input_sha256=DIGEST, submitted_at_ms=True), "submitted_at_ms"),
        (_packed(v=1, run_id="a b", input_sha256=DIGEST, submitted_at_ms=0), "'a b'"),
        (
            _packed(v=1, run_id="r", input_sha256=DIGEST, submitted_at_ms=0, cancel_requested=1),
            "cancel_requested",
        ),
        (
            _packed(v=1, run_id="r", input_sha256=DIGEST, submitted_at_ms=0, headers={"k": 1}),
            "headers",
        ),
    ],
)
def test_undecodable_run_records_raise_naming_what(data: bytes, reason: str) -> None:
    with pytest.raises(CorruptEngineRecord) as info:
        decode_run_record(data, "run record of run 'r'")
    assert "run record of run 'r'" in str(info.value)
    assert reason in str(info.value)
    assert info.value.what == "run record of run 'r'"


@pytest.mark.parametrize(
    ("decode", "data", "reason"),
    [
        (decode_step_pointer, _packed(v=1, step_number=-1, job_id="j"), "step_number"),
        (decode_step_pointer, _packed(v=1, step_number=0), "'job_id'"),
        (
            decode_terminal_record,
            _packed(v=1, status="done", final_step=0, terminated_at_ms=0),
            "'done'",
        ),
        (
            decode_terminal_record,
            _packed(v=1, status="failed", final_step=0, terminated_at_ms=0, error_kind="fatal"),
            "'fatal'",
        ),
        (
            decode_run_outcome,
            _packed(v=1, run_id="r", status="failed", final_step=0, result="s"),
            "'result'",
        ),
        (decode_run_result, _packed(v=1, termination=[], outcome={}), "'termination'"),
        (decode_run_result, _packed(v=1, outcome={}), "'termination'"),
    ],
)
def test_undecodable_records_raise_naming_what(
    decode: Callable[..., object], data: bytes, reason: str
) -> None:
    with pytest.raises(CorruptEngineRecord) as info:
        decode(data)
    assert "stored" in str(info.value)
    assert reason in str(info.value)


@pytest.mark.parametrize("decode", DECODERS)
def test_default_what_names_the_record(decode: Callable[..., object]) -> None:
    with pytest.raises(CorruptEngineRecord) as info:
        decode(b"garbage")
    assert info.value.what.replace(" ", "_") in decode.__name__ + "_record"


# -------------------------------------------------------------- properties

run_ids = st.from_regex(r"[A-Za-z0-9_-]{1,128}", fullmatch=True)
headers = st.dictionaries(
    st.text(max_size=20).filter(lambda k: not k.startswith(RESERVED_HEADER_PREFIX)),
    st.text(max_size=20),
    max_size=4,
)
ints = st.integers(min_value=0, max_value=2**64 - 1)
opt_text = st.none() | st.text(max_size=40)
terminations = st.builds(
    RunTermination,
    st.sampled_from(TerminalStatus),
    ints,
    ints,
    opt_text,
    st.none() | st.sampled_from(StepErrorKind),
)
outcomes = st.builds(
    RunOutcome,
    run_ids,
    st.sampled_from(TerminalStatus),
    ints,
    st.none() | st.binary(max_size=64),
    opt_text,
    headers,
)
digests = st.binary(min_size=32, max_size=32)
records = st.one_of(
    st.builds(RunRecord, run_ids, digests, ints, headers, st.booleans()),
    st.builds(StepPointer, ints, run_ids),
    st.builds(TerminalRecord, terminations, st.none() | digests),
    outcomes,
    st.builds(RunResultRecord, terminations, outcomes),
)
CODECS: dict[type, tuple[Callable[[Any], bytes], Callable[..., object]]] = {
    RunRecord: (encode_run_record, decode_run_record),
    StepPointer: (encode_step_pointer, decode_step_pointer),
    TerminalRecord: (encode_terminal_record, decode_terminal_record),
    RunOutcome: (encode_run_outcome, decode_run_outcome),
    RunResultRecord: (encode_run_result, decode_run_result),
}


@given(records)
def test_every_record_round_trips(record: object) -> None:
    encode, decode = CODECS[type(record)]
    assert decode(encode(record)) == record


@given(st.binary(max_size=64), st.sampled_from(DECODERS))
def test_arbitrary_bytes_decode_or_raise_corrupt(
    data: bytes, decode: Callable[..., object]
) -> None:
    with contextlib.suppress(CorruptEngineRecord):
        decode(data)


@pytest.mark.parametrize(
    "error",
    [
        errors.InputMismatch("run-1"),
        errors.NonDeterminismError("run-1", 3, "fetch", "shout"),
        errors.StepMaybeExecutedError("run-1", 2, "charge"),
        errors.UnknownWorkflow("run-1", "shop.checkout"),
        errors.RunCancelled("run-1", "user asked"),
        errors.SignalWaiterExists("approve:1", "run-1"),
        errors.ObjectNotFound("log/1"),
        errors.DecoratorError("plain message"),
    ],
    ids=lambda e: type(e).__name__,
)
def test_errors_survive_pickling_with_their_type_and_fields(error: errors.DurableError) -> None:
    # A failed workflow's exception is stored pickled; ours must come back as themselves.
    error.add_note("raised in a worker")
    back = pickle.loads(pickle.dumps(error))
    assert type(back) is type(error)
    assert str(back) == str(error)
    assert vars(back) == vars(error)
    assert back.transient == error.transient
