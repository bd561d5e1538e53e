"""`SegmentObjectStore`: a local directory whose log is append-only segment files.

The object-store log (`durable.store.log`) writes each group commit as one
object, ``log/<seq>``; on a local disk that costs a temporary file, an
fsync, a link and a directory fsync. This store keeps every other name
(checkpoints, blobs, inboxes, memo...) as files of a `LocalObjectStore`
and serves the log's names from *segment files* instead, so the log above
it runs unchanged:

- ``create("log/<seq>", data)`` appends one record to the current segment
  with one ``write`` to a file opened ``O_DSYNC`` (the write returns once
  its data is durable, as after ``fdatasync``, one system call less): one
  append and one sync per group commit (in a worker thread; on the event
  loop's thread when the group is small or nothing else is ready there,
  and the disk is quick: `INLINE_APPEND_MAX`).
- ``get`` / ``list`` of log names read the records back.
- ``delete`` of log names (the log's trim after a checkpoint) removes the
  segments whose records all precede the newest name deleted (never the
  current one): the log is only ever trimmed from the front.

A partitioned store keeps one log per partition, below ``p000/``, ``p001/``
...: ``p003/log/<seq>`` lives in ``p003/segments/`` with its own lock, so
a `PrefixedObjectStore` over this store gives each partition a segment log
(`claim_log` takes the prefix).

**Layout** (below the root, or a partition's prefix): ``segments/<first
seq:020d>.seg`` and the lock file ``segments/lock``. An entry is
``magic | seq (u64) | length (u32) | crc32 (u32) | body``, big-endian; the
CRC (`zlib.crc32`) covers the sequence number, the length and the body.
The magic ``DSEG`` marks a record (its body is the log object's bytes,
itself framed and checksummed); ``DROL`` (no body) marks a *roll*: the log
goes on in the segment named by its sequence number.

**One slot per sequence number, first come first served.** Each sequence
number is a slot, and the first entry for it in the file (in the file's
append order, which ``O_APPEND`` makes total) takes it. An entry whose slot
is already taken is a *loser* and is skipped by every reader: a writer that
was stalled (``SIGSTOP``, a long GC) and woke after another took over
appends at most such losers, so it can never change a record another
process has read. This is the object log's create-if-absent, on one file:
a writer's append is followed by a check that its entry took the slot
(one ``fstat``, or a re-read when another process appended meanwhile); a
lost slot is `ObjectExists`, which the log turns into `Fenced` (or, when
opening, into "read theirs and take the next"). An entry for a slot beyond
the next free one, or a bad entry with a winning entry after it, is
`CorruptObject` naming the file and the offset; nothing is truncated.

**Rolling.** Once a segment holds `SEGMENT_BYTES` (4 MiB, the log's default
checkpoint interval, so a checkpoint soon covers a closed segment) the
writer appends a roll entry for its next slot (itself first come first
served) and creates the next segment; the old segment is fdatasynced and
the new file's directory entry fsynced first. A roll that is not followed
by its segment yet (a crash in between) or a segment with no entry yet is
simply the end of the log.

**Writing.** `claim_log` (called by `LogWriter.open` before it loads)
takes an exclusive ``fcntl.flock`` on ``segments/lock``; while a live
process holds it the claim raises `LogLocked` (a `Fenced`) naming the
file. The kernel releases the lock when its holder dies, kill -9 included,
so a standby takes over at once. ``claim_log(takeover=True)`` is the
engine's takeover, made once its ownership protocol judged the holder gone
(a stopped process keeps its lock; `durable.cluster.owner`): it replaces
the lock file by a new, locked one and goes on; the stalled holder is
fenced by the slots as above, and by the open marker the log writes as a
record. Holding the lock, the claim scans the log: a bad entry at the very
end of the last segment (an append cut short by a crash: a short header, a
body shorter than its length, a CRC that fails on the last entry, or zeros
to the end) is a *torn tail*, truncated (``ftruncate`` + ``fdatasync``)
together with any losers after the last winner; a takeover never
truncates (the holder may be writing). A torn entry was never reported
durable, so nothing committed is lost and no record is ever half applied.
The claim also fdatasyncs the last segment, so that records a killed writer
appended but had not synced are durable before they are built on.

**Reading** (any process, no lock): the same scan, except that a torn tail
is simply not there yet, and a chain that breaks at a segment a trim
removed while the directory was listed is followed again from a new
listing. A reader in another process can see a record once
it is written, shortly before its ``write`` returns: it survives the
writer's crash (the page cache outlives the process) but not a power cut in
that window, unlike the object log, where a reader sees only synced
objects.

**Choosing the medium.** A plain path or ``file://`` URL of a directory
opens this medium when the directory (or a partition of it) already holds
``segments/``, or when it holds no log yet and is on a local filesystem;
a directory whose log is objects (``log/``) keeps the object log, and
`claim_log` refuses to mix the two. The URL ``segments:///path`` asks for
this medium explicitly. **Network filesystems** (NFS, SMB/CIFS, 9p,
sshfs...: `NETWORK_FILESYSTEMS`, read from ``/proc/self/mountinfo``),
where ``flock`` and ``fdatasync`` cannot be trusted, are refused at
`claim_log` with `UnsafeFilesystem`; a plain path there keeps the object
log, whose fencing needs only an atomic create.
"""

from __future__ import annotations

import asyncio
import bisect
import builtins
import contextlib
import errno
import fcntl
import os
import re
import secrets
import struct
import threading
import time
import zlib
from collections.abc import Iterable
from dataclasses import dataclass, field

from durable.errors import (
    CorruptObject,
    LogLocked,
    ObjectExists,
    ObjectNotFound,
    ObjectStoreError,
    UnsafeFilesystem,
)
from durable.store.idle import loop_idle
from durable.store.objects.base import ObjectLock, ObjectStore
from durable.store.objects.local import LocalObjectStore
from durable.store.objects.mounts import NETWORK_FILESYSTEMS, filesystem_type

__all__ = [
    "LOCK_NAME",
    "NETWORK_FILESYSTEMS",
    "SEGMENT_BYTES",
    "SEGMENT_DIR",
    "SegmentObjectStore",
    "decode_records",
    "encode_record",
    "encode_roll",
    "has_object_log",
    "has_segments",
]

#: Directory (below the root or a partition's prefix) of the segment files and the lock.
SEGMENT_DIR = "segments"
#: The writer's lock file (below the root or a partition's prefix).
LOCK_NAME = f"{SEGMENT_DIR}/lock"
#: Default size at which a segment is rolled.
SEGMENT_BYTES = 4 << 20

_LOG_RE = re.compile(r"^((?:p\d+/)?)log/(\d{20})$")
_OWN_RE = re.compile(r"^(?:p\d+/)?segments(?:/|$)")
_PREFIX_RE = re.compile(r"^(?:p\d+/)?$")
_WIDTH = 20
_SUFFIX = ".seg"
_MAGIC = b"DSEG"
_ROLL = b"DROL"
_HEADER = struct.Struct(">4sQII")
#: How long a takeover waits for a torn tail that a live writer is still writing.
_TORN_WAIT = 2.0
#: Listings of a log a refresh makes at most while trims keep removing the
#: segment its chain reached (`_Segments.refresh`).
_RELISTS = 50
#: Appends run on the event loop's thread, not a worker thread, while recent
#: appends (one ``O_DSYNC`` ``write``) took less than this (seconds, a moving
#: average) and the group is small (`INLINE_APPEND_BYTES`) or the loop has
#: nothing else ready: a run going step by step, or a lone start, then waits
#: for the disk alone, not for a thread's hand-over too. A large group (many
#: runs at once) is synced in a thread while the loop goes on with the rest,
#: and so is an append that must first roll the segment or re-scan the log
#: after another writer's append (which may wait for its torn tail).
INLINE_APPEND_MAX = 0.001
#: The largest group commit appended on the loop's thread while other work
#: is ready there (`INLINE_APPEND_MAX`).
INLINE_APPEND_BYTES = 4096


def encode_record(seq: int, body: bytes) -> bytes:
    """One framed record: header (magic, seq, length, CRC) then ``body``."""
    return _encode(_MAGIC, seq, body)


def encode_roll(seq: int) -> bytes:
    """A roll entry: slot ``seq`` and the log after it are in segment ``seq``."""
    return _encode(_ROLL, seq, b"")


def _encode(magic: bytes, seq: int, body: bytes) -> bytes:
    crc = zlib.crc32(body, zlib.crc32(struct.pack(">QI", seq, len(body))))
    return _HEADER.pack(magic, seq, len(body), crc) + body


@dataclass(slots=True)
class _Scan:
    """What `decode_records` found in one segment's bytes."""

    #: ``(seq, offset of the body, length)`` of each winning record, in order.
    records: list[tuple[int, int, int]] = field(default_factory=list)
    #: Where the scanned entries end (winners and losers).
    end: int = 0
    #: Where the last winning entry ends.
    won_end: int = 0
    #: The slot of a winning roll entry (the segment then ends), if any.
    rolled: int | None = None
    #: Offset of a bad entry at the end (a torn tail), if any.
    torn: int | None = None


def _entry_at(data: bytes, pos: int) -> tuple[bytes, int, int, int] | str:
    """``(magic, seq, body offset, length)`` of a good entry at ``pos``, else why not."""
    if len(data) - pos < _HEADER.size:
        return "short header"
    magic, seq, length, crc = _HEADER.unpack_from(data, pos)
    if magic not in (_MAGIC, _ROLL) or (magic == _ROLL and length):
        return "bad magic"
    body_at = pos + _HEADER.size
    if body_at + length > len(data):
        return f"body cut short ({length} bytes declared)"
    body = memoryview(data)[body_at : body_at + length]
    if zlib.crc32(body, zlib.crc32(struct.pack(">QI", seq, length))) != crc:
        return "checksum mismatch"
    return magic, seq, body_at, length


def _winner_after(data: bytes, pos: int, next_seq: int) -> bool:
    """Whether a whole entry that would take slot ``next_seq`` or later starts after ``pos``."""
    at = data.find(_MAGIC[:1], pos + 1)
    while at >= 0:
        found = _entry_at(data, at)
        if not isinstance(found, str) and found[1] >= next_seq:
            return True
        at = data.find(_MAGIC[:1], at + 1)
    return False


def decode_records(path: str, data: bytes, base: int = 0, *, first_seq: int, last: bool) -> _Scan:
    """Check the entries of segment ``path`` in ``data`` (its bytes from
    file offset ``base``, an entry boundary).

    ``first_seq`` is the first free slot at ``base``; offsets in the result
    are the file's. Losers (entries for a slot already taken) are skipped;
    the scan stops after a winning roll entry. A bad entry is a torn tail
    (`_Scan.torn`) when ``last`` is set (the newest segment) and no entry
    that would win a slot follows it: an append cut short. Anything else
    (a bad entry with a winner after it, or in a segment before the last, or
    an entry for a slot beyond the next free one) raises `CorruptObject`
    naming ``path`` and the offset.
    """
    scan = _Scan(end=base, won_end=base)
    pos, seq = 0, first_seq
    while pos < len(data):
        found = _entry_at(data, pos)
        if isinstance(found, str):
            if last and not _winner_after(data, pos, seq):
                scan.torn = base + pos
                return scan
            raise CorruptObject(path, f"bad record at offset {base + pos}: {found}")
        magic, got, body_at, length = found
        if got > seq:
            raise CorruptObject(
                path, f"bad record at offset {base + pos}: holds seq {got}, expected {seq}"
            )
        pos = body_at + length
        scan.end = base + pos
        if got < seq:
            continue  # a loser: its slot was taken before it
        scan.won_end = scan.end
        if magic == _ROLL:
            scan.rolled = seq
            return scan
        scan.records.append((seq, base + body_at, length))
        seq += 1
    return scan


@dataclass(slots=True)
class _Segment:
    first: int
    path: str
    #: ``(body offset, length)`` of each record, record i holding seq first + i.
    records: list[tuple[int, int]] = field(default_factory=list)
    end: int = 0  # where the scanned entries end
    won_end: int = 0  # where the last winning entry ends
    rolled: bool = False  # a roll entry ends it: the log goes on in `next_seq`

    @property
    def next_seq(self) -> int:
        return self.first + len(self.records)


class _Defer(Exception):
    """An append on the loop's thread that must first roll or re-scan the
    log: made in a thread instead (`_Segments.append`)."""


class _Taken(Exception):
    """The slot was taken by another writer's entry."""


class _Segments:
    """The index of one log's segments, and its writer's file; every method
    runs in a thread under ``lock``."""

    def __init__(self, directory: str, segment_bytes: int) -> None:
        self.dir = directory
        self.segment_bytes = segment_bytes
        self.segs: list[_Segment] = []
        self.lock = threading.Lock()
        self.fd: int | None = None  # the writer's current segment, open for appending
        self.fd_path = ""  # its path
        self.at = 0  # where the writer expects its next entry to land in `fd`
        self.broken: str | None = None
        self.append_seconds = INLINE_APPEND_MAX  # moving average of `append`

    def quick(self) -> bool:
        """Whether recent appends took less than `INLINE_APPEND_MAX`."""
        return self.append_seconds < INLINE_APPEND_MAX

    # ------------------------------------------------------------- reading

    def refresh(self, *, recover: bool = False) -> None:
        """Bring the index up to date with the directory (see the module doc):
        follow the chain of segments from the oldest, through each roll. A
        chain broken at a segment that a trim removed while we listed (a
        listing made during deletions may hold it, or miss its successors)
        is followed again from a new listing."""
        for _ in range(_RELISTS):
            segs = self._follow(recover)
            if segs is not None:
                self.segs = segs
                return
        raise ObjectStoreError(  # transient: the trims outran every listing
            f"the segment log in {self.dir} kept changing while it was listed"
        )

    def _follow(self, recover: bool) -> list[_Segment] | None:
        """The chain of segments of one listing; None when it breaks at a
        segment that is gone by now (list again)."""
        names: dict[int, str] = {}
        with contextlib.suppress(FileNotFoundError):
            for n in os.listdir(self.dir):
                first = _first_seq(n)
                if first is not None:
                    names[first] = os.path.join(self.dir, n)
        if not names:
            return []
        known = {s.path: s for s in self.segs}
        segs: list[_Segment] = []
        path: str | None = names[min(names)]
        while path is not None:
            seg = known.get(path) or _Segment(_first_seq(os.path.basename(path)) or 0, path)
            segs.append(seg)
            if not seg.rolled:
                cut = recover and not any(f > seg.first for f in names)
                self._scan(seg, last=True, recover=cut)
                if not seg.rolled and seg.next_seq in names and _ends_clean(seg):
                    # Made before roll entries (an earlier release): the next
                    # segment starts right after its last record, nothing after.
                    seg.rolled = True
            path = names.get(seg.next_seq) if seg.rolled else None
        later = sorted(f for f in names if f > segs[-1].first)
        if later and not segs[-1].rolled:
            if not os.path.exists(segs[-1].path):
                return None  # trimmed while we listed
            # A segment is made only after the roll entry that names it is
            # durable: this one's end is not a torn tail.
            raise CorruptObject(
                segs[-1].path,
                f"bad record at offset {segs[-1].end}: the log goes on in "
                f"{os.path.basename(names[later[0]])}, but no roll entry leads there",
            )
        return segs

    def _scan(self, seg: _Segment, *, last: bool, recover: bool) -> None:
        try:
            with open(seg.path, "rb") as f:
                f.seek(seg.end)
                tail = f.read()
        except FileNotFoundError:
            return  # removed by a trim while we listed
        scan = decode_records(seg.path, tail, seg.end, first_seq=seg.next_seq, last=last)
        seg.records.extend((off, length) for _, off, length in scan.records)
        seg.end = scan.end
        seg.won_end = scan.won_end
        seg.rolled = scan.rolled is not None
        if recover and not seg.rolled and os.path.getsize(seg.path) > seg.won_end:
            # A torn tail, or losers after the last winner: cut them (the claim
            # holds the lock, so their writers are dead or fenced).
            with open(seg.path, "r+b") as f:
                f.truncate(seg.won_end)
                os.fdatasync(f.fileno())
            seg.end = seg.won_end

    def find(self, seq: int) -> tuple[str, int, int] | None:
        """``(path, offset, length)`` of record ``seq`` in the index, or None."""
        i = bisect.bisect_right([s.first for s in self.segs], seq) - 1
        if i < 0:
            return None
        seg = self.segs[i]
        k = seq - seg.first
        if k >= len(seg.records):
            return None
        return (seg.path, *seg.records[k])

    def might_have_grown(self) -> bool:
        """Cheap: whether the last segment grew or the next one exists (a stat or two)."""
        if not self.segs:
            return os.path.isdir(self.dir)
        last = self.segs[-1]
        if last.rolled:
            return os.path.exists(self._path(last.next_seq))
        try:
            return os.stat(last.path).st_size != last.end
        except FileNotFoundError:
            return True

    def seqs(self) -> list[int]:
        return [s.first + i for s in self.segs for i in range(len(s.records))]

    # ------------------------------------------------------------- writing

    def open_for_append(self, *, recover: bool) -> None:
        """Scan (truncating a torn tail when ``recover``), sync and open the
        last segment for appending; a takeover (not ``recover``) first waits
        out a torn tail that a live writer is still appending."""
        os.makedirs(self.dir, exist_ok=True)
        self.segs = []
        self.refresh(recover=recover)
        if not recover:
            self._settle_tail()
        if self.segs and not self.segs[-1].rolled:
            self._open(self.segs[-1].path)

    def _settle_tail(self) -> None:
        """A torn tail that a live writer is completing: wait for it. One that
        stays unchanged (the file's size too) for `_TORN_WAIT` seconds is a
        dead writer's (a stopped process never leaves a write half done; a
        killed one can): cut it, unless the file grew at the last moment."""
        deadline, size = time.monotonic() + _TORN_WAIT, -1
        while self.segs and self._torn(self.segs[-1]):
            last = self.segs[-1]
            now = os.path.getsize(last.path)
            if now != size:
                deadline, size = time.monotonic() + _TORN_WAIT, now
            elif time.monotonic() > deadline:
                with open(last.path, "r+b") as f:
                    if os.fstat(f.fileno()).st_size == size:
                        f.truncate(last.end)
                        os.fdatasync(f.fileno())
                self.refresh()
                continue
            time.sleep(0.005)
            self.refresh()

    def _torn(self, seg: _Segment) -> bool:
        return not seg.rolled and os.path.getsize(seg.path) > seg.end

    def _open(self, path: str) -> None:
        self.close()
        self.fd = os.open(
            path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC | os.O_DSYNC, 0o644
        )
        self.fd_path = path
        os.fdatasync(self.fd)  # what a dead or fenced writer appended is durable first
        self.at = os.fstat(self.fd).st_size

    def append(self, seq: int, body: bytes, *, inline: bool = False) -> None:
        """Append record ``seq`` (rolling first if due), durable on return;
        `_Taken` if another writer's entry took the slot. ``inline`` (on the
        event loop's thread): `_Defer`, before writing anything, when the
        append would first roll or re-scan the log (which may wait for
        another writer's torn tail), so that it runs in a thread instead."""
        if self.broken is not None:
            raise OSError(errno.EIO, self.broken)
        began = time.perf_counter()
        self._check_next(seq)
        if self.fd is None or self.at >= self.segment_bytes:
            if inline:
                raise _Defer
            self._roll(seq)
        else:  # after a re-scan, maybe in a newer segment: compete there
            self._sync_position(seq, inline=inline)
        entry = encode_record(seq, body)
        at = self._write(entry, seq)
        seg = self._mine()
        if at is not None:  # alone in the file: no re-scan needed
            seg.records.append((at + _HEADER.size, len(body)))
            seg.end = seg.won_end = self.at
        self.append_seconds += (time.perf_counter() - began - self.append_seconds) / 8

    def _check_next(self, seq: int) -> None:
        last = self.segs[-1] if self.segs else None
        if last is not None and seq < last.next_seq:
            raise _Taken(seq)
        if last is not None and seq != last.next_seq:
            raise ValueError(f"log record {seq} does not follow {last.next_seq - 1}")

    def _sync_position(self, seq: int, *, inline: bool = False) -> bool:
        """Before an append: if another process appended to our file since
        our last entry, re-scan (losers: go on after them; our slot taken:
        `_Taken`; ``inline``: `_Defer` instead); True when the log moved on
        to a newer segment, which the writer then opens (making it, if only
        its roll entry exists)."""
        assert self.fd is not None
        if os.fstat(self.fd).st_size == self.at:
            return False
        if inline:
            raise _Defer
        self.refresh()
        self._settle_tail()
        self._check_next(seq)
        last = self.segs[-1]
        if last.path == self.fd_path and not last.rolled:
            self.at = os.fstat(self.fd).st_size
            return False
        if last.rolled:
            self._start(last.next_seq)
        else:
            self._open(last.path)
        return True

    def _write(self, entry: bytes, seq: int) -> int | None:
        """Append ``entry`` for slot ``seq`` and sync; where it landed when no
        other process appended meanwhile (the caller updates the index),
        None when the index was re-scanned instead; `_Taken` if the slot
        went to another entry."""
        assert self.fd is not None
        at = self.at
        try:
            view = memoryview(entry)
            while view:  # O_DSYNC: each write returns once durable
                view = view[os.write(self.fd, view) :]
        except OSError as exc:
            self._undo(at, exc)
            raise
        size = os.fstat(self.fd).st_size
        self.at = size
        if size == at + len(entry):
            return at
        # Another process appended too: the file's order says who took the slot.
        self.refresh()
        seg = self._mine()
        if entry[:4] == _ROLL:
            # Two rolls of one slot are the same bytes: either may stand.
            won = seg.rolled and seg.next_seq == seq
            if not won or not _entry_is(seg.path, seg.won_end - len(entry), entry):
                raise _Taken(seq)
            return None
        where = self.find(seq)
        if where is None or where[0] != seg.path:
            raise _Taken(seq)
        if not _entry_is(where[0], where[1] - _HEADER.size, entry):
            raise _Taken(seq)
        return None

    def _mine(self) -> _Segment:
        """The indexed segment the writer's file is; `_Taken` if the chain left it."""
        for seg in reversed(self.segs):
            if seg.path == self.fd_path:
                return seg
        raise _Taken(-1)

    def _undo(self, at: int, exc: OSError) -> None:
        """After a failed append: cut the segment back, or refuse all later ones."""
        assert self.fd is not None
        if exc.errno is not None and exc.errno != errno.EIO:
            try:
                os.ftruncate(self.fd, at)
                os.fdatasync(self.fd)
                self.at = at
                return
            except OSError:
                pass
        # A failed fdatasync leaves the page cache's state unknown: append no more.
        self.broken = f"an append failed ({exc}); reopen the store"

    def _roll(self, seq: int) -> None:
        """End the current segment with a roll entry for slot ``seq`` (if
        there is a current segment) and open segment ``seq``."""
        if self.fd is not None:
            if self._sync_position(seq):
                return  # another writer rolled: the log goes on where it said
            at = self._write(encode_roll(seq), seq)
            seg = self._mine()
            if at is not None:
                seg.end = seg.won_end = self.at
                seg.rolled = True
        self._start(seq)

    def _start(self, seq: int) -> None:
        """Open segment ``seq`` (a roll entry leads to it), making it if absent."""
        self._open(self._path(seq))
        _fsync_dir(self.dir)
        if not self.segs or self.segs[-1].rolled:
            self.segs.append(_Segment(seq, self._path(seq)))
        if self.at:
            self.refresh()  # another writer wrote in it first
            self._check_next(seq)

    def trim(self, through: int) -> None:
        """Remove every segment but the last whose records all precede ``through``."""
        self.refresh()
        doomed = [s for s in self.segs[:-1] if s.next_seq - 1 <= through]
        if not doomed:
            return
        for seg in doomed:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(seg.path)
        _fsync_dir(self.dir)
        self.segs = [s for s in self.segs if s not in doomed]

    def close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None

    def _path(self, seq: int) -> str:
        return os.path.join(self.dir, f"{seq:0{_WIDTH}d}{_SUFFIX}")


def _ends_clean(seg: _Segment) -> bool:
    """Whether ``seg``'s file ends right after its last winning entry."""
    try:
        return bool(seg.records) and os.path.getsize(seg.path) == seg.won_end
    except FileNotFoundError:
        return False


def _entry_is(path: str, offset: int, entry: bytes) -> bool:
    with open(path, "rb") as f:
        return os.pread(f.fileno(), len(entry), offset) == entry


def _first_seq(name: str) -> int | None:
    stem = name[: -len(_SUFFIX)] if name.endswith(_SUFFIX) else ""
    return int(stem) if len(stem) == _WIDTH and stem.isdigit() else None


def _log_name(prefix: str, seq: int) -> str:
    return f"{prefix}log/{seq:0{_WIDTH}d}"


def _fsync_dir(directory: str) -> None:
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _partition_dirs(root: str) -> list[str]:
    try:
        return [
            os.path.join(root, n) for n in os.listdir(root) if re.fullmatch(r"p\d+", n) is not None
        ]
    except (FileNotFoundError, NotADirectoryError):
        return []


def has_segments(root: str | os.PathLike[str]) -> bool:
    """Whether the directory ``root`` (or one of its partitions) holds a segment log."""
    root = os.fspath(root)
    return any(os.path.isdir(os.path.join(d, SEGMENT_DIR)) for d in [root, *_partition_dirs(root)])


def has_object_log(root: str | os.PathLike[str]) -> bool:
    """Whether the directory ``root`` (or one of its partitions) holds a log as objects."""
    root = os.fspath(root)
    for d in [root, *_partition_dirs(root)]:
        with contextlib.suppress(OSError):
            if os.listdir(os.path.join(d, "log")):
                return True
    return False


def _take_lock(path: str) -> int | None:
    """``flock`` the lock file ``path``; its fd, None while another holds it."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return None
        except OSError:
            os.close(fd)
            raise
        try:
            if os.stat(path).st_ino == os.fstat(fd).st_ino:
                return fd
        except FileNotFoundError:
            pass
        os.close(fd)  # a takeover replaced the file between our open and flock


def _replace_lock(path: str) -> int:
    """Take over: a new lock file, locked, renamed over ``path``; its fd."""
    tmp = f"{path}.{os.getpid()}.{secrets.token_hex(4)}"
    fd = os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        os.rename(tmp, path)
        _fsync_dir(os.path.dirname(path))
    except BaseException:
        os.close(fd)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    return fd


class _Claim(ObjectLock):
    """The writer's claim on one log: the lock file, and its segment open for appending."""

    def __init__(self, store: SegmentObjectStore, prefix: str, fd: int, path: str) -> None:
        self._store = store
        self._prefix = prefix
        self._fd: int | None = fd
        self._path = path

    @property
    def name(self) -> str:
        """The lock file's name."""
        return self._prefix + LOCK_NAME

    @property
    def held(self) -> bool:
        """True until released."""
        return self._fd is not None

    def release(self) -> None:
        """Close the segment and unlock; a no-op once released."""
        if self._store._claims.get(self._prefix) is self:
            del self._store._claims[self._prefix]
            segs = self._store._log_of(self._prefix)
            with segs.lock:
                segs.close()
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)  # closing the only descriptor releases the flock


class SegmentObjectStore(ObjectStore):
    """A `LocalObjectStore` whose log names live in segment files.

    See the module docstring. ``segment_bytes`` is the size at which a
    segment is rolled (default `SEGMENT_BYTES`).
    """

    def __init__(self, root: str | os.PathLike[str], *, segment_bytes: int = SEGMENT_BYTES) -> None:
        if isinstance(segment_bytes, bool) or not isinstance(segment_bytes, int):
            raise TypeError(f"segment_bytes must be an int, got {segment_bytes!r}")
        if segment_bytes < 1:
            raise ValueError(f"segment_bytes must be >= 1, got {segment_bytes}")
        self._local = LocalObjectStore(root)
        self._segment_bytes = segment_bytes
        self._logs: dict[str, _Segments] = {}
        self._claims: dict[str, _Claim] = {}
        self.guarantees = self._local.guarantees

    @property
    def url(self) -> str:
        """The root directory as a ``file://`` URL (which reopens this medium)."""
        return self._local.url

    @property
    def root(self) -> str:
        """The absolute path of the root directory."""
        return self._local.root

    @property
    def segment_dir(self) -> str:
        """The absolute path of the directory of segment files (of the unpartitioned log)."""
        return self._log_of("").dir

    @property
    def is_local(self) -> bool:
        """True: a request is a system call or two."""
        return True

    def __repr__(self) -> str:
        return f"SegmentObjectStore({self._local.root!r})"

    def _log_of(self, prefix: str) -> _Segments:
        segs = self._logs.get(prefix)
        if segs is None:
            directory = os.path.join(self._local.root, *f"{prefix}{SEGMENT_DIR}".split("/"))
            segs = self._logs[prefix] = _Segments(directory, self._segment_bytes)
        return segs

    # ------------------------------------------------------------ the claim

    async def claim_log(self, prefix: str = "", *, takeover: bool = False) -> ObjectLock:
        """Lock ``<prefix>segments/lock`` and recover that log for appending.

        `UnsafeFilesystem` on a network filesystem; `LogLocked` (naming the
        lock file) while a live process holds the lock, unless
        ``takeover``; `CorruptObject` for a bad record before the end of
        the log (nothing is truncated); a torn tail is truncated.
        """
        if not isinstance(prefix, str) or _PREFIX_RE.match(prefix) is None:
            raise ValueError(f"a segment log's prefix is '' or 'p<digits>/', got {prefix!r}")
        fstype = await asyncio.to_thread(filesystem_type, self._local.root)
        if fstype in NETWORK_FILESYSTEMS:
            raise UnsafeFilesystem(self.url, fstype)
        segs = self._log_of(prefix)
        path = os.path.join(segs.dir, "lock")
        fd = await asyncio.to_thread(self._lock_file, path, takeover)
        try:
            await asyncio.to_thread(self._locked, segs, self._recover, prefix, segs, fd[1])
        except BaseException:
            os.close(fd[0])
            raise
        claim = self._claims[prefix] = _Claim(self, prefix, fd[0], path)
        return claim

    def _lock_file(self, path: str, takeover: bool) -> tuple[int, bool]:
        try:
            fd = _take_lock(path)
            if fd is not None:
                return fd, True
            if not takeover:
                raise LogLocked(self.url, path)
            return _replace_lock(path), False
        except OSError as exc:
            raise self._error("lock", path, exc) from exc

    def _recover(self, prefix: str, segs: _Segments, clean: bool) -> None:
        objects_log = os.path.join(self._local.root, *f"{prefix}log".split("/"))
        if os.path.isdir(objects_log) and os.listdir(objects_log):
            err = ObjectStoreError(
                f"cannot open {self.url} on the segment medium: its log is already objects "
                f"({prefix}log/); open it as a plain directory (LocalObjectStore)",
                name=f"{prefix}log/",
            )
            err.transient = False
            raise err
        try:
            segs.open_for_append(recover=clean)
        except OSError as exc:
            raise self._error("recover", f"{prefix}{SEGMENT_DIR}", exc) from exc

    @staticmethod
    def _locked(segs: _Segments, fn: object, *args: object) -> object:
        with segs.lock:
            return fn(*args)  # type: ignore[operator]

    # ------------------------------------------------------------------ API

    async def get(self, name: str) -> bytes:
        """The whole object ``name``; `ObjectNotFound` if absent."""
        where = self._log(name)
        if where is None:
            return await self._local.get(name)
        segs = self._log_of(where[0])
        if segs.find(where[1]) is None and not segs.might_have_grown():
            raise ObjectNotFound(name)
        return await asyncio.to_thread(self._read, name, segs, where[1])

    def _read(self, name: str, segs: _Segments, seq: int) -> bytes:
        with segs.lock:
            found = segs.find(seq)
            if found is None:
                self._refresh(name, segs)
                found = segs.find(seq)
            if found is None:
                raise ObjectNotFound(name)
        path, offset, length = found
        try:
            with open(path, "rb") as f:
                data = os.pread(f.fileno(), _HEADER.size + length, offset - _HEADER.size)
        except FileNotFoundError:
            raise ObjectNotFound(name) from None  # trimmed
        except OSError as exc:
            raise self._error("get", name, exc) from exc
        entry = _entry_at(data, 0)
        if isinstance(entry, str) or entry[1] != seq or entry[0] != _MAGIC:
            raise CorruptObject(path, f"bad record at offset {offset - _HEADER.size}")
        return data[_HEADER.size :]

    def _refresh(self, name: str, segs: _Segments) -> None:
        try:
            segs.refresh()
        except OSError as exc:
            raise self._error("read", name, exc) from exc

    async def put(self, name: str, data: bytes) -> None:
        """Replace ``name`` (not a log name: those are only created)."""
        if self._log(name) is not None:
            raise ObjectStoreError(f"log object {name!r} can only be created", name=name)
        await self._local.put(name, data)

    async def create(self, name: str, data: bytes) -> None:
        """Create ``name``; a log name is appended to its log's current segment."""
        where = self._log(name)
        if where is None:
            await self._local.create(name, data)
            return
        segs = self._claimed(name, where[0])
        if not self._append_inline(name, segs, where[1], data):
            await asyncio.to_thread(self._append, name, segs, where[1], bytes(data))

    def create_now(self, name: str, data: bytes) -> bool:
        """A log name appended on the calling thread when the append may be
        made there (`INLINE_APPEND_MAX`); any other name: False."""
        where = self._log(name)
        if where is None:
            return False
        return self._append_inline(name, self._claimed(name, where[0]), where[1], data)

    def _claimed(self, name: str, prefix: str) -> _Segments:
        """The segment log of ``prefix``, which this store must have claimed."""
        if prefix not in self._claims:
            err = ObjectStoreError(
                f"cannot create {name!r} in {self.url}: the segment log is not claimed "
                "(only a LogWriter writes it)",
                name=name,
            )
            err.transient = False
            raise err
        return self._log_of(prefix)

    def _append_inline(self, name: str, segs: _Segments, seq: int, data: bytes) -> bool:
        """Append on this (the loop's) thread if the disk is quick, the log
        free, and the group small or no task ready (`INLINE_APPEND_MAX`);
        False, nothing written, when the append belongs in a thread."""
        inline = len(data) <= INLINE_APPEND_BYTES or loop_idle()
        if inline and segs.quick() and segs.lock.acquire(blocking=False):
            try:
                self._append_locked(name, segs, seq, bytes(data), inline=True)
                return True
            except _Defer:
                return False  # a roll or a re-scan first: in a thread
            finally:
                segs.lock.release()
        return False

    def _append(self, name: str, segs: _Segments, seq: int, data: bytes) -> None:
        with segs.lock:
            self._append_locked(name, segs, seq, data)

    def _append_locked(
        self, name: str, segs: _Segments, seq: int, data: bytes, *, inline: bool = False
    ) -> None:
        try:
            segs.append(seq, data, inline=inline)
        except _Taken:
            raise ObjectExists(name) from None
        except ValueError as exc:
            err = ObjectStoreError(str(exc), name=name)
            err.transient = False
            raise err from None
        except OSError as exc:
            err = self._error("append", name, exc)
            if segs.broken is not None:
                err.transient = False
            raise err from exc

    async def list(self, prefix: str) -> builtins.list[str]:
        """Every name that starts with ``prefix``, sorted ascending."""
        names = [
            n
            for n in await self._local.list(prefix)
            if _OWN_RE.match(n) is None and _LOG_RE.match(n) is None
        ]
        for log_prefix in self._log_prefixes(prefix):
            segs = self._log_of(log_prefix)
            seqs = await asyncio.to_thread(self._locked, segs, self._list_log, prefix, segs)
            names += [_log_name(log_prefix, s) for s in seqs]  # type: ignore[attr-defined]
        names.sort()
        return [n for n in names if n.startswith(prefix)]

    def _log_prefixes(self, prefix: str) -> builtins.list[str]:
        """The logs (by prefix: ``""``, ``"p003/"``...) whose names may start with ``prefix``."""
        found = []
        for log_prefix in ["", *(f"{os.path.basename(d)}/" for d in _partition_dirs(self.root))]:
            names = f"{log_prefix}log/"
            if names.startswith(prefix) or prefix.startswith(names):
                found.append(log_prefix)
        return found

    def _list_log(self, prefix: str, segs: _Segments) -> builtins.list[int]:
        self._refresh(prefix, segs)
        return segs.seqs()

    async def delete(self, names: Iterable[str]) -> None:
        """Delete ``names``; log names trim whole segments (module docstring)."""
        if isinstance(names, str):
            raise TypeError(f"delete takes an iterable of names, not the string {names!r}")
        names = list(names)
        trims: dict[str, int] = {}
        others = []
        for n in names:
            where = self._log(n)
            if where is None:
                others.append(n)
            else:
                trims[where[0]] = max(trims.get(where[0], -1), where[1])
        if others:
            await self._local.delete(others)
        for log_prefix, through in trims.items():
            segs = self._log_of(log_prefix)
            await asyncio.to_thread(self._locked, segs, self._trim, log_prefix, segs, through)

    def _trim(self, prefix: str, segs: _Segments, through: int) -> None:
        try:
            segs.trim(through)
        except OSError as exc:
            raise self._error("trim", _log_name(prefix, through), exc) from exc

    async def try_lock(self, name: str) -> ObjectLock | None:
        """As `LocalObjectStore.try_lock`."""
        self._check_name(name)
        return await self._local.try_lock(name)

    async def close(self) -> None:
        """Release the claims and every lock handed out."""
        for claim in list(self._claims.values()):
            claim.release()
        await self._local.close()

    # ------------------------------------------------------------- helpers

    def _log(self, name: str) -> tuple[str, int] | None:
        """``(prefix, seq)`` of a log name, None for any other name; refuses our own dirs."""
        if type(name) is str and len(name) == 24 and name.startswith("log/"):
            digits = name[4:]  # the log's own names, at every commit: no pattern
            if digits.isascii() and digits.isdigit():
                return "", int(digits)
        self._check_name(name)
        m = _LOG_RE.match(name) if isinstance(name, str) else None
        return None if m is None else (m.group(1), int(m.group(2)))

    @staticmethod
    def _check_name(name: str) -> None:
        if isinstance(name, str) and _OWN_RE.match(name) is not None:
            raise ValueError(f"invalid object name {name!r}: {SEGMENT_DIR}/ holds the segment log")

    def _error(self, op: str, name: str, exc: OSError) -> ObjectStoreError:
        return ObjectStoreError(
            f"cannot {op} {name!r} in {self.url}: {exc.strerror or exc}", name=name
        )
