"""Status and outcome of runs, readable from any process.

`WorkflowView` reads the run record, the step pointer and the step's queue
job (or, once terminated, the terminal record), and the run result record
from the run memo. It needs only a `QueueView` (a live `Queue`'s or a
`QueueReader`'s, in another process) and the `MemoStore`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from durable.engine import keys
from durable.engine.memo import MemoStore
from durable.engine.records import (
    RunRecord,
    StepPointer,
    TerminalRecord,
    decode_run_record,
    decode_run_result,
    decode_step_pointer,
    decode_terminal_record,
)
from durable.engine.runs import (
    Cancelling,
    Pending,
    Running,
    RunOutcome,
    RunState,
    RunStatus,
    Terminated,
    validate_run_id,
)
from durable.errors import InconsistentRunState
from durable.store.queue import JobStatus, QueueView

__all__ = ["WorkflowView"]

#: Decoded run records kept (by their bytes): a run's record is read once per
#: step but changes only on submit and cancel.
_RECORD_CACHE = 1024

_R = TypeVar("_R")


class WorkflowView:
    """Read-only access to runs: `status` and `outcome`."""

    def __init__(self, queue: QueueView, memos: MemoStore) -> None:
        self.queue = queue
        self.memos = memos
        #: Decoded records by their stored bytes (they are immutable).
        self._records: dict[bytes, RunRecord] = {}
        self._terminals: dict[bytes, TerminalRecord] = {}

    def _kv(self, key: bytes) -> bytes | None:
        return self.queue.kv_get(key)

    def run_record(self, run_id: str) -> RunRecord | None:
        """The record of an active run, or None."""
        raw = self._kv(keys.run_key(run_id))
        if raw is None:
            return None
        return _cached(
            self._records, raw, lambda: decode_run_record(raw, f"run record of {run_id!r}")
        )

    def pointer(self, run_id: str) -> StepPointer | None:
        """The current-step pointer of an active run, or None."""
        raw = self._kv(keys.pointer_key(run_id))
        return None if raw is None else decode_step_pointer(raw, f"step pointer of {run_id!r}")

    def terminal_record(self, run_id: str) -> TerminalRecord | None:
        """The terminal record of a terminated run, or None."""
        raw = self._kv(keys.outcome_key(run_id))
        if raw is None:
            return None
        return _cached(
            self._terminals,
            raw,
            lambda: decode_terminal_record(raw, f"terminal record of {run_id!r}"),
        )

    def status(self, run_id: str) -> RunStatus | None:
        """Where run ``run_id`` is; None if no such run is known."""
        validate_run_id(run_id)
        record = self.run_record(run_id)
        if record is not None:
            pointer = self.pointer(run_id)
            if pointer is None:
                raise InconsistentRunState(run_id, 0, "run record without a step pointer")
            state: RunState
            if record.cancel_requested:
                state = Cancelling()
            else:
                claimed = self.queue.job_status(pointer.job_id) is JobStatus.CLAIMED
                state = Running() if claimed else Pending()
            return RunStatus(run_id, state, pointer.step_number)
        terminal = self.terminal_record(run_id)
        if terminal is None:
            return None
        t = terminal.termination
        return RunStatus(run_id, Terminated(t), t.final_step)

    async def outcome(self, run_id: str) -> RunOutcome | None:
        """The committed outcome of a terminated run; None while it is active,
        or when no worker recorded one (e.g. a pending step was cancelled)."""
        validate_run_id(run_id)
        if self.run_record(run_id) is not None:
            return None
        terminal = self.terminal_record(run_id)
        if terminal is None:
            return None
        if terminal.outcome is not None:  # small outcomes ride the terminal record
            return terminal.outcome
        raw = await self.memos.get_outcome(run_id)
        if not isinstance(raw, bytes):
            return None
        try:
            result = decode_run_result(raw, f"run result record of {run_id!r}")
        except Exception:  # absence means "no record": treat undecodable the same
            return None
        # A record from an earlier run with the same id, or from a settlement
        # that did not commit, belongs to another termination.
        return result.outcome if result.termination == terminal.termination else None


def _cached(cache: dict[bytes, _R], raw: bytes, decode: Callable[[], _R]) -> _R:
    """``cache[raw]``, decoded first if absent (the cache is emptied once it
    holds `_RECORD_CACHE` records)."""
    record = cache.get(raw)
    if record is None:
        record = decode()
        if len(cache) >= _RECORD_CACHE:
            cache.clear()
        cache[raw] = record
    return record
