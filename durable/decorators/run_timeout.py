"""Workflow-level timeouts: ``@workflow(timeout=seconds)``, ``.options(timeout=...)``.

A run of a workflow with a timeout must end within ``timeout`` seconds of
the engine's clock after it was started (submitted; after its ``run_at``
when that is later). Its *deadline* (epoch ms) is fixed when it is
submitted and stored with it, in its headers (`HEADER_DEADLINE`,
`HEADER_TIMEOUT`), so a restart does not move it. The runner
(`durable.decorators.runner`) enforces it:

- a delivery that starts at or after the deadline cancels the run (before
  anything of it runs again);
- a delivery still running at the deadline (a step in flight, a wait
  completing in place) is cancelled at the deadline: a timer on the
  engine's clock;
- a delivery that suspends on a durable wait (a sleep, a signal, a child)
  whose wake-up lies past the deadline suspends until the deadline
  instead (`clamp`), and the delivery it then gets cancels the run.

A run cancelled so ends as cancelled with a reason (`timeout_reason`) that
`cancelled_error` turns back into `RunTimedOut`, naming the run and the
timeout: ``handle.result()`` raises it, and so does a parent's call of a
timed-out child. Its child runs are cancelled with it, as by
``handle.cancel()``. A run still pending at its deadline (queued behind its
concurrency limits) is cancelled when a worker first takes it.
"""

from __future__ import annotations

import datetime as _dt
from collections.abc import Mapping

from durable.engine.outcomes import After, Continue, OnSignal, Trigger
from durable.errors import RunCancelled, RunTimedOut

__all__ = [
    "HEADER_DEADLINE",
    "HEADER_TIMEOUT",
    "Deadline",
    "cancelled_error",
    "clamp",
    "deadline_headers",
    "deadline_of",
    "timeout_reason",
]

#: Header of a run with a timeout: its deadline, epoch ms of the engine's clock.
HEADER_DEADLINE = "durable.deadline_ms"
#: Header of a run with a timeout: the timeout, in seconds.
HEADER_TIMEOUT = "durable.timeout_s"
#: The cancellation reason of a timed-out run starts with this.
_REASON = "durable.timeout:"
#: The shortest wait a clamped trigger keeps (an `OnSignal` timeout must be > 0).
_MIN_S = 0.001


class Deadline:
    """The deadline of one run: ``at_ms`` (engine clock) for ``timeout`` seconds."""

    __slots__ = ("at_ms", "timeout")

    def __init__(self, at_ms: int, timeout: float) -> None:
        self.at_ms = at_ms
        self.timeout = timeout

    def passed(self, now_ms: int) -> bool:
        """Whether the deadline has come at ``now_ms``."""
        return now_ms >= self.at_ms

    def __repr__(self) -> str:
        return f"Deadline(at_ms={self.at_ms}, timeout={self.timeout:g})"


def deadline_headers(
    timeout: float, now_ms: int, run_at: int | _dt.datetime | None = None
) -> dict[str, str]:
    """The headers of a run submitted at ``now_ms`` (not before ``run_at``)
    that must end ``timeout`` seconds after it starts."""
    start = now_ms
    if isinstance(run_at, _dt.datetime):
        start = max(start, int(run_at.timestamp() * 1000))
    elif isinstance(run_at, int):
        start = max(start, run_at)
    at = start + round(timeout * 1000)
    return {HEADER_DEADLINE: str(at), HEADER_TIMEOUT: repr(timeout)}


def deadline_of(headers: Mapping[str, str]) -> Deadline | None:
    """The deadline a run's headers carry (None: no timeout, or headers that
    are not ours)."""
    at, timeout = headers.get(HEADER_DEADLINE), headers.get(HEADER_TIMEOUT)
    if at is None or timeout is None:
        return None
    try:
        return Deadline(int(at), float(timeout))
    except ValueError:
        return None


def timeout_reason(deadline: Deadline) -> str:
    """The `durable.engine.Cancel` reason of a run that timed out."""
    return f"{_REASON}{deadline.timeout!r}"


def cancelled_error(run_id: str, reason: str | None) -> RunCancelled:
    """The exception of run ``run_id`` cancelled for ``reason``: `RunTimedOut`
    when its timeout cancelled it, else `RunCancelled`."""
    if reason is not None and reason.startswith(_REASON):
        try:
            return RunTimedOut(run_id, float(reason[len(_REASON) :]))
        except ValueError:
            pass
    return RunCancelled(run_id, reason)


def clamp(outcome: Continue, deadline: Deadline, now_ms: int) -> Continue:
    """``outcome`` (a suspension) waking no later than ``deadline``."""
    left = max((deadline.at_ms - now_ms) / 1000, _MIN_S)
    trigger: Trigger = outcome.when
    if isinstance(trigger, OnSignal):
        if trigger.timeout <= left:
            return outcome
        trigger = OnSignal(trigger.correlation_key, left)
    elif isinstance(trigger, After):
        if trigger.delay <= left:
            return outcome
        trigger = After(left)
    else:
        return outcome
    return Continue(outcome.payload, trigger, outcome.internal)
