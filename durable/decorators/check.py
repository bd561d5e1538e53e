"""Verify a whole store, read-only: what ``durable check URL`` runs.

`check_store` is the full check. It finds whether the store is partitioned
(``cluster.json``, `durable.cluster.manifest`) and checks each partition
(``p000/`` ...) as a store of its own, or the one store at the root, with
the checks of every layer:

- the store (`durable.store.check`): every object's frame and checksum, the
  checkpoints, the log chain, queue job records;
- the engine (`durable.engine.check`): run records, step pointers, terminal
  and member records, memo objects, group manifests, cross-references;
- the decorators (here): journal entries (`durable.decorators.journal`),
  invocation records, run archives (a terminated run's journal moved to its
  memo), inbox requests and outbox records (`durable.cluster`); a journal
  whose run has neither a run record nor a terminal record is reported.

It never writes: no lock, no heartbeat, no recovery, no open marker.
"""

from __future__ import annotations

import re
import time
from typing import Any

import msgpack

from durable.cluster.manifest import MANIFEST, decode_manifest, partition_prefix
from durable.cluster.outbox import OUTBOX_PREFIX, decode_outbox_record
from durable.cluster.requests import CORRUPT_PREFIX, INBOX_PREFIX, decode_request
from durable.decorators.archive import ARCHIVE_KEY, invocation_key
from durable.decorators.journal import decode_entry, journal_prefix
from durable.engine import check as engine_check
from durable.engine import keys
from durable.errors import DurableError, StoreNotInitialized
from durable.store.check import CheckReport, StoreScan, scan_store
from durable.store.framing import Kind, frame
from durable.store.keyspace import USER
from durable.store.objects.base import ObjectStore
from durable.store.objects.prefixed import PrefixedObjectStore

__all__ = ["check_store"]

_PARTITION = re.compile(r"p\d{3}/")
_JOURNAL = USER + journal_prefix("")[:-1]  # ``workflow/journal/``
_INVOCATIONS = USER + invocation_key("")


async def check_store(objects: ObjectStore) -> CheckReport:
    """Check every object, checkpoint and record of the store at ``objects``.

    Never writes. Raises `StoreNotInitialized` naming the URL when the
    location holds no store (nothing is created); backend errors such as
    `StoreNotFound` (a missing bucket) pass through.
    """
    started = time.monotonic()
    url = objects.url
    root = await objects.list("")
    if not root:
        raise StoreNotInitialized(url)
    report = CheckReport(url)
    partitions = await _partitions(objects, root, report)
    if partitions is None:
        report.merge((await _check_one(objects, "", url)).report)
    else:
        report.partitions = partitions
        for i in range(partitions):
            prefix = partition_prefix(i)
            if not any(n.startswith(prefix) for n in root):
                report.note(prefix, "partition", "holds no objects (never opened)")
                continue
            scan = await _check_one(PrefixedObjectStore(objects, prefix), prefix, url)
            report.merge(scan.report)
        for name in root:
            m = _PARTITION.match(name)
            if m and int(name[1:4]) >= partitions:
                report.problem(
                    name, "object", f"in a partition beyond the {partitions} of the manifest"
                )
    report.seconds = time.monotonic() - started
    return report


async def _partitions(objects: ObjectStore, root: list[str], report: CheckReport) -> int | None:
    """The partition count of the manifest (None: not partitioned)."""
    if MANIFEST not in root:
        if any(_PARTITION.match(n) for n in root):
            report.problem(MANIFEST, "partition manifest", "absent, yet p000/.. objects exist")
        return None
    data = await objects.get(MANIFEST)
    report.objects_read += 1
    report.bytes_read += len(data)
    try:
        manifest = decode_manifest(MANIFEST, data)
    except DurableError as e:
        report.problem(MANIFEST, "partition manifest", _reason(e))
        found = {int(n[1:4]) for n in root if _PARTITION.match(n)}
        return max(found) + 1 if found else None
    report.counts["partition manifests"] += 1
    return manifest.partitions


async def _check_one(objects: ObjectStore, label: str, url: str) -> StoreScan:
    """Every layer's checks on one (partition's) store."""
    try:
        scan = await scan_store(objects, visit=_visit, label=label, url=url)
    except StoreNotInitialized:
        scan = StoreScan(objects, CheckReport(url), label)
        scan.report.note(label or url, "store", "holds no objects")
        return scan
    quarantined = label + CORRUPT_PREFIX  # set aside by the owner: known, not new damage
    report = scan.report
    report.notes += [p for p in report.problems if p.key.startswith(quarantined)]
    report.problems = [p for p in report.problems if not p.key.startswith(quarantined)]
    engine_check.check_records(scan)
    _check_journals(scan)
    _check_outbox(scan)
    return scan


def _visit(scan: StoreScan, name: str, kind: Kind | None, body: bytes) -> None:
    if kind is Kind.INBOX:
        _check_request(scan, name, body)
    elif kind is None and name == MANIFEST:
        pass  # the partition manifest, read by `check_store`
    else:
        engine_check.check_object(scan, name, kind, body, _memo)


def _check_request(scan: StoreScan, name: str, body: bytes) -> None:
    if name.startswith(CORRUPT_PREFIX):
        scan.report.note(scan.key(name), "inbox request", "set aside by the owner as corrupt")
        return
    if not name.startswith(INBOX_PREFIX):
        scan.report.counts["inbox requests elsewhere"] += 1
        return
    try:
        decode_request(name, frame(Kind.INBOX, body))
    except DurableError as e:
        scan.report.problem(scan.key(name), "inbox request", _reason(e))


def _memo(scan: StoreScan, name: str, key: str, value: Any) -> None:
    """Memo entries the decorators own: run archives."""
    if key != ARCHIVE_KEY:
        return
    parts = name.split("/")  # ``{prefix}/memos/{run_id}/run/{hash}``
    run_id = parts[-3] if len(parts) >= 4 else "?"
    try:
        if not isinstance(value, dict) or not isinstance(value.get("journal", []), list):
            raise ValueError("not a map with a journal")
        journal = value.get("journal", [])
        for item in journal:
            position, entry = item
            decode_entry(entry, run_id, position)
    except (DurableError, ValueError, TypeError) as e:
        scan.report.problem(scan.key(name), "run archive", _reason(e))
        return
    scan.report.counts["run archives"] += 1
    scan.report.counts["archived journal entries"] += len(journal)


def _check_journals(scan: StoreScan) -> None:
    state, counts = scan.state, scan.report.counts
    orphans: set[str] = set()
    for key, value in list(state.scan_prefix(_JOURNAL)):
        run_part, _, tail = key[len(_JOURNAL) :].rpartition(b"/")
        run_id = run_part.decode("utf-8", "backslashreplace")
        if not tail.isdigit():
            scan.record_problem(key, "journal entry", "its key has no position")
            continue
        try:
            decode_entry(value, run_id, int(tail))
        except DurableError as e:
            scan.record_problem(key, "journal entry", _reason(e))
            continue
        counts["journal entries"] += 1
        if scan.partial or run_id in orphans:
            continue
        rid = run_part.decode("utf-8", "surrogateescape")
        if state.get(USER + keys.run_key(rid)) is None and (
            state.get(USER + keys.outcome_key(rid)) is None
        ):
            orphans.add(run_id)
            scan.record_problem(
                key, "journal entry", f"run {run_id!r} has no run or terminal record"
            )
    for key, value in list(state.scan_prefix(_INVOCATIONS)):
        try:
            m = msgpack.unpackb(value, raw=False)
            if not isinstance(m, dict) or not (
                isinstance(m.get("payload"), bytes) or isinstance(m.get("sha256"), str)
            ):
                raise ValueError("neither a payload nor a reference")
        except Exception as e:
            scan.record_problem(key, "invocation record", str(e) or type(e).__name__)
            continue
        counts["invocation records"] += 1


def _check_outbox(scan: StoreScan) -> None:
    for key, value in list(scan.state.scan_prefix(USER + OUTBOX_PREFIX)):
        try:
            decode_outbox_record(key, value)
        except DurableError as e:
            scan.record_problem(key, "outbox record", _reason(e))
            continue
        scan.report.counts["outbox records"] += 1


def _reason(e: BaseException) -> str:
    reason = getattr(e, "reason", None)
    return reason if isinstance(reason, str) else str(e)
