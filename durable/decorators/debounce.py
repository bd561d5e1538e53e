"""Debounced starts: ``wf.options(debounce=seconds, key=...).start(...)``.

Starts of one workflow with one ``key`` (None: one key for the workflow)
collapse while they come less than ``debounce`` seconds apart, as DBOS's
debouncer does:

- the first start submits a run that begins ``debounce`` seconds later
  (its ``run_at``) and returns its handle;
- a start while that run has not begun returns a handle on *the same run*,
  replaces its arguments with its own (the last start's arguments win) and
  moves its beginning to ``debounce`` seconds after itself (each start's
  own ``debounce``: the last one's applies);
- once the run has begun (its first delivery found its time passed and
  took its arguments), the next start with the key submits a new run.

So the run begins ``debounce`` seconds (of the engine's clock) after the
last start of a burst, with that start's arguments, and a steady stream of
starts closer together than ``debounce`` keeps postponing it.

Records (under ``workflow/``): ``debounce/{workflow}/{key}`` names the run
that has not begun; ``debounce-run/{run_id}`` holds that run's key, its
time to begin and whether it began, and goes with the run's other records
(`durable.decorators.archive`). The run's arguments are its invocation
record (`durable.decorators.archive.invocation_record`), which a
debounced start rewrites, and which the run's first delivery reads instead
of its job's payload. Starting the run and beginning it are decided on the
run's record with a compare-and-commit, so a start never changes the
arguments of a run that has begun.

A debounced start writes those records itself: it needs an engine that
owns the store (on a partitioned store, the key's home partition, the
partition of ``"debounce/{workflow}/{key}"``, where its runs live); a
client gets `InvalidArgument`. ``debounce`` cannot be combined with
``run_id``, ``run_at`` or ``dedup_key``.
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import msgpack

from durable.decorators.archive import invocation_record, load_invocation
from durable.decorators.debounce_keys import debounce_key, debounce_run_key
from durable.decorators.progress import DEFERRED
from durable.decorators.submit import submit_run
from durable.engine.outcomes import StepError
from durable.errors import CorruptEngineRecord, InvalidArgument
from durable.store.queue import SettlementEffects

if TYPE_CHECKING:
    from durable.decorators.base import EngineBase
    from durable.decorators.registry import WorkflowDefinition
    from durable.engine.delivery import Step

__all__ = ["DebounceRecord", "begin", "check_debounce", "debounced_start"]

_VERSION = 1
_locks: weakref.WeakValueDictionary[tuple[int, bytes], asyncio.Lock] = weakref.WeakValueDictionary()


@dataclass(frozen=True, slots=True)
class DebounceRecord:
    """A debounced run's record: its ``key``, when it begins, whether it began."""

    key: str
    begin_at_ms: int
    begun: bool = False


def check_debounce(seconds: object, key: object, workflow: str) -> float:
    """``seconds`` if it is a usable debounce (and ``key`` a str or None);
    `InvalidArgument` naming ``workflow``."""
    if isinstance(seconds, bool) or not isinstance(seconds, int | float) or not seconds > 0:
        raise InvalidArgument(
            f"workflow {workflow!r}: debounce must be a number of seconds > 0, got {seconds!r:.80}"
        )
    if key is not None and (not isinstance(key, str) or len(key) > 256):
        raise InvalidArgument(
            f"workflow {workflow!r}: a debounce key must be a str of at most 256 characters, "
            f"got {key!r:.80}"
        )
    return float(seconds)


def _encode(record: DebounceRecord) -> bytes:
    return msgpack.packb([_VERSION, record.key, record.begin_at_ms, record.begun])


def _decode(data: bytes) -> DebounceRecord:
    try:
        version, key, at, begun = msgpack.unpackb(data)
        ok = version == _VERSION and isinstance(key, str) and isinstance(at, int)
    except Exception as e:  # msgpack raises several unrelated types; a bad shape too
        raise CorruptEngineRecord("debounce record", f"{type(e).__name__}: {e}") from e
    if not ok or not isinstance(begun, bool):
        raise CorruptEngineRecord("debounce record", f"bad record {data[:80]!r}")
    return DebounceRecord(key, at, begun)


async def debounced_start(
    engine: EngineBase,
    definition: WorkflowDefinition,
    payload: bytes,
    seconds: float,
    key: str | None,
    *,
    priority: int | None,
    headers: Mapping[str, str],
    attributes: Mapping[str, str],
) -> str:
    """Start (or postpone and re-argue) the debounced run of ``key``; its
    run id. See the module docstring."""
    key = key or ""
    home = f"debounce/{definition.name}/{key}"
    part = engine.for_run(home)
    if not part.mode.owner:
        raise InvalidArgument(
            f"workflow {definition.name!r}: a debounced start needs an engine that owns the "
            "store (the key's partition); start it from the owner, or without debounce"
        )
    queue = part.queue
    kkey = debounce_key(definition.name, key)
    lock_id = (id(queue), kkey)
    lock = _locks.get(lock_id)
    if lock is None:
        lock = _locks[lock_id] = asyncio.Lock()
    async with lock:
        while True:
            begin_at = engine.clock.now_ms() + round(seconds * 1000)
            held = queue.kv.get(kkey)
            if held is None:
                break
            run_id = held.decode()
            rkey = debounce_run_key(run_id)
            raw = queue.kv.get(rkey)
            if raw is None or _decode(raw).begun:
                break
            fx = SettlementEffects()
            fx.kv_put(rkey, _encode(DebounceRecord(key, begin_at, False)))
            runtime = part.workflows.runtime_for(definition.queue)
            for k, v in (await invocation_record(runtime.memos, run_id, payload)).items():
                fx.kv_put(k, v)
            if await queue.kv_compare_commit(rkey, raw, fx) is not None:
                return run_id
            # it began meanwhile: look again
        run_id = engine.co_located(engine.new_run_id(), home)
        records = {
            kkey: run_id.encode(),
            debounce_run_key(run_id): _encode(DebounceRecord(key, begin_at)),
        }
        return await submit_run(
            engine,
            definition,
            payload,
            run_id=run_id,
            priority=priority,
            headers=headers,
            run_at=begin_at,
            records=records,
            attributes=attributes,
        )


async def begin(engine: EngineBase, step: Step, workflow: str) -> Step:
    """``step`` as the run begins it: a step-0 delivery of a debounced run
    that has not begun waits until its time (a `StepError` deferral), then
    begins (recorded before this returns) with the arguments of the last
    start; a delivery of any other run is returned as it is."""
    if step.step_number != 0:
        return step
    queue = engine.queue
    rkey = debounce_run_key(step.run_id)
    while True:
        raw = queue.kv.get(rkey)
        if raw is None:
            return step
        record = _decode(raw)
        if not record.begun:
            now = engine.clock.now_ms()
            if now < record.begin_at_ms:
                raise StepError.transient(
                    f"{DEFERRED} debounced run {step.run_id!r} begins in "
                    f"{(record.begin_at_ms - now) / 1000:g} s",
                    retry_after=(record.begin_at_ms - now) / 1000,
                )
            fx = SettlementEffects()
            fx.kv_put(rkey, _encode(replace(record, begun=True)))
            fx.kv_delete(debounce_key(workflow, record.key))
            if await queue.kv_compare_commit(rkey, raw, fx) is None:
                continue  # a start postponed it meanwhile: look again
        payload = await load_invocation(engine, step.run_id)
        return step if payload is None else replace(step, payload=payload)
