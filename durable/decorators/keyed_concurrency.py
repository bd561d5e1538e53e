"""Concurrency per key: ``@workflow(concurrency_per_key=n)`` with
``.options(concurrency_key=...)``.

At most ``n`` runs of one workflow with one concurrency key are *active* at
once: a run is active from the first delivery that takes a slot until it
terminates, waits included (a run that sleeps or waits for a signal keeps
its slot, as DBOS counts a dequeued workflow until it completes). Runs of
other keys, and runs without a key, are not held back: one tenant cannot
starve the others. ``n = 1`` makes a singleton per key.

The state lives on the store, in the internal KV of the partition that
holds the runs, and only the store's owner changes it:

- a *holder* record per active run (`HOLD`), written by the delivery that
  takes the slot, before the workflow runs;
- a *waiter* record per run that found the key saturated (`WAIT`, ordered
  by when it first waited). Such a run's delivery ends without running the
  workflow and the run waits durably on a signal key of its own
  (`slot_key`), at most `RECHECK` seconds (then it looks again);
- when a holder terminates, the terminal hook (`release`) deletes its
  record and signals the oldest waiters, one per free slot; a signal sent
  before the waiter waits is buffered, so none is lost.

Slots are granted first come, first served: with waiters, a free slot goes
to the oldest of them, not to a run that arrives later. A holder or waiter
record whose run has terminated or is gone (a crash between the run's end
and its release, a forgotten run) counts for nothing and is removed by the
next delivery that looks. Check-and-take is one critical section per key
in the owning process (an asyncio lock around the scan and the commit).

Partitioned stores: the records are per partition. A run started with a
concurrency key and no ``run_id`` gets an id minted into the key's
partition (`durable.cluster.manifest.co_located_id` of the key), so all
runs of one key share one partition and the limit holds across the store.
A run started with an explicit ``run_id`` lives where its id routes; the
limit then holds per partition (keep explicit ids and concurrency keys
apart on a partitioned store, or accept up to ``n`` per partition).
"""

from __future__ import annotations

import asyncio
import hashlib
import weakref
from collections.abc import Mapping
from typing import TYPE_CHECKING

from durable.cluster.manifest import co_located_id, partition_of
from durable.decorators.run_limits import limits_of
from durable.decorators.run_timeout import Deadline, clamp
from durable.engine.outcomes import Continue, OnSignal
from durable.engine.runs import MAX_RUN_ID_LEN, RESERVED_KV_PREFIX, Terminated
from durable.store.log.batch import WriteBatch

if TYPE_CHECKING:
    from durable.decorators.base import EngineBase
    from durable.engine.delivery import Step
    from durable.store.kv import KvNamespace

__all__ = [
    "HEADER_CONCURRENCY_KEY",
    "HEADER_CONCURRENCY_WORKFLOW",
    "RECHECK",
    "acquire",
    "co_locate",
    "key_headers",
    "release",
    "slot_key",
]

#: Header of a run started with a concurrency key: the key.
HEADER_CONCURRENCY_KEY = "durable.concurrency_key"
#: Header of a run started with a concurrency key: its workflow's name.
HEADER_CONCURRENCY_WORKFLOW = "durable.concurrency_workflow"
#: A waiting run looks again after this many seconds even without a signal.
RECHECK = 60.0
_PREFIX = RESERVED_KV_PREFIX + b"keyed/"
HOLD = b"h/"
WAIT = b"w/"
_LOCKS: weakref.WeakKeyDictionary[object, dict[bytes, asyncio.Lock]] = weakref.WeakKeyDictionary()


def _group(workflow: str, key: str) -> bytes:
    """The KV prefix of one workflow's key."""
    digest = hashlib.sha256(f"{workflow}\x00{key}".encode()).hexdigest()[:40]
    return _PREFIX + digest.encode() + b"/"


def slot_key(run_id: str) -> str:
    """The signal key a run waiting for a slot waits on."""
    return f"durable.slot:{run_id}"


def co_locate(engine: EngineBase, workflow: str, key: str) -> str | None:
    """A new run id in the partition of ``workflow``'s ``key`` (None on an
    unpartitioned store: any id will do)."""
    partitions = engine.partition_count
    if partitions is None:
        return None
    home = partition_of(f"durable.keyed:{workflow}:{key}", partitions)
    return co_located_id(engine.new_run_id(), home, partitions, max_len=MAX_RUN_ID_LEN)


def _lock(owner: object, group: bytes) -> asyncio.Lock:
    """The lock of ``group`` in the store of queue ``owner``."""
    locks = _LOCKS.setdefault(owner, {})
    lock = locks.get(group)
    if lock is None:
        lock = locks[group] = asyncio.Lock()
    return lock


def _live(engine: EngineBase, run_id: str) -> bool:
    """Whether run ``run_id`` exists and has not terminated."""
    status = engine.workflows.default.status(run_id)
    return status is not None and not isinstance(status.state, Terminated)


def _scan(
    engine: EngineBase, kv: KvNamespace, prefix: bytes, batch: WriteBatch
) -> list[tuple[bytes, str]]:
    """The records under ``prefix`` of live runs, in key order; the others'
    deletes staged in ``batch``."""
    live: list[tuple[bytes, str]] = []
    for k, _ in kv.snapshot(prefix):
        run_id = k.rsplit(b"/", 1)[1].decode()
        if _live(engine, run_id):
            live.append((k, run_id))
        else:
            kv.stage_delete(batch, k)
    return live


async def acquire(
    engine: EngineBase, step: Step, workflow: str, limit: int, deadline: Deadline | None
) -> Continue | None:
    """Take a slot of the key of ``step``'s run (its header) for it: None when
    it holds one (now or already) and may run; else the outcome that ends
    its delivery: wait for a slot (at most `RECHECK` seconds, and not past
    its ``deadline``)."""
    key = step.headers.get(HEADER_CONCURRENCY_KEY)
    if key is None:
        return None
    kv = engine.queue.kv.internal()
    group = _group(workflow, key)
    run_id = step.run_id
    mine = group + HOLD + run_id.encode()
    if kv.get(mine) is not None:
        return None
    async with _lock(engine.queue, group):
        batch = WriteBatch()
        holders = _scan(engine, kv, group + HOLD, batch)
        waiters = _scan(engine, kv, group + WAIT, batch)
        queued = [rid for _, rid in waiters]
        place = queued.index(run_id) if run_id in queued else len(queued)
        if len(holders) + place < limit:
            kv.stage_put(batch, mine, b"")
            for k, rid in waiters:
                if rid == run_id:
                    kv.stage_delete(batch, k)
            await kv.commit(batch)
            return None
        if run_id not in queued:
            at = engine.clock.now_ms()
            kv.stage_put(batch, group + WAIT + b"%016d/" % at + run_id.encode(), b"")
        if len(batch):
            await kv.commit(batch)
    outcome = Continue(step.payload, OnSignal(slot_key(run_id), RECHECK))
    return clamp(outcome, deadline, engine.clock.now_ms()) if deadline is not None else outcome


def key_headers(workflow: str, key: str) -> dict[str, str]:
    """The headers of a run of ``workflow`` started with concurrency key ``key``."""
    return {HEADER_CONCURRENCY_KEY: key, HEADER_CONCURRENCY_WORKFLOW: workflow}


async def release(engine: EngineBase, run_id: str, headers: Mapping[str, str]) -> None:
    """Run ``run_id`` (with ``headers``) terminated: free its slot (or its
    place in line) and signal the oldest waiters, one per free slot (the
    limit its workflow has in this process; one, if this process does not
    know it). Idempotent."""
    key = headers.get(HEADER_CONCURRENCY_KEY)
    workflow = headers.get(HEADER_CONCURRENCY_WORKFLOW)
    if key is None or workflow is None:
        return
    limit = limits_of(workflow).concurrency_per_key or 1
    kv = engine.queue.kv.internal()
    group = _group(workflow, key)
    async with _lock(engine.queue, group):
        batch = WriteBatch()
        kv.stage_delete(batch, group + HOLD + run_id.encode())
        holders = _scan(engine, kv, group + HOLD, batch)
        waiters = _scan(engine, kv, group + WAIT, batch)
        await kv.commit(batch)
    free = max(limit - len([h for h in holders if h[1] != run_id]), 0)
    runtime = engine.workflows.default
    for _, waiter in [w for w in waiters if w[1] != run_id][:free]:
        await runtime.signal(slot_key(waiter), b"slot")
