"""What a step returns: a `StepOutcome`, or a raised `StepError`.

- `Continue` ``(payload, when)``: enqueue the next step; ``when`` (a
  `Trigger`) decides when it is claimable: `Immediate`, `After`
  ``(delay)`` or `OnSignal` ``(correlation_key, timeout)``.
- `Succeed` ``(result)``: ack; the run terminates as succeeded.
- `Fail` ``(reason)``, `Cancel` ``(reason)``: ack; the run terminates as
  failed or cancelled. Runner verdicts: nothing is dead-lettered.
- raise `StepError.transient`: retry per the queue's backoff up to the
  step's attempt limit, then dead-letter.
- raise `StepError.permanent`: dead-letter at once (an infrastructure
  error, found among the queue's dead jobs).

Durations are float seconds (a `datetime.timedelta` is accepted by the
constructors); payloads and results are bytes.
"""

from __future__ import annotations

import datetime as _dt
import enum
from dataclasses import dataclass, field
from typing import Any

from durable.engine._checks import check_bytes, check_seconds, check_str
from durable.errors import DurableError, InvalidArgument
from durable.store.queue import PermanentFailure

__all__ = [
    "After",
    "Cancel",
    "Continue",
    "Fail",
    "Immediate",
    "OnSignal",
    "StepError",
    "StepErrorKind",
    "StepOutcome",
    "Succeed",
    "Trigger",
]

# ------------------------------------------------------------------- trigger


class Trigger:
    """When the next step of a `Continue` becomes claimable: `Immediate`, `After`
    or `OnSignal`."""

    __slots__ = ()


@dataclass(frozen=True, slots=True)
class Immediate(Trigger):
    """The next step is claimable at once."""


@dataclass(frozen=True, slots=True)
class After(Trigger):
    """The next step is claimable ``delay`` seconds (finite, >= 0) after the settlement."""

    delay: float

    def __post_init__(self) -> None:
        object.__setattr__(self, "delay", check_seconds("After.delay", self.delay))


@dataclass(frozen=True, slots=True)
class OnSignal(Trigger):
    """The next step waits for a signal on ``correlation_key``, or ``timeout`` seconds.

    The next step's ``signal`` is the signal's payload, or None when the
    timeout fired. The key must not be empty; the timeout must be positive.
    """

    correlation_key: str
    timeout: float

    def __post_init__(self) -> None:
        check_str("OnSignal.correlation_key", self.correlation_key, non_empty=True)
        timeout = check_seconds("OnSignal.timeout", self.timeout, positive=True)
        object.__setattr__(self, "timeout", timeout)


# ------------------------------------------------------------------ outcomes


class StepOutcome:
    """What a step decided: `Continue`, `Succeed`, `Fail` or `Cancel`.

    The constructors `continue_now`, `continue_after` and `continue_on_signal`
    build a `Continue` with its trigger.
    """

    __slots__ = ()

    @staticmethod
    def continue_now(payload: bytes) -> Continue:
        """Run the next step with ``payload`` as soon as a worker claims it."""
        return Continue(payload, Immediate())

    @staticmethod
    def continue_after(payload: bytes, delay: float | _dt.timedelta) -> Continue:
        """Run the next step with ``payload`` after ``delay`` (seconds or a timedelta)."""
        return Continue(payload, After(check_seconds("delay", delay)))

    @staticmethod
    def continue_on_signal(
        payload: bytes, correlation_key: str, timeout: float | _dt.timedelta
    ) -> Continue:
        """Run the next step with ``payload`` when a signal for ``correlation_key``
        arrives, or after ``timeout`` (seconds or a timedelta) without one."""
        return Continue(
            payload, OnSignal(correlation_key, check_seconds("timeout", timeout, positive=True))
        )


@dataclass(frozen=True, slots=True)
class Continue(StepOutcome):
    """Enqueue the next step with ``payload``; ``when`` decides when it is claimable.

    ``internal``: ``(key, value)`` KV writes under the reserved ``workflow/``
    prefix (a None value deletes the key) that commit with the settlement,
    for layers built on the runtime (the decorators' continue-as-new resets
    a run's journal so). Not checked against the prefix: never user keys.
    """

    payload: bytes
    when: Trigger = field(default_factory=Immediate)
    internal: tuple[tuple[bytes, bytes | None], ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "payload", check_bytes("Continue.payload", self.payload))
        internal = tuple(self.internal)
        for item in internal:
            if (
                not isinstance(item, tuple)
                or len(item) != 2
                or not isinstance(item[0], bytes)
                or not isinstance(item[1], bytes | None)
            ):
                raise InvalidArgument(
                    f"Continue.internal holds (bytes, bytes | None) pairs, got {item!r:.80}"
                )
        object.__setattr__(self, "internal", internal)
        if not isinstance(self.when, Trigger) or type(self.when) is Trigger:
            raise InvalidArgument(
                f"Continue.when must be Immediate, After or OnSignal, got {self.when!r}"
            )


@dataclass(frozen=True, slots=True)
class Succeed(StepOutcome):
    """The run succeeded with ``result``."""

    result: bytes

    def __post_init__(self) -> None:
        object.__setattr__(self, "result", check_bytes("Succeed.result", self.result))


@dataclass(frozen=True, slots=True)
class Fail(StepOutcome):
    """The run failed, for ``reason`` (a runner verdict: the step is acked)."""

    reason: str

    def __post_init__(self) -> None:
        check_str("Fail.reason", self.reason)


@dataclass(frozen=True, slots=True)
class Cancel(StepOutcome):
    """The runner cancelled the run, for ``reason`` (the step is acked)."""

    reason: str

    def __post_init__(self) -> None:
        check_str("Cancel.reason", self.reason)


# --------------------------------------------------------------- step errors


class StepErrorKind(enum.Enum):
    """Whether retrying a failed step may help; stored as the lowercase value."""

    #: Retry with backoff up to the step's attempt limit, then dead-letter.
    TRANSIENT = "transient"
    #: Dead-letter at once.
    PERMANENT = "permanent"


class StepError(Exception):
    """A step (or terminal hook) failed; raise it from the runner.

    ``kind`` decides the path: `StepErrorKind.TRANSIENT` retries per the
    queue's backoff (or after ``retry_after`` seconds, when given),
    `StepErrorKind.PERMANENT` dead-letters at once. No staged effects are
    applied in either case.
    """

    __slots__ = ("kind", "message", "retry_after")

    def __init__(
        self, message: str, kind: StepErrorKind, *, retry_after: float | None = None
    ) -> None:
        check_str("StepError.message", message)
        if not isinstance(kind, StepErrorKind):
            raise InvalidArgument(f"StepError.kind must be a StepErrorKind, got {kind!r}")
        if retry_after is not None:
            retry_after = check_seconds("StepError.retry_after", retry_after)
        super().__init__(message)
        self.message = message
        self.kind = kind
        #: Seconds before a transient error's retry (None: the queue's backoff).
        self.retry_after = retry_after

    @classmethod
    def transient(cls, message: str, *, retry_after: float | None = None) -> StepError:
        """An error that may pass on retry (after ``retry_after`` seconds, when
        given, instead of the queue's backoff)."""
        return cls(message, StepErrorKind.TRANSIENT, retry_after=retry_after)

    @classmethod
    def permanent(cls, message: str) -> StepError:
        """An error no retry fixes."""
        return cls(message, StepErrorKind.PERMANENT)

    @classmethod
    def from_exception(cls, error: BaseException) -> StepError:
        """``error`` as a step error, chained to it (``__cause__``).

        A `StepError` is returned as is. A `DurableError` keeps its
        permanence (``error.transient``); a queue `PermanentFailure` is
        permanent; any other exception is transient, as a handler's
        exception is in the queue's worker.
        """
        if isinstance(error, StepError):
            return error
        if isinstance(error, DurableError):
            kind = StepErrorKind.TRANSIENT if error.transient else StepErrorKind.PERMANENT
            message = str(error) or type(error).__name__
        else:
            kind = (
                StepErrorKind.PERMANENT
                if isinstance(error, PermanentFailure)
                else StepErrorKind.TRANSIENT
            )
            message = f"{type(error).__name__}: {error}" if str(error) else type(error).__name__
        step_error = cls(message, kind)
        step_error.__cause__ = error
        return step_error

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.message, self.kind))

    def __repr__(self) -> str:
        return f"StepError({self.message!r}, {self.kind})"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, StepError):
            return NotImplemented
        return (self.message, self.kind) == (other.message, other.kind)

    def __hash__(self) -> int:
        return hash((self.message, self.kind))
