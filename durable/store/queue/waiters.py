"""Per-job completion waiters (semantics 1.19, latest form).

A waiter registers its job id *before* reading the job's state; every
terminal transition hands the outcome it wrote to that job's waiters after
its commit (building the outcome only if someone waits). An outcome
delivered after registration beats a `NotFound` read. When the writer
stops (fenced, failed, closed), every waiter fails with its error.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from dataclasses import dataclass

from durable.store.queue.records import JobRecord

__all__ = [
    "Cancelled",
    "Completion",
    "CompletionWaiters",
    "Dead",
    "Done",
    "NotFound",
    "TimedOut",
]


class Completion:
    """How `Queue.wait_for_completion` ended: one of the subclasses below."""

    __slots__ = ()


@dataclass(frozen=True, slots=True)
class Done(Completion):
    """The job was acked; ``record`` has its payload inline, kept or not."""

    record: JobRecord


@dataclass(frozen=True, slots=True)
class Dead(Completion):
    """The job is dead-lettered."""

    record: JobRecord


@dataclass(frozen=True, slots=True)
class Cancelled(Completion):
    """The job was cancelled while pending or scheduled (removed)."""


@dataclass(frozen=True, slots=True)
class TimedOut(Completion):
    """The job had not finished when the wait's timeout passed."""


@dataclass(frozen=True, slots=True)
class NotFound(Completion):
    """No such job when the wait began."""


class CompletionWaiters:
    """Futures of the tasks waiting for each job's terminal transition."""

    def __init__(self) -> None:
        self._by_id: dict[str, list[asyncio.Future[Completion]]] = {}

    def register(self, id: str) -> asyncio.Future[Completion]:
        """A future resolved with the job's outcome; `withdraw` it when done."""
        fut: asyncio.Future[Completion] = asyncio.get_running_loop().create_future()
        self._by_id.setdefault(id, []).append(fut)
        return fut

    def withdraw(self, id: str, fut: asyncio.Future[Completion]) -> None:
        """Stop waiting (idempotent)."""
        futs = self._by_id.get(id)
        if futs is None:
            return
        with contextlib.suppress(ValueError):
            futs.remove(fut)
        if not futs:
            del self._by_id[id]
        if not fut.done():
            fut.cancel()

    def waiting(self, id: str) -> bool:
        """True if someone waits for job ``id``."""
        return id in self._by_id

    def fail_all(self, error: BaseException) -> None:
        """Fail every waiter with ``error`` (the writer has stopped)."""
        by_id, self._by_id = self._by_id, {}
        for futs in by_id.values():
            for fut in futs:
                if not fut.done():
                    fut.set_exception(error)

    def deliver(self, id: str, outcome: Callable[[], Completion]) -> None:
        """Hand the outcome (built only if needed) to every waiter of ``id``."""
        futs = self._by_id.pop(id, None)
        if not futs:
            return
        value = outcome()
        for fut in futs:
            if not fut.done():
                fut.set_result(value)
