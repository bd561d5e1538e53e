"""Exclusive keys: a KV key that at most one active run holds.

A layer built on the runtime (the decorators' ``dedup_key``:
`durable.decorators.dedup`) asks for one by putting a *holder record*
under ``workflow/exclusive/`` in a submission's ``internal`` writes. The
owner's `WorkflowRuntime.submit_member` then commits the run only if the
key is free: no record, or a record naming a run that is no longer active
(its run record is gone: it terminated, or was forgotten). Otherwise it
raises `DuplicateStart` naming the run that holds it, and writes nothing.

The check and the commit are one decision: the owner is the store's one
writer, and it serialises the submissions that ask for one key on a lock
of its own (`ExclusiveLocks`), held from the check until the submission's
commit has applied. A client's submission carries the record through the
inbox (`durable.cluster.requests.SubmitRequest.internal`) and the owner
decides it the same way.

A holder record is not removed when its run ends (the next start of the
key overwrites it): one small record per distinct key.
"""

from __future__ import annotations

import asyncio
import contextlib
import weakref
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass

import msgpack

from durable.engine.runs import RESERVED_KV_PREFIX
from durable.errors import CorruptEngineRecord, DuplicateStart

__all__ = [
    "EXCLUSIVE_PREFIX",
    "ExclusiveLocks",
    "Holder",
    "check_exclusive",
    "decode_holder",
    "encode_holder",
    "exclusive_key",
]

#: Where holder records live.
EXCLUSIVE_PREFIX = RESERVED_KV_PREFIX + b"exclusive/"
_VERSION = 1


@dataclass(frozen=True, slots=True)
class Holder:
    """Run ``run_id`` of workflow ``workflow`` holds key ``key``."""

    run_id: str
    key: str
    workflow: str


def exclusive_key(workflow: str, key: str) -> bytes:
    """The KV key of ``workflow``'s exclusive key ``key`` (length-prefixed
    workflow name, so no two pairs share one)."""
    name = workflow.encode()
    return EXCLUSIVE_PREFIX + str(len(name)).encode() + b":" + name + b"/" + key.encode()


def encode_holder(holder: Holder) -> bytes:
    """The stored bytes of a holder record."""
    return msgpack.packb([_VERSION, holder.run_id, holder.key, holder.workflow])


def decode_holder(data: bytes) -> Holder:
    """Decode a holder record; `CorruptEngineRecord` if it is not one."""
    try:
        version, run_id, key, workflow = msgpack.unpackb(data)
    except Exception as e:  # msgpack raises several unrelated types; a bad shape too
        raise CorruptEngineRecord("exclusive-key holder", f"{type(e).__name__}: {e}") from e
    if version != _VERSION or not all(isinstance(v, str) for v in (run_id, key, workflow)):
        raise CorruptEngineRecord("exclusive-key holder", f"bad record {data[:80]!r}")
    return Holder(run_id, key, workflow)


def check_exclusive(
    internal: Mapping[bytes, bytes | None] | None,
    get: Callable[[bytes], bytes | None],
    active: Callable[[str], bool],
) -> list[bytes]:
    """The exclusive keys a submission's ``internal`` writes ask for (sorted);
    `DuplicateStart` if one of them is held by another run that ``active``
    says is active (``get`` reads the store's KV)."""
    wanted = sorted(k for k, v in (internal or {}).items() if k.startswith(EXCLUSIVE_PREFIX) and v)
    for k in wanted:
        raw = get(k)
        if raw is None:
            continue
        held = decode_holder(raw)
        mine = decode_holder(internal[k] or b"") if internal else None
        if mine is not None and held.run_id != mine.run_id and active(held.run_id):
            raise DuplicateStart(held.key, held.run_id, held.workflow)
    return wanted


class ExclusiveLocks:
    """The owner's per-key locks: one submission asking for a key decides at a time."""

    def __init__(self) -> None:
        self._locks: weakref.WeakValueDictionary[bytes, asyncio.Lock] = (
            weakref.WeakValueDictionary()
        )

    @contextlib.asynccontextmanager
    async def holding(self, keys: list[bytes]) -> AsyncIterator[None]:
        """Hold the locks of ``keys`` (sorted: no two holders deadlock)."""
        async with contextlib.AsyncExitStack() as stack:
            for k in keys:
                lock = self._locks.get(k)
                if lock is None:
                    lock = self._locks[k] = asyncio.Lock()
                await stack.enter_async_context(lock)
            yield
