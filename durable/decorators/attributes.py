"""Run attributes: a few searchable ``str -> str`` pairs on a workflow run.

``wf.options(attributes={"customer": "c-17"}).start(...)`` tags a run when
it starts; ``await durable.set_attributes(order="o-9")`` inside the run adds
or replaces pairs (a value of None removes its key). They are kept in the
run's index entry (`durable.decorators.index`), shown by
``handle.status().attributes`` and matched exactly by
``engine.runs(attributes={...})``.

Limits (`check_attributes`): at most `MAX_ATTRIBUTES` pairs per run; a key
is 1 to `MAX_KEY_BYTES` UTF-8 bytes, a value at most `MAX_VALUE_BYTES`.

``set_attributes`` is async, like ``durable.publish``: it returns once the
pairs are durable, so an operator who sees the run's next step also finds
it by them. Each call takes an ordinal when called (like a journal
position); the entry records how many calls were applied, and a replayed
call (an ordinal already applied) writes nothing, so a replay never takes
the attributes back to older values.
"""

from __future__ import annotations

import weakref
from collections.abc import Coroutine, Mapping
from typing import Any

from durable.decorators.context import RunContext, current_run
from durable.decorators.index import decode_entry, encode_entry, find_entry
from durable.decorators.suspend import Abort
from durable.errors import CorruptEngineRecord, InvalidArgument

__all__ = [
    "MAX_ATTRIBUTES",
    "MAX_KEY_BYTES",
    "MAX_VALUE_BYTES",
    "check_attributes",
    "set_attributes",
]

#: Attribute pairs a run may carry.
MAX_ATTRIBUTES = 16
#: UTF-8 bytes of an attribute key (at least 1).
MAX_KEY_BYTES = 64
#: UTF-8 bytes of an attribute value.
MAX_VALUE_BYTES = 256

_ordinals: weakref.WeakKeyDictionary[RunContext, int] = weakref.WeakKeyDictionary()


def check_attributes(
    attributes: object, run: str, *, removals: bool = False
) -> dict[str, str | None]:
    """``attributes`` as a dict if every pair is valid, else `InvalidArgument`
    naming ``run`` (a description: ``"run 'r-1'"``) and the key. ``removals``:
    None values are allowed (they remove the key)."""
    if not isinstance(attributes, Mapping):
        raise InvalidArgument(
            f"{run}: attributes must be a mapping of str to str, got {attributes!r:.80}"
        )
    checked: dict[str, str | None] = {}
    for key, value in attributes.items():
        if not isinstance(key, str) or not 1 <= len(key.encode()) <= MAX_KEY_BYTES:
            raise InvalidArgument(
                f"{run}: attribute key {key!r:.80} must be a str of 1 to {MAX_KEY_BYTES} bytes"
            )
        if value is None and removals:
            checked[key] = None
            continue
        if not isinstance(value, str) or len(value.encode()) > MAX_VALUE_BYTES:
            raise InvalidArgument(
                f"{run}: attribute {key!r} must be a str of at most {MAX_VALUE_BYTES} bytes, "
                f"got {value!r:.80}"
            )
        checked[key] = value
    return checked


def _check_count(attributes: Mapping[str, str], run: str) -> None:
    if len(attributes) > MAX_ATTRIBUTES:
        raise InvalidArgument(
            f"{run}: at most {MAX_ATTRIBUTES} attributes per run, got {len(attributes)} "
            f"({', '.join(sorted(attributes))})"
        )


def start_attributes(attributes: object, run: str) -> dict[str, str]:
    """The attributes a run starts with, checked (`InvalidArgument` naming
    ``run``, a description such as ``"run 'r-1'"``, and the key)."""
    checked = {k: v for k, v in check_attributes(attributes, run).items() if v is not None}
    _check_count(checked, run)
    return checked


def set_attributes(
    attributes: Mapping[str, str | None] | None = None, /, **pairs: str | None
) -> Coroutine[Any, Any, None]:
    """Add or replace attributes of this run (a None value removes its key):
    ``await durable.set_attributes(order="o-9")``, or a mapping for keys that
    are not identifiers. Durable when the await returns; a replay never
    takes the run's attributes back. Only in a workflow. `InvalidArgument`
    naming the run and the key for a bad pair or too many."""
    run = current_run("durable.set_attributes()")
    changes = check_attributes(
        {**(attributes or {}), **pairs}, f"run {run.run_id!r}", removals=True
    )
    seq = _ordinals.get(run, 0)
    _ordinals[run] = seq + 1
    return _set(run, seq, changes)


async def _set(run: RunContext, seq: int, changes: dict[str, str | None]) -> None:
    task = run.track()  # the delivery does not suspend while the write is in flight
    try:
        await _write(run, seq, changes)
    finally:
        run.untrack(task)


async def _write(run: RunContext, seq: int, changes: dict[str, str | None]) -> None:
    kv = run.engine.queue.kv.internal()
    run_id = run.run_id
    try:
        while True:
            found = find_entry(kv, run_id)
            if found is None:
                return  # a run started before the index: nothing to tag
            key, current = found
            entry = decode_entry(run_id, current)
            if entry.seq > seq:
                return  # a replay: this call (or a later one) is applied already
            merged = dict(entry.attributes)
            for k, v in changes.items():
                if v is None:
                    merged.pop(k, None)
                else:
                    merged[k] = v
            _check_count(merged, f"run {run_id!r}")
            new = encode_entry(entry.replace(attributes=merged, seq=seq + 1))
            if await kv.compare_put(key, current, new):
                return
    except (CorruptEngineRecord, InvalidArgument):
        raise
    except Exception as e:
        raise Abort(f"run {run_id!r}: its attributes could not be written: {e}", e) from e
