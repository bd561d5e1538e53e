"""What the store keeps of a workflow run besides the queue's records.

- **The invocation record.** `submit_run` records a run's invocation (its
  workflow name and encoded arguments) under
  ``workflow/invocations/{run_id}`` in the transaction that submits the
  run (`invocation_record`): inline up to `INLINE_MAX` bytes, else in the
  run memo (written first) with a reference. ``engine.fork`` starts a new
  run from it, whether the source run is active or has terminated.
- **The archive.** While a run is active its invocation record, journal
  entries and published values are KV keys, held in the store's memory.
  When a run whose records take more than `ARCHIVE_MIN_BYTES` terminates,
  the engine's terminal hook (`durable.decorators.terminal`) writes them
  as one object in the run's memo (`archive_run`), then deletes the keys
  in one commit (which records the journal's count in the run's index
  entry, `durable.decorators.index`): a terminated run keeps at most
  `ARCHIVE_MIN_BYTES` of memory, about the size of its terminal record. The object is written
  first, so a crash between the two leaves the keys in place and the
  notification, redelivered, writes it again; once the keys are gone there
  is nothing left to archive. Smaller runs keep their keys (an object
  write per run would cost more than the run); they go with the run's
  terminal record when the engine's ``retention`` passes (`run_keys`).
- **Reading.** `load_journal`, `load_invocation` and `load_published` read
  the KV, and the archive for a terminated run whose keys have left it
  (a KV read and the check of the run's terminal record happen with no
  await between, and the archive is written before the keys go, so a
  reader never misses a record that exists). The archive lives as long as
  the run's memo: the engine's ``retention`` removes it with the run.

The archive is a memo value ``{"v": 1, "invocation": bytes | None,
"journal": [[position, entry bytes], ...], "published": {key: bytes}}``
and ``"streams": [[key suffix, bytes], ...]`` (absent: none), holding the
stored KV values as they were.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import msgpack

from durable.decorators.debounce_keys import debounce_run_key
from durable.decorators.index import decode_entry, encode_entry, find_entry, index_keys
from durable.decorators.journal import INLINE_MAX, Journal, entry_key, journal_prefix
from durable.decorators.progress import progress_key
from durable.decorators.publish import published_prefix
from durable.decorators.streams import stream_prefix
from durable.engine.runs import RESERVED_KV_PREFIX
from durable.errors import CorruptEngineRecord
from durable.store.log.batch import WriteBatch

if TYPE_CHECKING:
    from durable.decorators.base import EngineBase
    from durable.engine.memo import Memo, MemoStore

__all__ = [
    "ARCHIVE_KEY",
    "ARCHIVE_MIN_BYTES",
    "ARCHIVE_VERSION",
    "Archive",
    "archive_run",
    "invocation_key",
    "invocation_record",
    "load_invocation",
    "load_journal",
    "load_published",
    "needs_archive",
    "read_archive",
    "run_keys",
]

#: The run-memo key of a terminated run's archive.
ARCHIVE_KEY = "durable.archive"
#: The format version of archives and invocation records.
ARCHIVE_VERSION = 1
#: A terminated run whose KV records (keys and values) take more bytes than
#: this is archived; a smaller one keeps them until its retention passes.
ARCHIVE_MIN_BYTES = 4096


def invocation_key(run_id: str) -> bytes:
    """The KV key of run ``run_id``'s invocation record."""
    return RESERVED_KV_PREFIX + b"invocations/" + run_id.encode()


def _pack(m: dict[str, Any]) -> bytes:
    packed: bytes = msgpack.packb(m, use_bin_type=True)
    return packed


def _blob_key(digest: str) -> str:
    return f"durable.invocation/{digest}"


async def invocation_record(memos: MemoStore, run_id: str, payload: bytes) -> dict[bytes, bytes]:
    """The KV write recording run ``run_id``'s invocation ``payload`` (to commit
    with its submission); a payload over `INLINE_MAX` bytes is written to the
    run's memo in ``memos`` first."""
    if len(payload) <= INLINE_MAX:
        record = _pack({"v": ARCHIVE_VERSION, "payload": payload})
    else:
        digest = hashlib.sha256(payload).hexdigest()
        await memos.run_memo(run_id).put(_blob_key(digest), payload)
        record = _pack({"v": ARCHIVE_VERSION, "sha256": digest})
    return {invocation_key(run_id): record}


async def _invocation_payload(memo: Memo, run_id: str, record: bytes) -> bytes:
    what = f"the invocation record of run {run_id!r}"
    try:
        m = msgpack.unpackb(record, raw=False)
        payload, digest = m.get("payload"), m.get("sha256")
        if isinstance(payload, bytes):
            return payload
        if not isinstance(digest, str):
            raise ValueError("neither a payload nor a reference")
    except (ValueError, TypeError, AttributeError, msgpack.UnpackException) as e:
        raise CorruptEngineRecord(what, str(e) or type(e).__name__) from None
    stored = await memo.get(_blob_key(digest))
    if not isinstance(stored, bytes) or hashlib.sha256(stored).hexdigest() != digest:
        raise CorruptEngineRecord(what, "the payload it references in the run memo is missing")
    return stored


@dataclass(frozen=True, slots=True)
class Archive:
    """The stored KV values of a terminated run; see the module docstring."""

    invocation: bytes | None = None
    journal: dict[int, bytes] = field(default_factory=dict)
    published: dict[str, bytes] = field(default_factory=dict)
    #: The run's stream records (`durable.decorators.streams`): KV key
    #: after the run's stream prefix -> value.
    streams: dict[bytes, bytes] = field(default_factory=dict)


def _encode(archive: Archive) -> dict[str, Any]:
    return {
        "v": ARCHIVE_VERSION,
        "invocation": archive.invocation,
        "journal": [[p, e] for p, e in sorted(archive.journal.items())],
        "published": dict(archive.published),
        "streams": [[k, v] for k, v in sorted(archive.streams.items())],
    }


def _decode(m: object, run_id: str) -> Archive:
    try:
        if not isinstance(m, dict):
            raise ValueError(f"a {type(m).__name__}, not a map")
        version = m.get("v")
        if not isinstance(version, int) or version > ARCHIVE_VERSION:
            raise ValueError(f"format version {version!r}; this durable reads {ARCHIVE_VERSION}")
        invocation = m.get("invocation")
        journal = {p: e for p, e in m.get("journal", [])}
        published = dict(m.get("published", {}))
        streams = {k: v for k, v in m.get("streams", [])}
        if invocation is not None and not isinstance(invocation, bytes):
            raise ValueError("the invocation is not bytes")
        if not all(isinstance(p, int) for p in journal) or not all(
            isinstance(k, str) for k in published
        ):
            raise ValueError("a journal position is not an int, or a published key not a str")
        if not all(isinstance(v, bytes) for v in (*journal.values(), *published.values())):
            raise ValueError("a stored value is not bytes")
        if not all(isinstance(k, bytes) and isinstance(v, bytes) for k, v in streams.items()):
            raise ValueError("a stream record is not bytes")
    except (ValueError, TypeError) as e:
        raise CorruptEngineRecord(f"the archive of run {run_id!r}", str(e)) from None
    return Archive(invocation, journal, published, streams)


def _snapshot(engine: EngineBase, run_id: str) -> tuple[Archive, list[bytes]]:
    """The run's archivable KV values and their keys, read at once."""
    engine = engine.for_run(run_id)
    kv = engine.queue.kv.internal()
    jprefix, pprefix = journal_prefix(run_id), published_prefix(run_id)
    journal = {int(k[len(jprefix) :]): v for k, v in kv.snapshot(jprefix)}
    published = {k[len(pprefix) :].decode(): v for k, v in kv.snapshot(pprefix)}
    sprefix = stream_prefix(run_id)
    streams = {k[len(sprefix) :]: v for k, v in kv.snapshot(sprefix)}
    invocation = kv.get(invocation_key(run_id))
    keys = [entry_key(run_id, p) for p in journal]
    keys += [pprefix + k.encode() for k in published]
    keys += [sprefix + k for k in streams]
    if invocation is not None:
        keys.append(invocation_key(run_id))
    if kv.get(progress_key(run_id)) is not None:  # not archived: it goes with the run
        keys.append(progress_key(run_id))
    if kv.get(debounce_run_key(run_id)) is not None:  # likewise (a debounced run)
        keys.append(debounce_run_key(run_id))
    return Archive(invocation, journal, published, streams), keys


def run_keys(engine: EngineBase, run_id: str) -> list[bytes]:
    """Every KV key the decorators keep for run ``run_id`` (read at once),
    its run index keys included."""
    kv = engine.for_run(run_id).queue.kv.internal()
    return _snapshot(engine, run_id)[1] + index_keys(kv, run_id)


def needs_archive(engine: EngineBase, run_id: str) -> bool:
    """Whether run ``run_id``'s KV records take more than `ARCHIVE_MIN_BYTES`
    (its keys and values; read at once)."""
    archive, keys = _snapshot(engine, run_id)
    values = [*archive.journal.values(), *archive.published.values(), *archive.streams.values()]
    if archive.invocation is not None:
        values.append(archive.invocation)
    return sum(map(len, keys)) + sum(map(len, values)) > ARCHIVE_MIN_BYTES


def _memo(engine: EngineBase, run_id: str) -> Memo:
    return engine.for_run(run_id).workflows.default.memos.run_memo(run_id)


def _terminated(engine: EngineBase, run_id: str) -> bool:
    view = engine.for_run(run_id).workflows.default.view
    return view.run_record(run_id) is None and view.terminal_record(run_id) is not None


async def archive_run(engine: EngineBase, run_id: str) -> bool:
    """Move terminated run ``run_id``'s KV records to its archive; False when
    there was nothing left to move (archived already)."""
    engine = engine.for_run(run_id)
    archive, keys = _snapshot(engine, run_id)
    if not keys:
        return False
    await _memo(engine, run_id).put(ARCHIVE_KEY, _encode(archive))
    kv = engine.queue.kv.internal()
    batch = WriteBatch()
    for key in keys:
        kv.stage_delete(batch, key)
    found = find_entry(kv, run_id)  # the index keeps the journal's count
    if found is not None:
        entry = decode_entry(run_id, found[1]).replace(steps=len(archive.journal))
        kv.stage_put(batch, found[0], encode_entry(entry))
    await kv.commit(batch)
    view = engine.workflows.default.view
    if view.run_record(run_id) is None and view.terminal_record(run_id) is None:
        # Its retention passed meanwhile: the sweep may have cleared the memo
        # before the archive was written. Nothing may outlive the run.
        await engine.workflows.default.memos.clear_run(run_id)
    return True


async def read_archive(engine: EngineBase, run_id: str) -> Archive:
    """The archive of run ``run_id`` (empty if it has none)."""
    stored = await _memo(engine, run_id).get(ARCHIVE_KEY)
    return Archive() if stored is None else _decode(stored, run_id)


async def load_journal(engine: EngineBase, run_id: str) -> Journal:
    """The journal of run ``run_id``, active or terminated."""
    engine = engine.for_run(run_id)
    kv = engine.queue.kv.internal()
    memo = _memo(engine, run_id)
    journal = Journal.load(kv, memo, run_id)
    if len(journal) or not _terminated(engine, run_id):
        return journal
    archive = await read_archive(engine, run_id)
    rows = ((entry_key(run_id, p), e) for p, e in archive.journal.items())
    return Journal.decode(kv, memo, run_id, rows)


async def load_invocation(
    engine: EngineBase, run_id: str, archive: Archive | None = None
) -> bytes | None:
    """The encoded invocation run ``run_id`` was submitted with; None when the
    store has no record of it. ``archive``: the run's archive, when the caller
    has read it already."""
    engine = engine.for_run(run_id)
    record = engine.queue.kv.get(invocation_key(run_id))
    if record is None and _terminated(engine, run_id):
        if archive is None:
            archive = await read_archive(engine, run_id)
        record = archive.invocation
    if record is None:
        return None
    return await _invocation_payload(_memo(engine, run_id), run_id, record)


async def load_published(engine: EngineBase, run_id: str, key: str) -> bytes | None:
    """The stored value run ``run_id`` published under ``key``, read from the
    KV or, once the run has terminated, its archive; None if there is none."""
    engine = engine.for_run(run_id)
    kv = engine.queue.kv.internal()
    data = kv.get(published_prefix(run_id) + key.encode())
    if data is None and _terminated(engine, run_id):
        data = (await read_archive(engine, run_id)).published.get(key)
    return data
