"""Rebuild a store's state: the newest checkpoint, then the log after it.

Shared by the writer (at open) and by read-only readers (at open and on
refresh). Every list and get retries transient errors within a window
(`durable.store.log.retry`), so one 503 does not fail an open. Objects
deleted under a loader by a concurrent checkpoint are tolerated by listing
again; a log object missing from the middle of the live log is reported as
corruption, never skipped.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from durable.errors import CorruptObject, ObjectNotFound
from durable.store.log.format import (
    CKPT_PREFIX,
    LOG_PREFIX,
    LogObject,
    ckpt_name,
    decode_checkpoint,
    decode_log,
    log_name,
    newer_epoch,
    parse_seq,
)
from durable.store.log.retry import DEFAULT_RETRY_SECONDS, retry_transient
from durable.store.log.state import State
from durable.store.objects.base import ObjectStore

__all__ = ["Loaded", "consecutive_after", "fetch_logs", "get_object", "list_seqs", "load"]

_ATTEMPTS = 8
_FETCH_CONCURRENCY = 32


@dataclass(slots=True)
class Loaded:
    """What `load` rebuilt."""

    state: State
    #: The last log sequence number applied (the checkpoint's if no log follows).
    seq: int
    #: The checkpoint the state started from (0: none).
    ckpt_seq: int
    #: Sequence numbers of writer-open markers (kept when the log is trimmed).
    markers: list[int] = field(default_factory=list)
    #: True when the store held no objects at all.
    empty: bool = False
    #: The newest epoch of the open markers (the checkpoint's, then the
    #: log's after it); None when no writer opened at an epoch.
    epoch: int | None = None


async def list_seqs(
    objects: ObjectStore, prefix: str, retry_seconds: float = DEFAULT_RETRY_SECONDS
) -> list[int]:
    """Sorted sequence numbers of the objects under ``prefix``."""
    names = await retry_transient(lambda: objects.list(prefix), prefix, retry_seconds)
    seqs = (parse_seq(n, prefix) for n in names)
    return sorted(s for s in seqs if s is not None)


async def get_object(
    objects: ObjectStore, name: str, retry_seconds: float = DEFAULT_RETRY_SECONDS
) -> bytes:
    """The bytes of object ``name``, retrying transient errors."""
    return await retry_transient(lambda: objects.get(name), name, retry_seconds)


async def fetch_logs(
    objects: ObjectStore, seqs: list[int], retry_seconds: float = DEFAULT_RETRY_SECONDS
) -> list[LogObject]:
    """Read and decode log objects ``seqs`` concurrently, in order."""
    sem = asyncio.Semaphore(_FETCH_CONCURRENCY)

    async def one(seq: int) -> LogObject:
        async with sem:
            name = log_name(seq)
            return decode_log(name, await get_object(objects, name, retry_seconds))

    return list(await asyncio.gather(*(one(s) for s in seqs)))


def consecutive_after(seqs: list[int], after: int) -> tuple[list[int], int | None]:
    """The run of ``seqs`` that continues ``after`` without a gap, and the first gap."""
    run = [s for s in seqs if s > after]
    for i, s in enumerate(run):
        if s != after + 1 + i:
            return run[:i], after + 1 + i
    return run, None


async def load(objects: ObjectStore, retry_seconds: float = DEFAULT_RETRY_SECONDS) -> Loaded:
    """Load the newest checkpoint and replay the log objects after it.

    Transient errors are retried for ``retry_seconds`` per call.
    """
    gap: int | None = None
    for _ in range(_ATTEMPTS):
        ckpts = await list_seqs(objects, CKPT_PREFIX, retry_seconds)
        ck_seq = ckpts[-1] if ckpts else 0
        try:
            if ck_seq:
                name = ckpt_name(ck_seq)
                ck = decode_checkpoint(name, await get_object(objects, name, retry_seconds))
                state = State(list(zip(ck.keys, ck.values, strict=True)))
                markers, epoch = list(ck.markers), ck.epoch
            else:
                state, markers, epoch = State(), [], None
            logs = await list_seqs(objects, LOG_PREFIX, retry_seconds)
            run, gap = consecutive_after(logs, ck_seq)
            if gap is not None:
                continue  # a checkpoint trimmed the log under us: list again
            seq = ck_seq
            for log in await fetch_logs(objects, run, retry_seconds):
                state.apply(log.ops)
                if log.marker:
                    markers.append(log.seq)
                    epoch = newer_epoch(epoch, log.epoch)
                seq = log.seq
        except ObjectNotFound:
            continue  # deleted under us by a newer checkpoint
        return Loaded(state, seq, ck_seq, markers, empty=not ckpts and not logs, epoch=epoch)
    raise CorruptObject(
        log_name(gap) if gap is not None else CKPT_PREFIX,
        "missing from the middle of the log (or the log kept changing while loading)",
    )
