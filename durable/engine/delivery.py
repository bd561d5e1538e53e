"""What a step runner sees: the `Step` (one delivery of one step of a run).

`Step` carries the run id, step number, payload, the submitter's headers,
the queue job id, the attempt count and limit, and the delivery's handles:
the cancellation token, the lease, the per-step and run-scoped memos, the
staged KV effects and a read-only view of committed KV. `Step.detached`
builds one bound to no queue, for unit-testing a runner.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from durable.engine.effects import EffectsHandle
from durable.engine.memo import Memo, MemoStore
from durable.engine.outcomes import StepOutcome
from durable.store.objects.memory import MemoryObjectStore
from durable.store.queue import CancelToken, LeaseHandle

__all__ = ["Delivery", "KvReadHandle", "Step", "StepRunner"]


class KvReadHandle:
    """Reads of committed application KV (a step's own staged effects excluded)."""

    __slots__ = ("_get",)

    def __init__(self, get: Callable[[bytes], bytes | None]) -> None:
        self._get = get

    def get(self, key: bytes | str) -> bytes | None:
        """The committed value of ``key``, or None."""
        return self._get(key.encode() if isinstance(key, str) else key)


@dataclass(eq=False)
class Step:
    """One delivery of one step of a run."""

    run_id: str
    step_number: int
    payload: bytes
    #: The submitter's headers (reserved ``workflow.*`` ones stripped).
    headers: Mapping[str, str]
    job_id: str
    #: Claims of this step so far, this one included.
    attempts: int
    max_attempts: int
    #: Fired when the run is cancelled from outside (`WorkflowRuntime.cancel`,
    #: the queue's cancel). A child of the claim's token: the runner may fire
    #: it to stop its own work, which cancels neither the run nor the lease.
    cancel_token: CancelToken
    lease: LeaseHandle
    memo: Memo
    run_memo: Memo
    effects: EffectsHandle = field(default_factory=EffectsHandle)
    kv: KvReadHandle = field(default_factory=lambda: KvReadHandle(lambda _key: None))
    #: The signal that resumed this step (None: none, or the wait timed out).
    signal: bytes | None = None
    #: The first claim of a job this process made pending (`Claim.fresh`):
    #: the claim may ride a later flush.
    fresh: bool = False

    def is_last_attempt(self) -> bool:
        """True when a transient error from this attempt dead-letters the step."""
        return self.attempts >= max(self.max_attempts, 1)

    @classmethod
    def detached(
        cls,
        payload: bytes = b"",
        *,
        run_id: str = "detached-run",
        step_number: int = 0,
        headers: Mapping[str, str] | None = None,
        attempts: int = 1,
        max_attempts: int = 3,
        signal: bytes | None = None,
        memos: MemoStore | None = None,
    ) -> Step:
        """A step bound to no queue: a fresh memory memo store, a lease that
        extends without effect, a token nobody fires."""
        memos = memos or MemoStore(MemoryObjectStore(), "detached-memo")
        lease = LeaseHandle.detached()
        return cls(
            run_id=run_id,
            step_number=step_number,
            payload=payload,
            headers=dict(headers or {}),
            job_id="detached-job",
            attempts=attempts,
            max_attempts=max_attempts,
            cancel_token=lease.cancel_token.child(),
            lease=lease,
            memo=memos.step_memo(run_id, step_number),
            run_memo=memos.run_memo(run_id),
            signal=signal,
        )


#: The seed's name for what a step sees; in Python the `Step` is the delivery.
Delivery = Step


@runtime_checkable
class StepRunner(Protocol):
    """Runs one step: bytes in (``step.payload``), an outcome out.

    Return a `StepOutcome` (Continue, Succeed, Fail, Cancel) or raise a
    `StepError` (transient: retried with backoff; permanent: dead-lettered).
    Any other exception counts as a transient `StepError`.
    """

    async def run_step(self, step: Step) -> StepOutcome:
        """Run ``step``."""
        ...
