"""Step-output replay: a runner's outcome recorded before it is settled.

With `RuntimeOptions.step_output_replay`, every outcome the runner returns
(`Continue`, `Succeed`, `Fail`, `Cancel`; never a `StepError`) is written,
with the KV effects the step staged, before the settlement that applies it.
A delivery of the same step with the same payload (after a crash before the
ack) then replays the outcome and its effects without calling the runner.
A replayed delay (`After`, or an `OnSignal` timeout) is shortened by the
time since the outcome was stored, so the original schedule holds.

Records live beside the run's memos, at
``{memo prefix}/step-outputs/{run_id}/{step:020d}/{sha256(payload)}``, and
go with them under memo retention. An undecodable record is absent (the
runner runs again and overwrites it).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

import msgpack

from durable._logging import get_logger
from durable.engine.memo import MemoStore
from durable.engine.outcomes import (
    After,
    Cancel,
    Continue,
    Fail,
    Immediate,
    OnSignal,
    StepOutcome,
    Succeed,
    Trigger,
)
from durable.errors import CorruptObject, DurableError, ObjectNotFound
from durable.store.framing import Kind, frame, unframe

__all__ = ["ReplayRecord", "ReplayStore", "decode_replay", "encode_replay"]

log = get_logger("durable.engine.replay")
_VERSION = 1


@dataclass(frozen=True, slots=True)
class ReplayRecord:
    """A stored outcome and the KV effects staged with it."""

    stored_at_ms: int
    outcome: StepOutcome
    puts: dict[bytes, bytes]
    deletes: frozenset[bytes]

    def adjusted(self, now_ms: int) -> StepOutcome:
        """The outcome to settle now: delays shortened by the time already spent."""
        outcome = self.outcome
        if not isinstance(outcome, Continue):
            return outcome
        elapsed = (now_ms - self.stored_at_ms) / 1000 if now_ms >= self.stored_at_ms else 0.0
        when = outcome.when
        if isinstance(when, After):
            when = After(max(0.0, when.delay - elapsed))
        elif isinstance(when, OnSignal):
            when = OnSignal(when.correlation_key, max(0.001, when.timeout - elapsed))
        return Continue(outcome.payload, when, outcome.internal)


def _trigger(t: Trigger) -> dict[str, Any]:
    if isinstance(t, After):
        return {"k": "after", "d": t.delay}
    if isinstance(t, OnSignal):
        return {"k": "signal", "c": t.correlation_key, "t": t.timeout}
    return {"k": "now"}


def _untrigger(stored: object) -> Trigger:
    m: dict[str, Any] = _typed(stored, dict)
    kind = m["k"]
    if kind == "after":
        return After(_number(m["d"]))
    if kind == "signal":
        return OnSignal(_typed(m["c"], str), _number(m["t"]))
    if kind == "now":
        return Immediate()
    raise ValueError(f"unknown trigger {kind!r}")


def _typed(value: Any, kind: type) -> Any:
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise TypeError(f"expected a {kind.__name__}, found {value!r:.80}")
    return value


def _number(value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"expected a number, found {value!r:.80}")
    return float(value)


def encode_replay(record: ReplayRecord) -> bytes:
    """The framed bytes of ``record``."""
    o = record.outcome
    if isinstance(o, Continue):
        out: dict[str, Any] = {"t": "continue", "p": o.payload, "w": _trigger(o.when)}
        if o.internal:
            out["i"] = [list(pair) for pair in o.internal]
    elif isinstance(o, Succeed):
        out = {"t": "succeed", "r": o.result}
    elif isinstance(o, Fail):
        out = {"t": "fail", "r": o.reason}
    elif isinstance(o, Cancel):
        out = {"t": "cancel", "r": o.reason}
    else:
        raise TypeError(f"not a StepOutcome: {o!r}")
    body = {
        "v": _VERSION,
        "at": record.stored_at_ms,
        "o": out,
        "puts": record.puts,
        "dels": sorted(record.deletes),
    }
    return frame(Kind.REPLAY, msgpack.packb(body, use_bin_type=True))


def decode_replay(name: str, data: bytes) -> ReplayRecord:
    """Decode a replay record; `CorruptObject` (or `UnsupportedFormat`) naming
    the object if it is not one."""
    _, body = unframe(name, data, Kind.REPLAY)
    try:
        return _decode_body(msgpack.unpackb(body, raw=False, strict_map_key=False))
    except (ValueError, TypeError, KeyError, msgpack.UnpackException) as e:
        raise CorruptObject(name, f"not a replay record: {type(e).__name__}: {e}") from None


def _decode_body(m: object) -> ReplayRecord:
    if not isinstance(m, dict) or m.get("v") != _VERSION:
        raise ValueError("not a replay record of a known version")
    o = _typed(m["o"], dict)
    kind = o["t"]
    outcome: StepOutcome
    if kind == "continue":
        internal = tuple((k, v) for k, v in _typed(o.get("i", []), list))
        outcome = Continue(_typed(o["p"], bytes), _untrigger(o["w"]), internal)
    elif kind == "succeed":
        outcome = Succeed(_typed(o["r"], bytes))
    elif kind == "fail":
        outcome = Fail(_typed(o["r"], str))
    elif kind == "cancel":
        outcome = Cancel(_typed(o["r"], str))
    else:
        raise ValueError(f"unknown outcome {kind!r}")
    puts = _typed(m.get("puts", {}), dict)
    deletes = _typed(m["dels"], list)
    if not all(isinstance(x, bytes) for x in (*puts, *puts.values(), *deletes)):
        raise TypeError("a staged key or value is not bytes")
    return ReplayRecord(_typed(m["at"], int), outcome, puts, frozenset(deletes))


class ReplayStore:
    """Reads and writes replay records under a `MemoStore`'s prefix."""

    def __init__(self, memos: MemoStore) -> None:
        self.memos = memos

    def name(self, run_id: str, step: int, payload: bytes) -> str:
        """The object name of the record of ``(run_id, step, payload)``."""
        digest = hashlib.sha256(payload).hexdigest()
        return f"{self.memos.step_outputs_prefix(run_id)}{step:020d}/{digest}"

    async def get(self, run_id: str, step: int, payload: bytes) -> ReplayRecord | None:
        """The stored record, or None (absent or undecodable)."""
        name = self.name(run_id, step, payload)
        try:
            data = await self.memos.objects.get(name)
        except ObjectNotFound:
            return None
        try:
            return decode_replay(name, data)
        except (DurableError, ValueError, KeyError, TypeError) as e:
            log.warning("undecodable replay record ignored", object=name, error=str(e))
            return None

    async def put(self, run_id: str, step: int, payload: bytes, record: ReplayRecord) -> None:
        """Write the record (durable when this returns)."""
        await self.memos.objects.put(self.name(run_id, step, payload), encode_replay(record))
