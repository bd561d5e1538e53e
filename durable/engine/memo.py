"""The memo store: durable per-step and run-scoped key -> value entries.

A memo is a retry-safety cache. A step records the result of an expensive,
non-idempotent side effect (a paid API call, one stage of a long step) so
that a retry of the same step reads it back instead of repeating the call.
Readers tolerate absence: an entry that is missing, removed by retention
or undecodable reads as absent and the work is done again.

Each entry is one object (layout and format in `durable.engine.memo_codec`)::

    {prefix}/memos/{run_id}/run/{sha256(key)}                  run memo
    {prefix}/memos/{run_id}/steps/{step:020d}/{sha256(key)}    step memo
    {prefix}/step-outputs/{run_id}/...                         replay records

framed with a checksum and a format version, the body MessagePack. A `put`
is one object write, durable when it returns; concurrent writers of one key
race and the last write wins. An entry that fails its checksum, does not
decode or has a newer format version is logged at warning level and treated
as absent (`Memo.memoized` then overwrites it).

The run-memo key ``workflow.outcome`` holds the run result record the
runtime writes; user code reads it with `Memo.get` but cannot write it
(`ReservedMemoKey`). The runtime uses `MemoStore.put_outcome` and
`MemoStore.get_outcome`.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any, Final

from durable._logging import get_logger
from durable.engine import memo_codec as codec
from durable.errors import (
    CorruptObject,
    ObjectNotFound,
    ObjectStoreError,
    ReservedMemoKey,
    UnsupportedFormat,
)
from durable.store.ids import validate_id
from durable.store.objects.base import ObjectStore

__all__ = ["OUTCOME_KEY", "Memo", "MemoStore"]

log = get_logger("durable.engine.memo")

#: The run-memo key of the run result record; reserved for the runtime.
OUTCOME_KEY: Final = "workflow.outcome"


class _Missing:
    __slots__ = ()


_MISSING: Final = _Missing()


async def _compute(compute: Callable[[], Any]) -> Any:
    result = compute()
    if inspect.isawaitable(result):
        result = await result
    return result


def _check_compute(compute: object) -> None:
    if inspect.isawaitable(compute) or not callable(compute):
        if inspect.iscoroutine(compute):
            compute.close()  # never run; close it so it does not warn
        raise TypeError(
            f"compute must be a function taking no arguments (sync or async), got "
            f"{type(compute).__name__}; pass the function itself (`fetch`) or wrap the "
            "call (`lambda: fetch(x)`), not an awaitable"
        )


class Memo:
    """One memo namespace: a step of a run (`MemoStore.step_memo`) or a run.

    Keys are any strings (they are hashed); values are plain data (see
    `durable.engine.memo_codec`). Values read back in their decoded form:
    tuples as lists, dataclasses as dicts. `memoized` returns that form
    also on the call that computes, so a first run and a retry see the same
    value.
    """

    __slots__ = ("_objects", "_reserved", "_run_id", "_scope", "_step")

    def __init__(
        self,
        objects: ObjectStore,
        scope: str,
        run_id: str,
        step: int | None,
        reserved: frozenset[str] = frozenset(),
    ) -> None:
        self._objects = objects
        self._scope = scope
        self._run_id = run_id
        self._step = step
        self._reserved = reserved

    @property
    def run_id(self) -> str:
        """The run this memo belongs to."""
        return self._run_id

    @property
    def step_number(self) -> int | None:
        """The step of a step memo; ``None`` for the run memo."""
        return self._step

    def __repr__(self) -> str:
        scope = "run" if self._step is None else f"step={self._step}"
        return f"<Memo run_id={self._run_id!r} {scope}>"

    # ---------------------------------------------------------------- keys

    async def get(self, key: str) -> Any:
        """The value stored under ``key``; ``None`` if absent or undecodable.

        A stored ``None`` also reads as ``None``; `memoized` tells them apart.
        """
        value = await self._load(key)
        return None if value is _MISSING else value

    async def put(self, key: str, value: Any) -> None:
        """Store ``value`` under ``key``, replacing any entry; durable on return.

        `TypeError` (nothing stored) if ``value`` is not plain data.
        """
        self._check_writable(key)
        await self._store(key, value)

    async def memoized(self, key: str, compute: Callable[[], Any]) -> Any:
        """The value stored under ``key``, else ``compute()`` stored there.

        ``compute`` is a function of no arguments, sync or async; a sync one
        runs on the event loop thread. It is called when the entry is missing
        or undecodable; if it raises, nothing is stored and the error
        propagates. Returns the value in its decoded form.
        """
        self._check_writable(key)
        _check_compute(compute)
        value = await self._load(key)
        if value is not _MISSING:
            return value
        return await self._store(key, await _compute(compute))

    # ------------------------------------------------------- content keys

    def content_key(self, input: Any) -> str:
        """``"content:"`` + SHA-256 hex of ``input`` as MessagePack.

        Map keys are sorted, so equal inputs give equal keys. The key is in
        this memo's scope like any other: it is not a cross-run cache, so
        include an operation name in ``input`` if several operations of one
        step may see identical inputs.
        """
        return codec.content_key(input)

    async def content_get(self, input: Any) -> Any:
        """`get` under `content_key` of ``input``."""
        return await self.get(self.content_key(input))

    async def content_put(self, input: Any, value: Any) -> None:
        """`put` under `content_key` of ``input``."""
        await self.put(self.content_key(input), value)

    async def memoized_by_content(self, input: Any, compute: Callable[[], Any]) -> Any:
        """`memoized` under `content_key` of ``input``."""
        return await self.memoized(self.content_key(input), compute)

    # ------------------------------------------------------------ helpers

    def _check_writable(self, key: str) -> None:
        if key in self._reserved:
            raise ReservedMemoKey(key, self._run_id)

    def _name(self, key: str) -> str:
        return self._scope + codec.key_hash(key)

    async def _load(self, key: str) -> Any:
        name = self._name(key)
        try:
            data = await self._objects.get(name)
        except ObjectNotFound:
            return _MISSING
        try:
            return codec.decode_entry(name, data, key)
        except (CorruptObject, UnsupportedFormat) as e:
            log.warning(
                "memo entry undecodable, treated as absent",
                run_id=self._run_id,
                step=self._step,
                object=name,
                error=str(e),
            )
            return _MISSING

    async def _store(self, key: str, value: Any) -> Any:
        data, decoded = codec.encode_entry(key, value)
        await self._objects.put(self._name(key), data)
        return decoded


class MemoStore:
    """The memos of every run, as objects under ``prefix`` of ``objects``."""

    __slots__ = ("_objects", "_prefix")

    def __init__(self, objects: ObjectStore, prefix: str) -> None:
        self._objects = objects
        self._prefix = codec.normalize_prefix(prefix)

    @property
    def objects(self) -> ObjectStore:
        """The object store holding the entries."""
        return self._objects

    @property
    def prefix(self) -> str:
        """The object-name prefix of every entry (no leading or trailing ``/``)."""
        return self._prefix

    def __repr__(self) -> str:
        return f"MemoStore({self._objects!r}, {self._prefix!r})"

    def step_memo(self, run_id: str, step_number: int) -> Memo:
        """The memo of step ``step_number`` (0 to 2**64-1) of run ``run_id``."""
        run_id = validate_id(run_id, "run id")
        scope = codec.step_scope(self._prefix, run_id, step_number)
        return Memo(self._objects, scope, run_id, step_number)

    def run_memo(self, run_id: str) -> Memo:
        """The memo shared by every step of run ``run_id``."""
        run_id = validate_id(run_id, "run id")
        scope = codec.run_scope(self._prefix, run_id)
        return Memo(self._objects, scope, run_id, None, frozenset({OUTCOME_KEY}))

    def step_outputs_prefix(self, run_id: str) -> str:
        """Where the step-output replay records of ``run_id`` go (ends in ``/``)."""
        return codec.step_outputs_dir(self._prefix, validate_id(run_id, "run id"))

    async def put_outcome(self, run_id: str, record: Any) -> None:
        """Write the run result record of ``run_id`` (runtime only)."""
        await self.run_memo(run_id)._store(OUTCOME_KEY, record)

    async def get_outcome(self, run_id: str) -> Any:
        """The run result record of ``run_id``; ``None`` if absent or undecodable."""
        return await self.run_memo(run_id).get(OUTCOME_KEY)

    async def clear_run(self, run_id: str) -> int:
        """Delete every memo entry and replay record of ``run_id``; return the count.

        Lists both areas (a listing error propagates), then deletes; a delete
        that fails is logged and the object counted as not deleted.
        """
        run_id = validate_id(run_id, "run id")
        names = [
            *await self._objects.list(codec.run_dir(self._prefix, run_id)),
            *await self._objects.list(codec.step_outputs_dir(self._prefix, run_id)),
        ]
        if not names:
            return 0
        try:
            await self._objects.delete(names)
            return len(names)
        except ObjectStoreError as e:
            log.warning("memo batch delete failed", run_id=run_id, error=str(e))
        deleted = 0
        for name in names:  # one by one: delete what can be, log the rest
            try:
                await self._objects.delete([name])
            except ObjectStoreError as e:
                log.warning("memo delete failed", run_id=run_id, object=name, error=str(e))
            else:
                deleted += 1
        return deleted
