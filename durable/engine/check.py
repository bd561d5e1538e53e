"""Verify the engine's records on a store, read-only (the layer above `durable.store.check`).

`check_store` runs the store's check (`durable.store.check.scan_store`),
then decodes with `durable.engine.records` every engine record the rebuilt
state holds and every memo object and group manifest the scan read:

- run records, step pointers, terminal records, group member records: each
  decodes and names the run its key names;
- a step pointer has its run record, and its job is in the queue;
- a run record has its step pointer;
- memo objects hold a ``{"k", "v"}`` entry whose key hashes to the object's
  name; a run result record (``workflow.outcome``) decodes;
- group manifests (``.../groups/{id}/manifest``) decode and name their group.

Nothing is written. `CheckReport` and `Problem` are `durable.store.check`'s.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from typing import Any

import msgpack

from durable.engine import keys
from durable.engine.memo import OUTCOME_KEY
from durable.engine.records import (
    decode_group_manifest,
    decode_member_record,
    decode_run_record,
    decode_run_result,
    decode_step_pointer,
    decode_terminal_record,
)
from durable.engine.runs import RESERVED_KV_PREFIX
from durable.errors import DurableError
from durable.store.check import CheckReport, StoreScan, scan_store
from durable.store.framing import Kind
from durable.store.keyspace import USER
from durable.store.objects.base import ObjectStore
from durable.store.queue.keys import job_index_key

__all__ = ["MemoHook", "check_memo", "check_object", "check_records", "check_store"]

#: Called with ``(scan, object name, memo key, value)`` for every sound memo entry.
MemoHook = Callable[[StoreScan, str, str, Any], None]

_RUNS = USER + keys.run_key("")
_POINTERS = USER + keys.pointer_key("")
_OUTCOMES = USER + keys.outcome_key("")


async def check_store(objects: ObjectStore, *, label: str = "") -> CheckReport:
    """Check the store and the engine's records at ``objects``; never writes.

    `StoreNotInitialized` (naming the URL) when it holds no objects.
    """
    scan = await scan_store(objects, visit=lambda s, n, k, b: check_object(s, n, k, b), label=label)
    check_records(scan)
    return scan.report


def check_object(
    scan: StoreScan, name: str, kind: Kind | None, body: bytes, hook: MemoHook | None = None
) -> None:
    """The `durable.store.check.Visitor` of the engine: memo objects, group manifests."""
    if kind is Kind.MEMO:
        entry = check_memo(scan, name, body)
        if entry is not None and hook is not None:
            hook(scan, name, entry[0], entry[1])
    elif kind is None and name.endswith("/manifest") and "groups/" in name:
        try:
            manifest = decode_group_manifest(body, f"group manifest {name!r}")
        except DurableError as e:
            scan.report.problem(scan.key(name), "group manifest", _reason(e))
            return
        scan.report.counts["group manifests"] += 1
        if name.split("/")[-2] != manifest.group_id:
            scan.report.problem(
                scan.key(name), "group manifest", f"names group {manifest.group_id!r}"
            )


def check_memo(scan: StoreScan, name: str, body: bytes) -> tuple[str, Any] | None:
    """Decode a memo object's body; ``(key, value)``, or None after a problem."""
    try:
        entry = msgpack.unpackb(body, raw=False, strict_map_key=False)
    except Exception as e:
        scan.report.problem(scan.key(name), "memo object", f"undecodable memo entry: {e}")
        return None
    key = entry.get("k") if isinstance(entry, dict) else None
    if not isinstance(key, bytes) or "v" not in entry:
        scan.report.problem(scan.key(name), "memo object", "not a map with a key and a value")
        return None
    if hashlib.sha256(key).hexdigest() != name.rsplit("/", 1)[-1]:
        scan.report.problem(scan.key(name), "memo object", "holds another key than its name's")
        return None
    text = key.decode("utf-8", "backslashreplace")
    value = entry["v"]
    if text == OUTCOME_KEY:
        try:
            decode_run_result(value if isinstance(value, bytes) else b"", f"result {name!r}")
        except DurableError as e:
            scan.report.problem(scan.key(name), "run result record", _reason(e))
            return None
        scan.report.counts["run result records"] += 1
    return text, value


def check_records(scan: StoreScan) -> None:
    """Check every engine record in the scan's rebuilt state."""
    state, counts = scan.state, scan.report.counts
    runs: set[str] = set()
    for key, value in list(state.scan_prefix(_RUNS)):
        run_id = key[len(_RUNS) :].decode("utf-8", "backslashreplace")
        try:
            record = decode_run_record(value, f"run record of {run_id!r}")
        except DurableError as e:
            scan.record_problem(key, "run record", _reason(e))
            continue
        counts["run records"] += 1
        runs.add(run_id)
        if record.run_id != run_id:
            scan.record_problem(key, "run record", f"holds run {record.run_id!r}")
        if not scan.partial and state.get(_POINTERS + key[len(_RUNS) :]) is None:
            scan.record_problem(key, "run record", "the run has no step pointer")
    for key, value in list(state.scan_prefix(_POINTERS)):
        run_id = key[len(_POINTERS) :].decode("utf-8", "backslashreplace")
        try:
            pointer = decode_step_pointer(value, f"step pointer of {run_id!r}")
        except DurableError as e:
            scan.record_problem(key, "step pointer", _reason(e))
            continue
        counts["step pointers"] += 1
        if scan.partial:
            continue
        if run_id not in runs and state.get(_RUNS + key[len(_POINTERS) :]) is None:
            scan.record_problem(key, "step pointer", "its run has no run record")
        if state.get(job_index_key(pointer.job_id)) is None:
            scan.record_problem(
                key, "step pointer", f"its job {pointer.job_id!r} is not in the queue"
            )
    for key, value in list(state.scan_prefix(_OUTCOMES)):
        run_id = key[len(_OUTCOMES) :].decode("utf-8", "backslashreplace")
        try:
            terminal = decode_terminal_record(value, f"terminal record of {run_id!r}")
        except DurableError as e:
            scan.record_problem(key, "terminal record", _reason(e))
            continue
        counts["terminal records"] += 1
        if terminal.outcome is not None and terminal.outcome.run_id != run_id:
            scan.record_problem(key, "terminal record", f"holds run {terminal.outcome.run_id!r}")
    groups = USER + RESERVED_KV_PREFIX + b"groups/"
    for key, value in list(state.scan_prefix(groups)):
        if b"/members/" not in key:
            continue
        try:
            decode_member_record(value, "member record")
        except DurableError as e:
            scan.record_problem(key, "member record", _reason(e))
            continue
        counts["member records"] += 1
    for name, prefix in _COUNTED:
        counts[name] += state.count(USER + prefix)


_COUNTED = [
    ("buffered signals", RESERVED_KV_PREFIX + b"signal-buf/"),
    ("signal waits", RESERVED_KV_PREFIX + b"signal-wait/"),
    ("pending replies", keys.REPLY_MARKERS_PREFIX),
]


def _reason(e: BaseException) -> str:
    reason = getattr(e, "reason", None)
    return reason if isinstance(reason, str) else str(e)
