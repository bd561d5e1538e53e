"""Rate limits: ``@workflow(rate_limit=(n, period_s))``.

At most ``n`` runs of the workflow *start executing* in any window of
``period_s`` seconds (of the engine's clock), across every process on the
store. A run that would exceed it waits, pending, and never fails.

How: a run starts executing at its first delivery (step 0, nothing
journaled yet). That delivery is *admitted* only when the workflow's
window record holds fewer than ``n`` starts in the last ``period_s``; the
record (``workflow/rate-limit/{workflow}``: the last ``n`` start times and
the last wake-up time booked) is rewritten with the new start in a
compare-and-commit on the store's KV before the workflow's code runs. The
store's one writer (its owner) runs every delivery, so one record decides
for every process. A delivery that is not admitted runs nothing: it is put
back with a delay (a deferral, which never counts as an attempt without
progress: `durable.decorators.progress`) until a booked wake-up time, and
tries again then. Wake-ups are booked ``period_s / n`` apart after the
window's earliest free time, so a backlog drains at the limit without every
waiting run waking at once; a run that wakes to a full window (its wake-up
came late) waits for the window's next free time.

Precisely:

- the limit counts first deliveries admitted; a run whose process dies
  after its admission, before it journaled anything, is admitted (counted)
  again when it is redelivered; resumed runs (after a wait or a crash with a
  journal) are not counted;
- runs wait in the queue's order (priority, then FIFO) for their first
  claim; after a deferral, in the order of their booked wake-ups;
- ``n`` is at most `MAX_RATE` and ``period_s`` at least 1 ms; a bad value
  raises `DecoratorError` naming the workflow, at decoration.

On a partitioned store each partition keeps its own window record. Runs
started without a ``run_id`` (by ``start``, a schedule, a deduplicated or
debounced start) get an id in the workflow's *home partition* (the
partition of ``"rate-limit/{workflow}"``), so the limit holds across the
store for them. A run given an explicit ``run_id``, or a child workflow
(whose id lives with its parent), is counted in its own partition's
record: across P partitions such runs may start up to ``n`` per period in
each.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

import msgpack

from durable.decorators.progress import DEFERRED
from durable.engine.outcomes import StepError
from durable.engine.runs import RESERVED_KV_PREFIX
from durable.errors import CorruptEngineRecord, DecoratorError
from durable.store.queue import SettlementEffects

if TYPE_CHECKING:
    from durable.decorators.base import EngineBase
    from durable.engine.delivery import Step

__all__ = [
    "MAX_RATE",
    "RateLimit",
    "Window",
    "admit",
    "decide",
    "home_id",
    "rate_key",
]

#: The largest ``n`` of a rate limit (the window record holds ``n`` times).
MAX_RATE = 1000
_PREFIX = RESERVED_KV_PREFIX + b"rate-limit/"
_VERSION = 1


@dataclass(frozen=True, slots=True)
class RateLimit:
    """At most ``limit`` starts per ``period_ms`` milliseconds."""

    limit: int
    period_ms: int

    @classmethod
    def parse(cls, value: object, workflow: str) -> RateLimit:
        """``value`` (``(n, period_s)``) as a `RateLimit`; `DecoratorError`
        naming ``workflow`` if it is not one."""
        what = f"@workflow {workflow!r}: rate_limit"
        if not isinstance(value, tuple | list) or len(value) != 2:
            raise DecoratorError(f"{what} must be (n, period_s), got {value!r:.80}")
        n, period = value
        if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= MAX_RATE:
            raise DecoratorError(
                f"{what}: n must be an int from 1 to {MAX_RATE} (runs per period), got {n!r:.80}"
            )
        if (
            isinstance(period, bool)
            or not isinstance(period, int | float)
            or not math.isfinite(period)
            or period < 0.001
        ):
            raise DecoratorError(f"{what}: period_s must be at least 0.001 s, got {period!r:.80}")
        return cls(n, round(period * 1000))


@dataclass(frozen=True, slots=True)
class Window:
    """A workflow's window record: recent start times and the last booked wake-up (ms)."""

    starts: tuple[int, ...] = ()
    booked: int = 0


def rate_key(workflow: str) -> bytes:
    """The KV key of ``workflow``'s window record."""
    return _PREFIX + workflow.encode()


def encode_window(window: Window) -> bytes:
    """The stored bytes of a window record."""
    return msgpack.packb([_VERSION, list(window.starts), window.booked])


def decode_window(data: bytes) -> Window:
    """Decode a window record; `CorruptEngineRecord` if it is not one."""
    try:
        version, starts, booked = msgpack.unpackb(data)
        ok = version == _VERSION and isinstance(booked, int)
        ok = ok and all(isinstance(s, int) for s in starts)
    except Exception as e:  # msgpack raises several unrelated types; a bad shape too
        raise CorruptEngineRecord("rate-limit window", f"{type(e).__name__}: {e}") from e
    if not ok:
        raise CorruptEngineRecord("rate-limit window", f"bad record {data[:80]!r}")
    return Window(tuple(starts), booked)


def decide(window: Window, rate: RateLimit, now_ms: int, woken: bool) -> tuple[Window, int | None]:
    """The next window record, and None (admitted at ``now_ms``) or the
    wake-up time to defer to (pure). ``woken``: the delivery follows a
    deferral of this run (it had a booked wake-up)."""
    starts = [s for s in window.starts if s > now_ms - rate.period_ms][-rate.limit :]
    if len(starts) < rate.limit:
        return Window((*starts, now_ms), window.booked), None
    free = starts[0] + rate.period_ms  # the oldest start leaves the window then
    if woken:  # its booking came due: wait for the next free time, book nothing
        return Window(tuple(starts), window.booked), free
    spacing = max(1, rate.period_ms // rate.limit)
    wake = max(free, window.booked + spacing)
    return Window(tuple(starts), wake), wake


def home_id(engine: EngineBase, workflow: str) -> str:
    """A new run id in ``workflow``'s home partition (see the module docstring)."""
    return engine.co_located(engine.new_run_id(), f"rate-limit/{workflow}")


async def admit(engine: EngineBase, step: Step, workflow: str, rate: RateLimit) -> None:
    """Admit the first delivery ``step`` of a run of ``workflow`` (its start
    is recorded before this returns), or put it back until a time the window
    may have room (`StepError`, a deferral)."""
    queue = engine.queue
    key = rate_key(workflow)
    woken = step.attempts > 1
    while True:
        raw = queue.kv.get(key)
        window = decode_window(raw) if raw is not None else Window()
        now = engine.clock.now_ms()
        after, wake = decide(window, rate, now, woken)
        if raw is not None and after == window:
            break  # nothing to record
        fx = SettlementEffects()
        fx.kv_put(key, encode_window(after))
        if await queue.kv_compare_commit(key, raw, fx) is not None:
            break
    if wake is not None:
        raise StepError.transient(
            f"{DEFERRED} run {step.run_id!r} of workflow {workflow!r} waits for its rate limit "
            f"({rate.limit} per {rate.period_ms / 1000:g} s)",
            retry_after=max(wake - now, 1) / 1000,
        )
