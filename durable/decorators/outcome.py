"""How a workflow run's end is stored and read back as a value or an exception.

A run that returns succeeds with its result encoded by the codec. A run
that raises fails with a `durable.engine.Fail` whose reason is readable
text, ``"TypeName: message"``, followed by the encoded exception
(`Codec.dumps_error`) in base64 after the line `FAILURE_MARKER`, so
``handle.result()`` raises the workflow's own exception type again when it
can be rebuilt (`WorkflowFailed` with its type and message when it cannot).
A failure the engine recorded without it (a delivery dead-lettered by an
infrastructure error) reads as `WorkflowFailed`; a cancelled run as
`RunCancelled`.
"""

from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass
from typing import Any

from durable.decorators.codec import Codec
from durable.decorators.run_timeout import cancelled_error
from durable.engine.runs import RunEnd, TerminalStatus
from durable.engine.runtime import WorkflowRuntime
from durable.errors import WorkflowFailed

__all__ = [
    "FAILURE_MARKER",
    "RunResult",
    "encode_failure",
    "failure_text",
    "read_result",
]

#: Separates the readable text of a failure reason from the encoded exception.
FAILURE_MARKER = "\n--durable-error:"
_MAX_TEXT = 2000
_MAX_ENCODED = 160 * 1024


def encode_failure(codec: Codec, run_id: str, error: BaseException) -> str:
    """The `Fail` reason of run ``run_id`` ended by ``error``."""
    text = f"{type(error).__name__}: {error}" if str(error) else type(error).__name__
    if len(text) > _MAX_TEXT:
        text = text[: _MAX_TEXT - 3] + "..."
    try:
        data = codec.dumps_error(error, what=f"the exception of run {run_id!r}")
    except Exception:  # the text alone still tells what happened
        return text
    encoded = base64.b64encode(data).decode("ascii")
    if len(encoded) > _MAX_ENCODED:
        return text
    return text + FAILURE_MARKER + encoded


@dataclass(frozen=True, slots=True)
class RunResult:
    """How a terminated run ended: ``ok`` (its encoded result), or ``err``
    (its encoded exception), or cancelled with ``reason``."""

    run_id: str
    status: TerminalStatus
    ok: bytes | None = None
    err: bytes | None = None
    reason: str | None = None

    def value(self, codec: Codec) -> Any:
        """The run's result, or raise its exception (`RunCancelled` if cancelled,
        `RunTimedOut` if its timeout cancelled it)."""
        if self.status is TerminalStatus.SUCCEEDED:
            return codec.loads(self.ok or b"", what=f"the result of run {self.run_id!r}")
        if self.status is TerminalStatus.CANCELLED:
            raise cancelled_error(self.run_id, self.reason)
        raise codec.loads_error(self.err or b"", what=f"the exception of run {self.run_id!r}")


def failure_text(reason: str | None) -> tuple[str, str]:
    """The type name and message of the exception a failed run's reason
    names (its readable text, without decoding anything); ``"Error"`` and
    the whole text for a reason that names no type (an engine failure)."""
    text = reason or "the run failed"
    head, marker, _ = text.rpartition(FAILURE_MARKER)
    if marker:
        text = head
    type_name, sep, message = text.partition(": ")
    if not sep or " " in type_name:
        return "Error", text
    return type_name, message


def _failure_bytes(codec: Codec, run_id: str, reason: str | None) -> bytes:
    """The encoded exception of a failed run, from its reason."""
    text = reason or "the run failed"
    if FAILURE_MARKER in text:
        encoded = text.rpartition(FAILURE_MARKER)[2]
        try:
            return base64.b64decode(encoded.encode("ascii"), validate=True)
        except (binascii.Error, UnicodeEncodeError):
            pass  # not ours after all: the text alone
    type_name, message = failure_text(reason)
    failed = WorkflowFailed(run_id, type_name, message)
    return codec.dumps_error(failed, what=f"the exception of run {run_id!r}")


async def read_result(
    codec: Codec, runtime: WorkflowRuntime, end: RunEnd, run_id: str
) -> RunResult:
    """The `RunResult` of a run that ended with ``end``."""
    status = end.termination.status
    if status is TerminalStatus.SUCCEEDED:
        outcome = end.outcome if end.outcome is not None else await runtime.outcome(run_id)
        if outcome is None or outcome.result is None:
            err = codec.dumps_error(
                WorkflowFailed(run_id, "ResultMissing", "the run succeeded but its result is gone"),
                what=f"the exception of run {run_id!r}",
            )
            return RunResult(run_id, TerminalStatus.FAILED, err=err)
        return RunResult(run_id, status, ok=outcome.result)
    reason = end.termination.error
    if end.outcome is not None and end.outcome.error is not None:
        reason = end.outcome.error
    if status is TerminalStatus.CANCELLED:
        return RunResult(run_id, status, reason=reason)
    return RunResult(run_id, status, err=_failure_bytes(codec, run_id, reason))
