"""Enqueue operations: one job (with optional effects) or a batch, committed durably."""

from __future__ import annotations

from collections.abc import Sequence

from durable.errors import InvalidOption
from durable.store.queue.apply import run_txn
from durable.store.queue.core import Core
from durable.store.queue.effects import EnqueueResult, SettlementEffects
from durable.store.queue.enqueue import (
    PreparedEffects,
    prepare,
    prepare_effects,
    prepare_many,
    stage,
    stage_effects,
)
from durable.store.queue.options import EnqueueOptions, validate_queue_name
from durable.store.queue.txn import Txn

__all__ = ["Producer"]


class Producer:
    """Enqueues for one open queue."""

    def __init__(self, core: Core) -> None:
        self.core = core

    async def enqueue_with_effects(
        self,
        queue: str,
        payload: bytes,
        options: EnqueueOptions | None = None,
        effects: SettlementEffects | None = None,
    ) -> EnqueueResult:
        """Enqueue one job; apply ``effects`` with it unless the dedup key hits.

        A dedup hit writes nothing (no effects either) and returns
        `AlreadyEnqueued`; a reused ``id_override`` raises `DuplicateJobId`
        and writes nothing.
        """
        core = self.core
        validate_queue_name(queue)
        if options is None:
            options = EnqueueOptions()
        elif not isinstance(options, EnqueueOptions):
            raise InvalidOption(f"options must be EnqueueOptions, got {options!r}")
        if effects is not None:
            effects.validate()  # before any object is written
        job = await prepare(core, queue, payload, options)
        try:
            fx = await prepare_effects(core, effects)
        except BaseException:
            await core.delete_blobs([b for b in [job.blob] if b is not None])
            raise
        both = PreparedEffects(fx.effects, [job, *fx.jobs])

        def body(txn: Txn) -> tuple[EnqueueResult, list[EnqueueResult] | None]:
            result = stage(txn, job)
            if not result.is_new:
                return result, None  # nothing staged: effects discarded
            return result, [result, *stage_effects(txn, fx)]

        return await run_txn(core, both, body)

    async def enqueue_batch(self, queue: str, payloads: Sequence[bytes]) -> list[str]:
        """Enqueue ``payloads`` with the queue's defaults in one transaction; their ids."""
        core = self.core
        validate_queue_name(queue)
        if isinstance(payloads, bytes | str):
            raise InvalidOption("payloads must be a sequence of bytes, not one bytes/str value")
        payloads = list(payloads)
        if not payloads:
            return []
        opts = EnqueueOptions()
        jobs = await prepare_many(core, [(queue, p, opts) for p in payloads])
        fx = PreparedEffects(SettlementEffects(), jobs)

        def body(txn: Txn) -> tuple[list[str], list[EnqueueResult] | None]:
            results = [stage(txn, job) for job in jobs]
            return [r.id for r in results], results

        return await run_txn(core, fx, body)
