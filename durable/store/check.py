"""Verify a store without writing to it: every object, the log chain, checkpoints.

`check_store` reads every object it can find under a store (one LIST of the
whole store, then one GET per object) and reports what it found in a
`CheckReport`: counts by kind, and each bad object by its key and why. It
never writes: no lock, no open marker, no recovery; it reads through the
`ObjectStore` API and the decoders of `durable.store.log.format` and
`durable.store.framing`, never opens a `LogWriter`.

What this layer checks (the engine and decorator layers add their
records, `durable.engine.check` and `durable.decorators.check`):

- every checkpoint decodes (framing, CRC-32, fields, its sequence number
  matches its name); the newest one's open markers exist in the log;
- every log object decodes; the log after the newest checkpoint is
  contiguous (a gap is lost commits);
- every other framed object (blobs, memos, replay records, inbox requests)
  passes its frame and checksum;
- the state rebuilt from the newest checkpoint and the log after it: every
  queue job record decodes and agrees with the key it is stored under.

What the design allows is a *note*, not a problem (`CheckReport.notes`):
log objects and checkpoints a checkpoint covers but a failed trim left,
probe objects of an open that crashed, objects this version does not know.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from durable.errors import (
    CorruptObject,
    ObjectNotFound,
    StoreNotInitialized,
    UnsupportedFormat,
)
from durable.store import keyspace
from durable.store.framing import MAGIC, Kind, unframe
from durable.store.log.format import (
    CKPT_PREFIX,
    LOG_PREFIX,
    Checkpoint,
    LogObject,
    decode_checkpoint,
    decode_log,
    log_name,
    parse_seq,
)
from durable.store.log.loader import get_object
from durable.store.log.state import State
from durable.store.log.writer import PROBE_PREFIX
from durable.store.objects.base import ObjectStore
from durable.store.queue.keys import job_index_key
from durable.store.queue.records import JobStatus, decode_history, decode_record

__all__ = [
    "CheckReport",
    "Problem",
    "StoreScan",
    "Visitor",
    "check_store",
    "record_label",
    "scan_store",
]

#: A hook called with ``(scan, name, kind, body)`` for every framed object
#: whose frame is sound, and with kind None and the raw bytes for every
#: object without a frame; upper layers decode memos and requests with it.
Visitor = Callable[["StoreScan", str, "Kind | None", bytes], None]

_STATUS_OF_TAG = {
    keyspace.PENDING: JobStatus.PENDING,
    keyspace.CLAIMED: JobStatus.CLAIMED,
    keyspace.SCHEDULED: JobStatus.SCHEDULED,
    keyspace.DONE: JobStatus.DONE,
    keyspace.DEAD: JobStatus.DEAD,
}
_KIND_NAMES = {
    Kind.LOG: "log objects",
    Kind.CHECKPOINT: "checkpoints",
    Kind.BLOB: "blobs",
    Kind.MEMO: "memo objects",
    Kind.REPLAY: "replay records",
    Kind.INBOX: "inbox requests",
}


def record_label(key: bytes) -> str:
    """A state key as text: a KV key (engine records included) without its tag."""
    if key.startswith(keyspace.USER):
        return key[1:].decode("utf-8", "backslashreplace")
    return repr(key)


@dataclass(frozen=True, slots=True)
class Problem:
    """One finding: the object ``key``, the record inside it (if any), what it is, why."""

    #: The object key (full, with a partition's prefix).
    key: str
    #: What the object or record is ("log object", "run record", ...).
    kind: str
    #: Why it is reported.
    reason: str
    #: For a record inside a log object or checkpoint: the record's key.
    record: str | None = None

    def render(self) -> str:
        """One line of text."""
        where = self.key if self.record is None else f"{self.key} [{self.record}]"
        return f"{where}: {self.kind}: {self.reason}"

    def as_dict(self) -> dict[str, Any]:
        """The finding as a JSON-ready map."""
        out: dict[str, Any] = {"key": self.key, "kind": self.kind, "reason": self.reason}
        if self.record is not None:
            out["record"] = self.record
        return out


@dataclass(slots=True)
class CheckReport:
    """What `check_store` (or an upper layer's check) found on a store."""

    url: str
    #: How many of each kind of object and record were read.
    counts: Counter[str] = field(default_factory=Counter)
    #: Damage: objects or records that do not decode or do not agree.
    problems: list[Problem] = field(default_factory=list)
    #: Leftovers the design allows (an untrimmed log, an orphan): not damage.
    notes: list[Problem] = field(default_factory=list)
    #: Objects read (GETs), and their bytes.
    objects_read: int = 0
    bytes_read: int = 0
    #: Wall-clock seconds the check took.
    seconds: float = 0.0
    #: The number of partitions, for a partitioned store (None: one store).
    partitions: int | None = None

    @property
    def clean(self) -> bool:
        """True when no problem was found (notes do not count)."""
        return not self.problems

    def problem(self, key: str, kind: str, reason: str, record: str | None = None) -> None:
        """Record a problem."""
        self.problems.append(Problem(key, kind, reason, record))

    def note(self, key: str, kind: str, reason: str, record: str | None = None) -> None:
        """Record a note (allowed by the design, worth knowing)."""
        self.notes.append(Problem(key, kind, reason, record))

    def merge(self, other: CheckReport) -> None:
        """Add ``other``'s counts and findings (a partition's) to this report."""
        self.counts.update(other.counts)
        self.problems.extend(other.problems)
        self.notes.extend(other.notes)
        self.objects_read += other.objects_read
        self.bytes_read += other.bytes_read

    def as_dict(self) -> dict[str, Any]:
        """The report as a JSON-ready map."""
        return {
            "url": self.url,
            "clean": self.clean,
            "partitions": self.partitions,
            "counts": {k: n for k, n in sorted(self.counts.items()) if n},
            "problems": [p.as_dict() for p in self.problems],
            "notes": [n.as_dict() for n in self.notes],
            "objects_read": self.objects_read,
            "bytes_read": self.bytes_read,
            "seconds": round(self.seconds, 3),
        }

    def to_json(self) -> str:
        """The report as a JSON document."""
        return json.dumps(self.as_dict(), indent=2)

    def render(self) -> str:
        """The report as text: a verdict, the counts, then every problem and note."""
        verdict = "clean" if self.clean else f"{len(self.problems)} problem(s)"
        parts = f", {self.partitions} partitions" if self.partitions else ""
        lines = [
            f"store {self.url}: {verdict}{parts} ({self.objects_read} objects, "
            f"{self.bytes_read} bytes read in {self.seconds:.2f} s)"
        ]
        lines += [f"  {kind}: {n}" for kind, n in sorted(self.counts.items()) if n]
        if self.problems:
            lines.append("problems:")
            lines += [f"  {p.render()}" for p in self.problems]
        if self.notes:
            lines.append("notes:")
            lines += [f"  {n.render()}" for n in self.notes]
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.render()


@dataclass(slots=True)
class StoreScan:
    """What `scan_store` read: the report so far and the rebuilt state, for
    the layers above to check their records in."""

    objects: ObjectStore
    report: CheckReport
    #: Prepended to object names in findings (a partition's ``p003/``).
    label: str = ""
    #: Every object name the LIST returned.
    names: list[str] = field(default_factory=list)
    #: The state rebuilt from the newest sound checkpoint and the log after it.
    state: State = field(default_factory=State)
    #: For each key of `state`: the object its value was read from.
    source: dict[bytes, str] = field(default_factory=dict)
    #: True when the state misses commits (a corrupt newest checkpoint, a gap or
    #: an undecodable log object): records still decode, cross-references are
    #: not checked (they would report what the damage hid).
    partial: bool = False
    #: The newest checkpoint's sequence number (0: none), and the last log seq applied.
    ckpt_seq: int = 0
    seq: int = 0

    def key(self, name: str) -> str:
        """The full key of object ``name``."""
        return self.label + name

    def record_problem(self, key: bytes, kind: str, reason: str) -> None:
        """A problem with the record at state key ``key``, named by its object."""
        self.report.problem(self.key(self.source.get(key, "?")), kind, reason, record_label(key))

    def record_note(self, key: bytes, kind: str, reason: str) -> None:
        """A note on the record at state key ``key``, named by its object."""
        self.report.note(self.key(self.source.get(key, "?")), kind, reason, record_label(key))

    async def read(self, name: str) -> bytes | None:
        """GET object ``name`` (counted); None if it vanished since the LIST."""
        try:
            data = await get_object(self.objects, name)
        except ObjectNotFound:
            self.report.note(self.key(name), "object", "deleted while the check ran")
            return None
        self.report.objects_read += 1
        self.report.bytes_read += len(data)
        return data


async def check_store(objects: ObjectStore, *, label: str = "") -> CheckReport:
    """Check the store at ``objects`` (objects, log, checkpoints, queue records).

    Never writes. `StoreNotInitialized` (naming the URL) if it holds no
    objects; backend errors (`StoreNotFound` for a missing bucket) pass through.
    """
    return (await scan_store(objects, label=label)).report


async def scan_store(
    objects: ObjectStore, *, visit: Visitor | None = None, label: str = "", url: str | None = None
) -> StoreScan:
    """Read and check every object of the store; see the module docstring.

    ``visit`` is called for every sound framed object other than log objects
    and checkpoints. ``label`` prefixes object names in findings; ``url``
    names the store in the report (default: ``objects.url``).
    """
    started = time.monotonic()
    scan = StoreScan(objects, CheckReport(url or objects.url), label)
    scan.names = await objects.list("")
    if not scan.names:
        raise StoreNotInitialized(url or objects.url)
    ckpts = sorted(s for s in (parse_seq(n, CKPT_PREFIX) for n in scan.names) if s is not None)
    logs = sorted(s for s in (parse_seq(n, LOG_PREFIX) for n in scan.names) if s is not None)
    checkpoints = await _read_checkpoints(scan, ckpts)
    decoded = await _read_logs(scan, logs)
    _rebuild(scan, checkpoints, decoded)
    await _read_others(scan, visit)
    _check_queue(scan)
    scan.report.seconds = time.monotonic() - started
    return scan


# ------------------------------------------------------------------ objects


async def _read_checkpoints(scan: StoreScan, seqs: list[int]) -> dict[int, Checkpoint]:
    out: dict[int, Checkpoint] = {}
    for seq in seqs:
        name = f"{CKPT_PREFIX}{seq:020d}"
        data = await scan.read(name)
        if data is None:
            continue
        try:
            out[seq] = decode_checkpoint(name, data)
        except (CorruptObject, UnsupportedFormat) as e:
            scan.report.problem(scan.key(name), "checkpoint", _reason(e))
            continue
        ck = out[seq]
        if ck.keys != sorted(set(ck.keys)):
            scan.report.problem(scan.key(name), "checkpoint", "its keys are not sorted and unique")
        scan.report.counts["checkpoints"] += 1
    return out


async def _read_logs(scan: StoreScan, seqs: list[int]) -> dict[int, LogObject]:
    out: dict[int, LogObject] = {}
    for seq in seqs:
        name = log_name(seq)
        data = await scan.read(name)
        if data is None:
            continue
        try:
            out[seq] = decode_log(name, data)
        except (CorruptObject, UnsupportedFormat) as e:
            scan.report.problem(scan.key(name), "log object", _reason(e))
            continue
        scan.report.counts["log objects"] += 1
        if out[seq].marker:
            scan.report.counts["open markers"] += 1
    return out


def _rebuild(scan: StoreScan, ckpts: dict[int, Checkpoint], logs: dict[int, LogObject]) -> None:
    """The state the writer would load, and the log chain's checks."""
    report, state = scan.report, scan.state
    newest = max(_listed(scan, CKPT_PREFIX), default=0)
    ck = ckpts.get(newest)
    base = newest
    if newest and ck is None:
        scan.partial = True  # the state before the log is lost: decode what follows it
    if ck is not None:
        name = f"{CKPT_PREFIX}{ck.seq:020d}"
        for k, v in zip(ck.keys, ck.values, strict=True):
            state.apply([k, v])
            scan.source[k] = name
        listed = set(_listed(scan, LOG_PREFIX))
        for m in ck.markers:
            if m not in logs and m in listed:
                continue  # undecodable: reported as a log object already
            if m not in logs:
                report.problem(
                    scan.key(name), "checkpoint", f"lists open marker {m}, absent from the log"
                )
            elif not logs[m].marker:
                report.problem(
                    scan.key(name), "checkpoint", f"lists open marker {m}, which is not a marker"
                )
        for seq in ckpts:
            if seq < ck.seq:
                report.note(scan.key(f"{CKPT_PREFIX}{seq:020d}"), "checkpoint", _TRIM)
    newest_ck_name = f"{CKPT_PREFIX}{max(ckpts):020d}" if ckpts else None
    all_seqs = sorted(set(logs) | {s for s in _listed(scan, LOG_PREFIX)})
    for seq in all_seqs:
        if seq <= base and seq in logs and not logs[seq].marker:
            report.note(scan.key(log_name(seq)), "log object", _TRIM)
        elif seq <= base and ck is not None and seq in logs and seq not in ck.markers:
            report.problem(
                scan.key(newest_ck_name or ""),
                "checkpoint",
                f"does not list open marker {seq}, which it covers",
            )
    expect = base + 1
    for seq in [s for s in all_seqs if s > base]:
        if seq != expect:
            missing = log_name(expect) if seq == expect + 1 else f"{log_name(expect)}..{seq - 1}"
            report.problem(
                scan.key(missing), "log object", "missing from the middle of the log (lost commits)"
            )
            scan.partial = True  # a writer would refuse to open; decode the rest anyway
        obj = logs.get(seq)
        expect = seq + 1
        if obj is None:
            scan.partial = True  # undecodable: already a problem
            continue
        state.apply(obj.ops)
        name = log_name(seq)
        for op_key in obj.ops[::2]:
            if op_key is not None:
                scan.source[op_key] = name
        scan.seq = seq
    scan.ckpt_seq = base
    scan.seq = max(scan.seq, base)
    report.counts["state keys"] = len(state)
    if scan.partial:
        report.note(scan.key(LOG_PREFIX), "log", _PARTIAL)


def _listed(scan: StoreScan, prefix: str) -> list[int]:
    return [s for s in (parse_seq(n, prefix) for n in scan.names) if s is not None]


_PARTIAL = "the damage above hides commits: records were decoded, cross-references not checked"
_TRIM = "covered by a newer checkpoint; a trim that did not finish left it (harmless)"


async def _read_others(scan: StoreScan, visit: Visitor | None) -> None:
    """Every object that is neither a log object nor a checkpoint."""
    for name in scan.names:
        if parse_seq(name, LOG_PREFIX) is not None or parse_seq(name, CKPT_PREFIX) is not None:
            continue
        if name.startswith(PROBE_PREFIX):
            scan.report.note(scan.key(name), "probe object", "left by an open that crashed")
            continue
        if name.startswith((LOG_PREFIX, CKPT_PREFIX)):
            scan.report.note(scan.key(name), "object", "not a log or checkpoint name; ignored")
            continue
        data = await scan.read(name)
        if data is None:
            continue
        if not data.startswith(MAGIC) or len(data) < 5:
            other = "cluster records" if name.startswith("cluster/") else "other objects"
            scan.report.counts[other] += 1
            if visit is not None:
                visit(scan, name, None, data)
            continue
        kind_byte = data[4]
        try:
            kind = Kind(kind_byte)
        except ValueError:
            scan.report.problem(scan.key(name), "object", f"framed with unknown kind {kind_byte}")
            continue
        what = _KIND_NAMES[kind]
        try:
            _, body = unframe(name, data, kind)
        except (CorruptObject, UnsupportedFormat) as e:
            scan.report.problem(scan.key(name), what.rstrip("s"), _reason(e))
            continue
        scan.report.counts[what] += 1
        if kind in (Kind.LOG, Kind.CHECKPOINT):
            scan.report.note(scan.key(name), what.rstrip("s"), "outside the log's names; ignored")
        elif visit is not None:
            visit(scan, name, kind, body)


# ------------------------------------------------------------------ records


def _check_queue(scan: StoreScan) -> None:
    """Queue job records decode and agree with their keys and the job index."""
    state = scan.state
    for tag, status in _STATUS_OF_TAG.items():
        for key, value in list(state.scan_prefix(tag)):
            try:
                record = decode_record(value, f"job record {record_label(key)}")
            except Exception as e:
                scan.record_problem(key, "job record", _reason(e))
                continue
            scan.report.counts["job records"] += 1
            if record.status is not status:
                scan.record_problem(
                    key, "job record", f"says {record.status.value}, stored as {status.value}"
                )
            if not key.endswith(record.id.encode()):
                scan.record_problem(key, "job record", f"holds job {record.id!r}, not its key's")
            index = state.get(job_index_key(record.id))
            if not scan.partial and index != key:
                scan.record_problem(key, "job record", "the job index does not point at it")
    for key, value in list(state.scan_prefix(keyspace.ATTEMPT_HISTORY)):
        try:
            decode_history(value, f"attempt history {record_label(key)}")
        except Exception as e:
            scan.record_problem(key, "attempt history", _reason(e))
    for key, value in list(state.scan_prefix(keyspace.JOB_INDEX)):
        if not scan.partial and state.get(value) is None:
            scan.record_problem(key, "job index entry", "points at no job record")
    scan.report.counts["kv keys"] += state.count(keyspace.USER)


def _reason(e: BaseException) -> str:
    """An error's reason, without the advice a `CorruptObject` message carries."""
    reason = getattr(e, "reason", None)
    if isinstance(reason, str):
        return reason
    text = str(e)
    return text.split("; restore it from")[0]
