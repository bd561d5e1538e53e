"""The journal of a workflow run: what each position of the workflow did.

Every ``@step`` call, durable wait and child run of a workflow takes a
*position* (0, 1, 2... in call order). Its `Entry` is one KV key of the
store, under the engine's reserved prefix::

    workflow/journal/{run_id}/{position:010d}

written through the queue's internal KV namespace. A step's result is
journaled by `Journal.write_later`: its commit joins the open group at once
and is awaited at the run's next effectful point (`RunContext.journaled`:
before the next step's body, a durable wait, a signal, a child start...),
so it is durable before the workflow acts on it, and the entry of a step
the workflow returns right after rides one group commit with the run's
terminal record (later in the same log, so the record's durability implies
the entry's). A commit nobody awaits is flushed within `FLUSH_WITHIN`
seconds. Other entries are one awaited commit each (concurrent runs share
flushes by group commit). A delivery loads the
whole journal with one scan when it starts; a replayed position answers
from it without running anything.

An entry is a MessagePack map with named fields (``v`` the format version;
absent fields take their defaults, unknown ones are ignored):

| field | meaning |
|---|---|
| ``name`` | a step; ``durable.sleep``; ``durable.wait_for_signal``; a child's workflow; a patch |
| ``kind`` | ``step``, ``start`` (began), ``sleep``, ``signal``, ``child``, ``patch`` |
| ``ok`` / ``err`` | the encoded result / exception (codec bytes), once there is one |
| ``time`` | ms: when written; a sleep's wake-up time; a signal wait's deadline |
| ``key`` | a signal wait's correlation key; a child's run id |
| ``suspended`` | the step number of the delivery that suspended on this wait |
| ``ref`` | ``ok``/``err`` are in the run memo (values over `INLINE_MAX`) |
| ``started`` | ms: when a step's first attempt began (0: not recorded) |
| ``attempts`` | how many attempts a step took (0: not recorded) |

A ``patch`` entry is the marker ``durable.patched(id)`` records when a run
reaches it under code that has the patch (`durable.decorators.patching`):
it takes a position like a step, but the other calls step over it (a
marker whose ``patched()`` call was deleted from the code does not shift
them). A ``patch`` entry is written with format version 2 (older readers
refuse it by version, naming it); the other kinds still write version 1.

Values larger than `INLINE_MAX` bytes go to the run memo first (one object
write) and the entry keeps a reference. An entry that cannot be decoded
raises `CorruptEngineRecord` naming the run and the position.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import msgpack

from durable.engine.memo import Memo
from durable.engine.runs import RESERVED_KV_PREFIX
from durable.errors import CorruptEngineRecord
from durable.store.kv import KvNamespace
from durable.store.log import Durable
from durable.store.log.batch import WriteBatch

__all__ = [
    "CHILD",
    "FLUSH_WITHIN",
    "INLINE_MAX",
    "JOURNAL_VERSION",
    "PATCH",
    "SIGNAL",
    "SLEEP",
    "START",
    "STEP",
    "Entry",
    "Journal",
    "decode_entry",
    "encode_entry",
    "entry_key",
    "journal_prefix",
    "offload",
]

STEP = "step"
START = "start"
SLEEP = "sleep"
SIGNAL = "signal"
CHILD = "child"
PATCH = "patch"
_KINDS = frozenset({STEP, START, SLEEP, SIGNAL, CHILD, PATCH})

#: The format version of journal entries (the newest this durable reads).
JOURNAL_VERSION = 2
#: The version of entries of every kind but ``patch`` (readable by older durables).
_BASE_VERSION = 1
#: Results and errors up to this many bytes stay in the KV entry.
INLINE_MAX = 64 * 1024
#: Seconds within which an entry written by `Journal.write_later` starts
#: its flush when nothing else does (the workflow computes, or awaits
#: something that is no durable operation): the bound on how long a
#: finished step stays unjournaled in a process that keeps running.
FLUSH_WITHIN = 0.005


def journal_prefix(run_id: str) -> bytes:
    """The KV prefix of every journal entry of run ``run_id``."""
    return RESERVED_KV_PREFIX + b"journal/" + run_id.encode() + b"/"


def entry_key(run_id: str, position: int) -> bytes:
    """The KV key of the entry at ``position`` of run ``run_id``."""
    return journal_prefix(run_id) + b"%010d" % position


@dataclass(frozen=True, slots=True)
class Entry:
    """What one position of a run did; see the module docstring."""

    name: str
    kind: str
    ok: bytes | None = None
    err: bytes | None = None
    time: int = 0
    key: str | None = None
    suspended: int | None = None
    ref: bool = False
    #: When a step's first attempt began (engine-clock ms; 0: not recorded).
    started: int = 0
    #: How many attempts a step took (0: not recorded, e.g. a replayed fork).
    attempts: int = 0

    @property
    def resolved(self) -> bool:
        """True once the position has a result or an error."""
        return self.ok is not None or self.err is not None

    def describe(self) -> str:
        """The call this entry records, for non-determinism errors."""
        if self.kind == PATCH:
            return f"durable.patched({self.name!r})"
        return self.name if self.kind in (STEP, START) else f"{self.kind} {self.name}"

    def replace(self, **changes: Any) -> Entry:
        """A copy with ``changes``."""
        return dataclasses.replace(self, **changes)


def encode_entry(entry: Entry) -> bytes:
    """The stored bytes of ``entry``."""
    version = JOURNAL_VERSION if entry.kind == PATCH else _BASE_VERSION
    m: dict[str, Any] = {"v": version, "name": entry.name, "kind": entry.kind}
    if entry.ok is not None:
        m["ok"] = entry.ok
    if entry.err is not None:
        m["err"] = entry.err
    if entry.time:
        m["time"] = entry.time
    if entry.key is not None:
        m["key"] = entry.key
    if entry.suspended is not None:
        m["suspended"] = entry.suspended
    if entry.ref:
        m["ref"] = True
    if entry.started:
        m["started"] = entry.started
    if entry.attempts:
        m["attempts"] = entry.attempts
    packed: bytes = msgpack.packb(m, use_bin_type=True)
    return packed


def decode_entry(data: bytes, run_id: str, position: int) -> Entry:
    """`encode_entry` reversed; `CorruptEngineRecord` naming the run and position."""
    what = f"journal entry {position} of run {run_id!r}"
    try:
        m = msgpack.unpackb(data, raw=False)
        if not isinstance(m, dict):
            raise ValueError(f"a {type(m).__name__}, not a map")
        version = m.get("v", JOURNAL_VERSION)
        if not isinstance(version, int) or version > JOURNAL_VERSION:
            raise ValueError(f"format version {version!r}; this durable reads {JOURNAL_VERSION}")
        entry = Entry(
            name=m["name"],
            kind=m["kind"],
            ok=m.get("ok"),
            err=m.get("err"),
            time=m.get("time", 0),
            key=m.get("key"),
            suspended=m.get("suspended"),
            ref=m.get("ref", False),
            started=m.get("started", 0),
            attempts=m.get("attempts", 0),
        )
        _check(entry)
    except (ValueError, TypeError, KeyError, msgpack.UnpackException) as e:
        raise CorruptEngineRecord(what, str(e) or type(e).__name__) from None
    return entry


def _check(entry: Entry) -> None:
    if not isinstance(entry.name, str) or entry.kind not in _KINDS:
        raise ValueError(f"bad name or kind ({entry.name!r}, {entry.kind!r})")
    for value in (entry.ok, entry.err):
        if value is not None and not isinstance(value, bytes):
            raise ValueError("ok and err must be bytes")
    if not isinstance(entry.time, int) or isinstance(entry.time, bool):
        raise ValueError(f"time must be an int, got {entry.time!r}")
    if entry.key is not None and not isinstance(entry.key, str):
        raise ValueError(f"key must be a str, got {entry.key!r}")
    if entry.suspended is not None and not isinstance(entry.suspended, int):
        raise ValueError(f"suspended must be an int, got {entry.suspended!r}")
    if not isinstance(entry.ref, bool):
        raise ValueError(f"ref must be a bool, got {entry.ref!r}")
    for name in ("started", "attempts"):
        value = getattr(entry, name)
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise ValueError(f"{name} must be an int >= 0, got {value!r}")


class Journal:
    """The journal of one run: its entries by position, and writes."""

    def __init__(self, kv: KvNamespace, memo: Memo, run_id: str, entries: dict[int, Entry]) -> None:
        self._kv = kv
        self._memo = memo
        self.run_id = run_id
        self._entries = entries
        self._staged: dict[bytes, bytes] = {}
        self._last = max(entries, default=-1)

    @classmethod
    def load(cls, kv: KvNamespace, memo: Memo, run_id: str) -> Journal:
        """Every entry of run ``run_id``, read from the store's memory state
        (what every commit so far has written); ``kv`` is the internal view."""
        return cls.decode(kv, memo, run_id, kv.snapshot(journal_prefix(run_id)))

    @classmethod
    def decode(
        cls, kv: KvNamespace, memo: Memo, run_id: str, rows: Iterable[tuple[bytes, bytes]]
    ) -> Journal:
        """The journal of run ``run_id`` from its stored ``(key, entry)`` rows."""
        prefix = journal_prefix(run_id)
        entries: dict[int, Entry] = {}
        for key, value in rows:
            tail = key[len(prefix) :]
            if not key.startswith(prefix) or not tail.isdigit():
                raise CorruptEngineRecord(f"journal of run {run_id!r}", f"unexpected key {key!r}")
            position = int(tail)
            entries[position] = decode_entry(value, run_id, position)
        return cls(kv, memo, run_id, entries)

    @property
    def kv(self) -> KvNamespace:
        """The internal KV view the journal reads and writes."""
        return self._kv

    def get(self, position: int) -> Entry | None:
        """The entry at ``position``, or None."""
        return self._entries.get(position)

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def last_position(self) -> int:
        """The highest position with an entry (-1: none)."""
        return self._last

    def entries(self) -> list[tuple[int, Entry]]:
        """Every entry, by position."""
        return sorted(self._entries.items())

    def children(self) -> list[str]:
        """The run ids of every child run this run started."""
        return [e.key for _, e in self.entries() if e.kind == CHILD and e.key]

    def stage(self, key: bytes, value: bytes) -> None:
        """Put ``key = value`` (a reserved record of the run) in the commit of
        the next `write`, not in one of its own."""
        self._staged[key] = value

    def check_writable(self) -> None:
        """Raise what a `write` made now would raise at its commit before
        writing anything (`KvNamespace.check_writable`); cheap, in memory."""
        self._kv.check_writable()

    async def write(
        self,
        position: int,
        entry: Entry,
        extra: Callable[[], Mapping[bytes, bytes]] | None = None,
    ) -> Entry:
        """Journal ``entry`` at ``position`` (in one commit with what was
        staged, `stage`, and the puts ``extra()`` returns, called in the
        synchronous section that stages the commit); durable when this
        returns.

        A result or error over `INLINE_MAX` bytes goes to the run memo
        first. Returns the entry as stored.
        """
        stored, durable = await self.write_later(position, entry, extra)
        self._kv.flush_within(0)  # its group's flush starts now
        await durable
        return stored

    async def write_later(
        self,
        position: int,
        entry: Entry,
        extra: Callable[[], Mapping[bytes, bytes]] | None = None,
    ) -> tuple[Entry, Durable]:
        """`write`, without waiting for the commit: it joins the open group
        (applied in memory at once, so later commits are ordered after it)
        and rides the next flush, or starts one within `FLUSH_WITHIN`
        seconds. Returns the entry as stored and the commit's `Durable`,
        which the caller awaits before anything builds on the entry.
        Raises what the commit raises at once (a stopped writer).
        """
        stored = await offload(self._memo, position, entry) if oversized(entry) else entry
        kv = self._kv
        batch = kv.stage_put(WriteBatch(), entry_key(self.run_id, position), encode_entry(stored))
        for key, value in self._staged.items():
            kv.stage_put(batch, key, value)
        if extra is not None:
            for key, value in extra().items():
                kv.stage_put(batch, key, value)
        durable = kv.commit(batch, lazy=True, within=FLUSH_WITHIN)
        self._staged.clear()
        self._entries[position] = stored
        self._last = max(self._last, position)
        return stored, durable

    def mark(self, position: int, entry: Entry) -> None:
        """Journal the small ``entry`` (a patch marker) at ``position`` in a
        commit made now, without waiting for it to be durable: the store
        applies commits in order, so it is durable before anything this run
        journals later (and, if the process dies first, nothing later is).
        Raises what the commit raises at once (a stopped writer)."""
        if entry.ok is not None or entry.err is not None:
            raise ValueError("only an entry with no value is marked")
        kv = self._kv
        batch = kv.stage_put(WriteBatch(), entry_key(self.run_id, position), encode_entry(entry))
        kv.commit(batch)  # fire and forget: later commits are ordered after it
        self._entries[position] = entry
        self._last = max(self._last, position)

    async def values(self, position: int, entry: Entry) -> tuple[bytes | None, bytes | None]:
        """``(ok, err)`` of ``entry``, read from the run memo if it was offloaded."""
        if not entry.ref:
            return entry.ok, entry.err
        stored = await self._memo.get(_memo_key(position))
        if not isinstance(stored, dict):
            raise CorruptEngineRecord(
                f"journal entry {position} of run {self.run_id!r}",
                "its value in the run memo is missing",
            )
        ok, err = stored.get("ok"), stored.get("err")
        if not isinstance(ok, bytes | None) or not isinstance(err, bytes | None):
            raise CorruptEngineRecord(
                f"journal entry {position} of run {self.run_id!r}",
                "its value in the run memo is not bytes",
            )
        return ok, err


def oversized(entry: Entry) -> bool:
    """Whether ``entry``'s result or error is over `INLINE_MAX` bytes (the
    run memo keeps it: `offload`)."""
    return (entry.ok is not None and len(entry.ok) > INLINE_MAX) or (
        entry.err is not None and len(entry.err) > INLINE_MAX
    )


async def offload(memo: Memo, position: int, entry: Entry) -> Entry:
    """``entry`` as the journal of ``memo``'s run stores it at ``position``: a
    result or error over `INLINE_MAX` bytes is written to the run memo first
    (durable on return) and the entry keeps a reference."""
    if not oversized(entry):
        return entry
    await memo.put(_memo_key(position), {"ok": entry.ok, "err": entry.err})
    return entry.replace(
        ok=b"" if entry.ok is not None else None,
        err=b"" if entry.err is not None else None,
        ref=True,
    )


def _memo_key(position: int) -> str:
    return f"durable.journal/{position}"
