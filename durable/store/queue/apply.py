"""Run one awaited transaction that may carry a `SettlementEffects` set.

The body stages writes synchronously and says whether the effects were
applied. Objects of follow-ups that did not commit (discarded effects,
downgraded dedup hits, a failed body) are deleted afterwards.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from durable.store.idle import loop_idle
from durable.store.queue.core import Core
from durable.store.queue.effects import EnqueueResult
from durable.store.queue.enqueue import PreparedEffects
from durable.store.queue.txn import Txn

__all__ = ["run_txn"]

T = TypeVar("T")

#: What a body returns: its value, and the effects' results (None: discarded).
Body = Callable[[Txn], tuple[T, list[EnqueueResult] | None]]


async def run_txn(core: Core, fx: PreparedEffects | None, body: Body[T]) -> T:
    """Stage ``body`` and commit it (one critical section), then await durability."""
    try:
        core.check_open()
        # No task ready (`loop_idle`): none could join this commit's group,
        # which is then flushed here, with no switch to the flusher.
        idle = loop_idle()
        txn = core.txn()
        value, results = body(txn)
        durable = txn.commit(core.writer, lazy=idle)
    except BaseException:
        if fx is not None:
            await core.delete_blobs(fx.blobs())
        raise
    if durable is not None and idle:
        writer = core.writer
        if not durable.done() and not writer.flush_inline(durable, was_idle=True):
            writer.flush_within(0)  # the flusher makes it, as for any commit
    if fx is not None and results is None:
        await core.delete_blobs(fx.blobs())
    if durable is not None:
        await durable
    txn.settle_durable()
    if fx is not None and results is not None:
        await core.delete_blobs(fx.blobs(results))
    return value
