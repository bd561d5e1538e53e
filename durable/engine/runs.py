"""Runs: how they are submitted, identified and observed, and the names they reserve.

A run is a chain of queue jobs ("steps") on one queue. `RunSpec` describes a
submission (the first step's input, an optional run id, the `RunOptions` of
every step and the `SettlementEffects` applied with the first enqueue);
`SubmitOutcome` is its answer. `RunStatus` reports an active or terminated
run (its `RunState`), `RunTermination` how a run ended, `RunOutcome` the
committed result or error a worker recorded, and `RunEnd` both.

Every value is checked when it is built: a bad run id raises `InvalidId`, a
header under ``workflow.`` `ReservedHeader`, a submission KV effect under
``workflow/`` `ReservedKey`, any other bad value `InvalidArgument`.
"""

from __future__ import annotations

import datetime as _dt
import enum
from collections.abc import Mapping
from dataclasses import dataclass, field

from durable.engine._checks import (
    U32_MAX,
    U64_MAX,
    check_bytes,
    check_headers,
    check_int,
    check_optional_str,
)
from durable.engine.outcomes import StepErrorKind
from durable.errors import InvalidArgument, ReservedHeader, ReservedKey
from durable.store.ids import validate_id
from durable.store.queue import SettlementEffects
from durable.store.queue.options import validate_queue_name

__all__ = [
    "DEFAULT_QUEUE_NAME",
    "HEADER_RUN_ID",
    "HEADER_SIGNAL_DELIVERED",
    "HEADER_SIGNAL_WAIT",
    "HEADER_STEP",
    "HEADER_TERMINAL",
    "MAX_RUN_ID_LEN",
    "RESERVED_HEADER_PREFIX",
    "RESERVED_KV_PREFIX",
    "Cancelling",
    "Pending",
    "RunEnd",
    "Running",
    "RunOptions",
    "RunOutcome",
    "RunSpec",
    "RunState",
    "RunStatus",
    "RunTermination",
    "SubmitOutcome",
    "TerminalStatus",
    "Terminated",
    "default_memo_prefix",
    "validate_run_id",
]

# ------------------------------------------------------------ reserved names

#: The queue the runtime's steps and notifications use unless configured.
DEFAULT_QUEUE_NAME = "workflow-steps"
#: Header names starting with this are set by the runtime; submit rejects them.
RESERVED_HEADER_PREFIX = "workflow."
#: Header: the run id, on every step job and on the terminal-notification job.
HEADER_RUN_ID = "workflow.run_id"
#: Header: the step number in decimal, on every step job.
HEADER_STEP = "workflow.step"
#: Header: ``"1"`` on a terminal-notification job.
HEADER_TERMINAL = "workflow.terminal"
#: Header: the correlation key, on a step scheduled to wait for a signal.
HEADER_SIGNAL_WAIT = "workflow.signal_wait"
#: Header: ``"1"`` when a signal was consumed at the previous settlement.
HEADER_SIGNAL_DELIVERED = "workflow.signal_delivered"
#: Caller-KV keys under this prefix are the runtime's own records.
RESERVED_KV_PREFIX = b"workflow/"
#: A run id is at most this many bytes.
MAX_RUN_ID_LEN = 128


def default_memo_prefix(queue_name: str) -> str:
    """The object-path prefix of the memo store of the runtime on ``queue_name``."""
    return f"{validate_queue_name(queue_name)}-memo"


def validate_run_id(run_id: str) -> str:
    """``run_id`` if it is 1 to `MAX_RUN_ID_LEN` bytes of ``[A-Za-z0-9_-]``.

    Raises `InvalidId` (a `ValueError`) naming the run id otherwise.
    """
    return validate_id(run_id, "run id")


def _step(name: str, value: object) -> int:
    return check_int(name, value, 0, U64_MAX)


# --------------------------------------------------------------- submission


@dataclass(frozen=True, slots=True)
class RunOptions:
    """Options of every step of a run; None takes the queue's default."""

    #: Headers carried by every step and reported on `RunOutcome.headers`;
    #: names under ``workflow.`` are reserved (`ReservedHeader`).
    headers: Mapping[str, str] = field(default_factory=dict)
    #: Claim priority of every step (lower claims first), 0 to 2**32-1.
    priority: int | None = None
    #: Claims each step may take before it is dead-lettered, 1 to 2**32-1.
    max_attempts_per_step: int | None = None
    #: The first step is not claimable before this time: epoch milliseconds
    #: or a timezone-aware datetime.
    run_at: int | _dt.datetime | None = None

    def __post_init__(self) -> None:
        headers = check_headers("RunOptions.headers", self.headers)
        for name in headers:
            if name.startswith(RESERVED_HEADER_PREFIX):
                raise ReservedHeader(name, RESERVED_HEADER_PREFIX)
        object.__setattr__(self, "headers", headers)
        if self.priority is not None:
            check_int("RunOptions.priority", self.priority, 0, U32_MAX)
        if self.max_attempts_per_step is not None:
            check_int("RunOptions.max_attempts_per_step", self.max_attempts_per_step, 1, U32_MAX)
        if isinstance(self.run_at, _dt.datetime):
            if self.run_at.tzinfo is None:
                raise InvalidArgument(
                    f"RunOptions.run_at must be timezone-aware, got the naive datetime "
                    f"{self.run_at!r}"
                )
        elif self.run_at is not None:
            check_int("RunOptions.run_at (epoch milliseconds)", self.run_at, 0, U64_MAX)

    def run_at_ms(self) -> int | None:
        """``run_at`` in epoch milliseconds."""
        if isinstance(self.run_at, _dt.datetime):
            return max(0, round(self.run_at.timestamp() * 1000))
        return self.run_at


@dataclass(frozen=True, slots=True)
class RunSpec:
    """A submission: the first step's ``input`` and how to run the run.

    ``run_id`` None makes the runtime generate a ULID. ``effects`` commit
    atomically with the first step's enqueue and are dropped for a
    duplicate submission; their KV keys must not be under ``workflow/``.
    """

    input: bytes
    run_id: str | None = None
    options: RunOptions = field(default_factory=RunOptions)
    effects: SettlementEffects | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "input", check_bytes("RunSpec.input", self.input))
        if self.run_id is not None:
            validate_run_id(self.run_id)
        if not isinstance(self.options, RunOptions):
            raise InvalidArgument(f"RunSpec.options must be RunOptions, got {self.options!r}")
        if self.effects is not None:
            if not isinstance(self.effects, SettlementEffects):
                raise InvalidArgument(
                    f"RunSpec.effects must be SettlementEffects, got {self.effects!r}"
                )
            self.effects.validate()
            for key in [*self.effects.kv_puts, *self.effects.kv_deletes]:
                if bytes(key).startswith(RESERVED_KV_PREFIX):
                    raise ReservedKey(bytes(key), RESERVED_KV_PREFIX)


@dataclass(frozen=True, slots=True)
class SubmitOutcome:
    """The answer to a submission.

    ``job_id`` is the queue job that currently represents the run (also for
    a duplicate); ``newly_submitted`` is False for a duplicate submission.
    """

    run_id: str
    job_id: str
    newly_submitted: bool


# -------------------------------------------------------------- termination


class TerminalStatus(enum.Enum):
    """How a run ended; stored as its lowercase value."""

    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"

    def as_str(self) -> str:
        """The lowercase name: ``"succeeded"``, ``"failed"`` or ``"cancelled"``."""
        return self.value


@dataclass(frozen=True, slots=True)
class RunTermination:
    """How and when a run terminated, as its terminal record holds it.

    ``error`` is the failure or cancellation reason (None for a success);
    ``error_kind`` is set when a `StepError` ended the run.
    """

    status: TerminalStatus
    final_step: int
    terminated_at_ms: int
    error: str | None = None
    error_kind: StepErrorKind | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.status, TerminalStatus):
            raise InvalidArgument(
                f"RunTermination.status must be a TerminalStatus, got {self.status!r}"
            )
        _step("RunTermination.final_step", self.final_step)
        check_int("RunTermination.terminated_at_ms", self.terminated_at_ms, 0, U64_MAX)
        check_optional_str("RunTermination.error", self.error)
        if self.error_kind is not None and not isinstance(self.error_kind, StepErrorKind):
            raise InvalidArgument(
                f"RunTermination.error_kind must be a StepErrorKind, got {self.error_kind!r}"
            )


@dataclass(frozen=True, slots=True)
class RunOutcome:
    """The committed outcome of a terminated run, as its worker recorded it.

    ``result`` is a success's result, ``error`` a failure's or cancellation's
    reason; ``headers`` are the submitter's (no reserved ones).
    """

    run_id: str
    status: TerminalStatus
    final_step: int
    result: bytes | None = None
    error: str | None = None
    headers: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        validate_run_id(self.run_id)
        if not isinstance(self.status, TerminalStatus):
            raise InvalidArgument(
                f"RunOutcome.status must be a TerminalStatus, got {self.status!r}"
            )
        _step("RunOutcome.final_step", self.final_step)
        if self.result is not None:
            object.__setattr__(self, "result", check_bytes("RunOutcome.result", self.result))
        check_optional_str("RunOutcome.error", self.error)
        object.__setattr__(self, "headers", check_headers("RunOutcome.headers", self.headers))


@dataclass(frozen=True, slots=True)
class RunEnd:
    """What waiting for a run reports: its termination and, when the worker
    that terminated it recorded one, its committed outcome."""

    termination: RunTermination
    outcome: RunOutcome | None = None


# ------------------------------------------------------------------- status


class RunState:
    """Where a run is: `Pending`, `Running`, `Cancelling` or `Terminated`."""

    __slots__ = ()


@dataclass(frozen=True, slots=True)
class Pending(RunState):
    """The current step waits in the queue (pending or scheduled)."""


@dataclass(frozen=True, slots=True)
class Running(RunState):
    """A worker has claimed the current step."""


@dataclass(frozen=True, slots=True)
class Cancelling(RunState):
    """A cancellation was requested; the run has not terminated yet."""


@dataclass(frozen=True, slots=True)
class Terminated(RunState):
    """The run terminated; ``termination`` says how."""

    termination: RunTermination

    def __post_init__(self) -> None:
        if not isinstance(self.termination, RunTermination):
            raise InvalidArgument(
                f"Terminated.termination must be a RunTermination, got {self.termination!r}"
            )


@dataclass(frozen=True, slots=True)
class RunStatus:
    """A run's state and current step (its final step once terminated)."""

    run_id: str
    state: RunState
    current_step: int

    def __post_init__(self) -> None:
        validate_run_id(self.run_id)
        if not isinstance(self.state, RunState) or type(self.state) is RunState:
            raise InvalidArgument(
                f"RunStatus.state must be Pending, Running, Cancelling or Terminated, "
                f"got {self.state!r}"
            )
        _step("RunStatus.current_step", self.current_step)
