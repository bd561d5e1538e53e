"""`SegmentObjectStore`: a local directory whose log is append-only segment files.

The object-store log (`durable.store.log`) writes each group commit as one
object, ``log/<seq>``; on a local disk that costs a temporary file, an
fsync, a link and a directory fsync. This store keeps every other name
(checkpoints, blobs, inboxes, memo...) as files of a `LocalObjectStore`
and serves the names under ``log/`` from *segment files* instead, so the
log above it runs unchanged:

- ``create("log/<seq>", data)`` appends one record to the current segment
  and calls ``os.fdatasync`` once: one append and one sync per group commit.
- ``get`` / ``list`` of ``log/`` names read the records back.
- ``delete`` of ``log/`` names (the log's trim after a checkpoint) removes
  every segment but the current one whose records all precede the newest
  name deleted: the log is only ever trimmed from the front.

Layout, below the root: ``segments/<first seq:020d>.seg`` and the lock file
``segments/lock``. A record is ``b"DSEG" | seq (u64) | length (u32) |
crc32 (u32) | body``, big-endian, where the body is the log object's
bytes (itself framed and checksummed) and the CRC (`zlib.crc32`) covers the
sequence number, the length and the body. Records in a segment, and
segments one after another, hold consecutive sequence numbers.

A segment is rolled (the next record starts a new file) once it holds at
least `SEGMENT_BYTES` (4 MiB, the log's default checkpoint interval, so a
checkpoint soon covers a closed segment); `SegmentObjectStore` takes
another size. A new segment's directory entry is fsynced before the first
record in it is reported durable.

Writing: `claim_log` (called by `LogWriter.open` before it loads) takes an
exclusive ``fcntl.flock`` on ``segments/lock`` and raises `LogLocked` (a
`Fenced`), naming the file, while a live process holds it; the kernel
releases it when its holder dies, kill -9 included, so a standby takes over
at once. The log's open marker is still written, as a record. Holding the
lock, the claim scans every segment: a record that fails its check with
more bytes after it, or in a segment other than the last, raises
`CorruptObject` naming the file and the offset, and nothing is truncated;
a bad record at the very end of the last segment (an append cut short by a
crash: a short header, a body shorter than its length, a CRC that fails
on the last record, or zeros to the end) is a *torn tail*, truncated
(``ftruncate`` + ``fdatasync``) before anything is appended. A torn record
was never reported durable, so nothing committed is lost, and no record is
ever half applied.

Reading (any process, no lock): the same scan, except that a torn tail is
simply not there yet (a writer may be appending it right now) and is never
truncated. A reader in another process can see a record once it is
written, shortly before its ``fdatasync`` returns: it survives the writer's
crash (the page cache outlives the process) but not a power cut in that
window, unlike the object log, where a reader sees only synced objects.

Opting in: pass ``SegmentObjectStore(path)`` as the store, or the URL
``segments:///path`` (`durable.store.objects.url`). Once a directory holds
``segments/``, a plain path or ``file://`` URL of it opens this store too,
so readers and the CLI see its log. A directory whose log is already
objects (``log/``) is refused at `claim_log`: the medium is chosen when a
store is created. Local disks only: the lock and ``fdatasync`` are
trusted as on a local filesystem (a network filesystem is not detected).
"""

from __future__ import annotations

import asyncio
import bisect
import builtins
import contextlib
import errno
import os
import struct
import threading
import zlib
from collections.abc import Iterable
from dataclasses import dataclass, field

from durable.errors import CorruptObject, LogLocked, ObjectExists, ObjectNotFound, ObjectStoreError
from durable.store.objects.base import ObjectLock, ObjectStore
from durable.store.objects.local import LocalObjectStore

__all__ = [
    "LOCK_NAME",
    "SEGMENT_BYTES",
    "SEGMENT_DIR",
    "SegmentObjectStore",
    "decode_records",
    "encode_record",
    "has_segments",
]

#: Directory (below the root) of the segment files and the lock file.
SEGMENT_DIR = "segments"
#: The writer's lock file (an object name of the underlying local store).
LOCK_NAME = f"{SEGMENT_DIR}/lock"
#: Default size at which a segment is rolled.
SEGMENT_BYTES = 4 << 20

_LOG = "log/"
_WIDTH = 20
_SUFFIX = ".seg"
_MAGIC = b"DSEG"
_HEADER = struct.Struct(">4sQII")


def encode_record(seq: int, body: bytes) -> bytes:
    """One framed record: header (magic, seq, length, CRC) then ``body``."""
    crc = zlib.crc32(body, zlib.crc32(struct.pack(">QI", seq, len(body))))
    return _HEADER.pack(_MAGIC, seq, len(body), crc) + body


@dataclass(slots=True)
class _Scan:
    """What `decode_records` found in one segment's bytes."""

    #: ``(seq, offset of the body, length)`` of each good record, in order.
    records: list[tuple[int, int, int]] = field(default_factory=list)
    #: Where the good records end (the offset after the last).
    end: int = 0
    #: Offset of a bad record at the end (a torn tail), if any.
    torn: int | None = None


def _record_at(data: bytes, pos: int) -> tuple[int, int, int] | str:
    """``(seq, body offset, length)`` of a good record at ``pos``, else why not."""
    if len(data) - pos < _HEADER.size:
        return "short header"
    magic, seq, length, crc = _HEADER.unpack_from(data, pos)
    if magic != _MAGIC:
        return "bad magic"
    body_at = pos + _HEADER.size
    if body_at + length > len(data):
        return f"body cut short ({length} bytes declared)"
    body = memoryview(data)[body_at : body_at + length]
    if zlib.crc32(body, zlib.crc32(struct.pack(">QI", seq, length))) != crc:
        return "checksum mismatch"
    return seq, body_at, length


def _good_record_after(data: bytes, pos: int) -> bool:
    """Whether a whole, checksummed record starts anywhere after ``pos``."""
    at = data.find(_MAGIC, pos + 1)
    while at >= 0:
        if not isinstance(_record_at(data, at), str):
            return True
        at = data.find(_MAGIC, at + 1)
    return False


def decode_records(path: str, data: bytes, base: int = 0, *, first_seq: int, last: bool) -> _Scan:
    """Check the records of segment ``path`` in ``data`` (its bytes from
    file offset ``base``, a record boundary).

    ``first_seq`` is the sequence number the first record must carry;
    offsets in the result are the file's. A bad record is a torn tail
    (`_Scan.torn`) when ``last`` is set (the newest segment) and no whole
    record follows it: an append cut short. Anything else (a bad record
    with a good one after it, in a segment before the last, or a good
    record out of sequence) raises `CorruptObject` naming ``path`` and the
    offset.
    """
    scan = _Scan(end=base)
    pos, seq = 0, first_seq
    while pos < len(data):
        found = _record_at(data, pos)
        if isinstance(found, str):
            if last and not _good_record_after(data, pos):
                scan.torn = base + pos
                return scan
            raise CorruptObject(path, f"bad record at offset {base + pos}: {found}")
        got, body_at, length = found
        if got != seq:
            raise CorruptObject(
                path, f"bad record at offset {base + pos}: holds seq {got}, expected {seq}"
            )
        scan.records.append((seq, base + body_at, length))
        pos = body_at + length
        seq += 1
        scan.end = base + pos
    return scan


@dataclass(slots=True)
class _Segment:
    first: int
    path: str
    #: ``(body offset, length)`` of each record, record i holding seq first + i.
    records: list[tuple[int, int]] = field(default_factory=list)
    end: int = 0  # where the scanned records end

    @property
    def next_seq(self) -> int:
        return self.first + len(self.records)


class _Segments:
    """The index of one directory's segments; every method runs in a thread
    (or on the loop for the cheap checks) under ``lock``."""

    def __init__(self, directory: str, segment_bytes: int) -> None:
        self.dir = directory
        self.segment_bytes = segment_bytes
        self.segs: list[_Segment] = []
        self.lock = threading.Lock()
        self.fd: int | None = None  # the current segment, open for appending
        self.broken: str | None = None

    # ------------------------------------------------------------- reading

    def refresh(self, *, recover: bool = False) -> None:
        """Bring the index up to date with the directory (see the module doc)."""
        try:
            names = sorted(n for n in os.listdir(self.dir) if _first_seq(n) is not None)
        except FileNotFoundError:
            names = []
        known = {s.path: s for s in self.segs}
        segs = []
        for n in names:
            path = os.path.join(self.dir, n)
            seg = known.get(path)
            segs.append(seg if seg is not None else _Segment(_first_seq(n) or 0, path))
        for i, seg in enumerate(segs):
            last = i == len(segs) - 1
            if not last and segs[i + 1].first < seg.next_seq:
                raise CorruptObject(seg.path, f"overlaps the next segment {segs[i + 1].path}")
            self._scan(seg, last=last, recover=recover)
            if not last and seg.next_seq != segs[i + 1].first:
                raise CorruptObject(
                    segs[i + 1].path,
                    f"starts at seq {segs[i + 1].first}, the segment before ends at "
                    f"{seg.next_seq - 1}",
                )
        self.segs = segs

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
        if scan.torn is not None and recover:
            with open(seg.path, "r+b") as f:
                f.truncate(scan.torn)
                os.fdatasync(f.fileno())

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
        """Cheap: whether the last segment grew or a new one exists (two stats)."""
        if not self.segs:
            return os.path.isdir(self.dir)
        last = self.segs[-1]
        try:
            if os.stat(last.path).st_size != last.end:
                return True
        except FileNotFoundError:
            return True
        return os.path.exists(self._path(last.next_seq))

    def seqs(self) -> list[int]:
        return [s.first + i for s in self.segs for i in range(len(s.records))]

    # ------------------------------------------------------------- writing

    def open_for_append(self) -> None:
        """Recover (truncate a torn tail) and open the last segment."""
        os.makedirs(self.dir, exist_ok=True)
        self.segs = []
        self.refresh(recover=True)
        if self.segs:
            last = self.segs[-1]
            self.fd = os.open(last.path, os.O_WRONLY | os.O_APPEND | os.O_CLOEXEC)

    def append(self, seq: int, body: bytes) -> None:
        """Append record ``seq``, roll first if due, ``fdatasync``."""
        if self.broken is not None:
            raise OSError(errno.EIO, self.broken)
        last = self.segs[-1] if self.segs else None
        if last is not None and seq < last.next_seq:
            raise FileExistsError(seq)
        if last is not None and seq != last.next_seq:
            raise ValueError(f"log record {seq} does not follow {last.next_seq - 1}")
        if last is None or self.fd is None or last.end >= self.segment_bytes:
            last = self._roll(seq)
        assert self.fd is not None
        record = encode_record(seq, body)
        try:
            view = memoryview(record)
            while view:
                view = view[os.write(self.fd, view) :]
            os.fdatasync(self.fd)
        except OSError as exc:
            self._undo(last, exc)
            raise
        last.records.append((last.end + _HEADER.size, len(body)))
        last.end += len(record)

    def _undo(self, seg: _Segment, exc: OSError) -> None:
        """After a failed append: cut the segment back, or refuse all later ones."""
        assert self.fd is not None
        if isinstance(exc, OSError) and exc.errno is not None and exc.errno != errno.EIO:
            try:
                os.ftruncate(self.fd, seg.end)
                os.fdatasync(self.fd)
                return
            except OSError:
                pass
        # A failed fdatasync leaves the page cache's state unknown: append no more.
        self.broken = f"an append to {seg.path} failed ({exc}); reopen the store"

    def _roll(self, seq: int) -> _Segment:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None
        path = self._path(seq)
        self.fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC)
        _fsync_dir(self.dir)
        seg = _Segment(seq, path)
        self.segs.append(seg)
        return seg

    def trim(self, through: int) -> None:
        """Remove every closed segment whose records all precede ``through``."""
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


def _first_seq(name: str) -> int | None:
    stem = name[: -len(_SUFFIX)] if name.endswith(_SUFFIX) else ""
    return int(stem) if len(stem) == _WIDTH and stem.isdigit() else None


def _log_seq(name: str) -> int | None:
    tail = name[len(_LOG) :]
    return int(tail) if len(tail) == _WIDTH and tail.isdigit() else None


def _log_name(seq: int) -> str:
    return f"{_LOG}{seq:0{_WIDTH}d}"


def _fsync_dir(directory: str) -> None:
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def has_segments(root: str | os.PathLike[str]) -> bool:
    """Whether the directory ``root`` holds a segment log."""
    return os.path.isdir(os.path.join(os.fspath(root), SEGMENT_DIR))


class _Claim(ObjectLock):
    """The writer's claim: the flock, and the segment open for appending."""

    def __init__(self, store: SegmentObjectStore, lock: ObjectLock) -> None:
        self._store = store
        self._lock = lock

    @property
    def name(self) -> str:
        """The lock file's name."""
        return self._lock.name

    @property
    def held(self) -> bool:
        """True until released."""
        return self._lock.held

    def release(self) -> None:
        """Close the segment and unlock; a no-op once released."""
        if self._store._claim is self:
            self._store._claim = None
            with self._store._segs.lock:
                self._store._segs.close()
        self._lock.release()


class SegmentObjectStore(ObjectStore):
    """A `LocalObjectStore` whose ``log/`` names live in segment files.

    See the module docstring. ``segment_bytes`` is the size at which a
    segment is rolled (default `SEGMENT_BYTES`).
    """

    def __init__(self, root: str | os.PathLike[str], *, segment_bytes: int = SEGMENT_BYTES) -> None:
        if isinstance(segment_bytes, bool) or not isinstance(segment_bytes, int):
            raise TypeError(f"segment_bytes must be an int, got {segment_bytes!r}")
        if segment_bytes < 1:
            raise ValueError(f"segment_bytes must be >= 1, got {segment_bytes}")
        self._local = LocalObjectStore(root)
        self._segs = _Segments(os.path.join(self._local.root, SEGMENT_DIR), segment_bytes)
        self._claim: _Claim | None = None
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
        """The absolute path of the directory of segment files."""
        return self._segs.dir

    @property
    def is_local(self) -> bool:
        """True: a request is a system call or two."""
        return True

    def __repr__(self) -> str:
        return f"SegmentObjectStore({self._local.root!r})"

    # ------------------------------------------------------------ the claim

    async def claim_log(self) -> ObjectLock:
        """Lock ``segments/lock`` and recover the log for appending.

        `LogLocked` (naming the lock file) while a live process holds it;
        `CorruptObject` for a bad record before the end of the log (nothing
        is truncated); a torn tail is truncated.
        """
        lock = await self._local.try_lock(LOCK_NAME)
        if lock is None:
            raise LogLocked(self.url, os.path.join(self._local.root, *LOCK_NAME.split("/")))
        try:
            await asyncio.to_thread(self._locked, self._recover)
        except BaseException:
            lock.release()
            raise
        self._claim = _Claim(self, lock)
        return self._claim

    def _recover(self) -> None:
        objects_log = os.path.join(self._local.root, _LOG.rstrip("/"))
        if os.path.isdir(objects_log) and os.listdir(objects_log):
            err = ObjectStoreError(
                f"cannot open {self.url} on the segment medium: its log is already objects "
                "(log/); open it as a plain directory",
                name=_LOG,
            )
            err.transient = False
            raise err
        self._segs.open_for_append()

    def _locked(self, fn: object, *args: object) -> object:
        with self._segs.lock:
            return fn(*args)  # type: ignore[operator]

    # ------------------------------------------------------------------ API

    async def get(self, name: str) -> bytes:
        """The whole object ``name``; `ObjectNotFound` if absent."""
        seq = self._log(name)
        if seq is None:
            return await self._local.get(name)
        segs = self._segs
        if segs.find(seq) is None and not segs.might_have_grown():
            raise ObjectNotFound(name)
        return await asyncio.to_thread(self._read, name, seq)

    def _read(self, name: str, seq: int) -> bytes:
        with self._segs.lock:
            where = self._segs.find(seq)
            if where is None:
                self._refresh(name)
                where = self._segs.find(seq)
            if where is None:
                raise ObjectNotFound(name)
        path, offset, length = where
        try:
            with open(path, "rb") as f:
                f.seek(offset)
                data = f.read(length)
        except FileNotFoundError:
            raise ObjectNotFound(name) from None  # trimmed
        except OSError as exc:
            raise self._error("get", name, exc) from exc
        if len(data) != length:
            raise ObjectNotFound(name)  # truncated under us: a torn tail
        return data

    def _refresh(self, name: str) -> None:
        try:
            self._segs.refresh()
        except OSError as exc:
            raise self._error("read", name, exc) from exc

    async def put(self, name: str, data: bytes) -> None:
        """Replace ``name`` (not a log name: those are only created)."""
        if self._log(name) is not None:
            raise ObjectStoreError(f"log object {name!r} can only be created", name=name)
        await self._local.put(name, data)

    async def create(self, name: str, data: bytes) -> None:
        """Create ``name``; a log name is appended to the current segment."""
        seq = self._log(name)
        if seq is None:
            await self._local.create(name, data)
            return
        if self._claim is None:
            err = ObjectStoreError(
                f"cannot create {name!r} in {self.url}: the segment log is not claimed "
                "(only a LogWriter writes it)",
                name=name,
            )
            err.transient = False
            raise err
        await asyncio.to_thread(self._append, name, seq, bytes(data))

    def _append(self, name: str, seq: int, data: bytes) -> None:
        with self._segs.lock:
            try:
                self._segs.append(seq, data)
            except FileExistsError:
                raise ObjectExists(name) from None
            except ValueError as exc:
                err = ObjectStoreError(str(exc), name=name)
                err.transient = False
                raise err from None
            except OSError as exc:
                err = self._error("append", name, exc)
                if self._segs.broken is not None:
                    err.transient = False
                raise err from exc

    async def list(self, prefix: str) -> builtins.list[str]:
        """Every name that starts with ``prefix``, sorted ascending."""
        names: builtins.list[str] = []
        if not prefix.startswith(_LOG):
            names = [
                n
                for n in await self._local.list(prefix)
                if not n.startswith(f"{SEGMENT_DIR}/") and not n.startswith(_LOG)
            ]
        if prefix.startswith(_LOG) or _LOG.startswith(prefix):
            seqs = await asyncio.to_thread(self._locked, self._list_log, prefix)
            names += [_log_name(s) for s in seqs]  # type: ignore[attr-defined]
            names.sort()
        return [n for n in names if n.startswith(prefix)]

    def _list_log(self, prefix: str) -> builtins.list[int]:
        self._refresh(prefix)
        return self._segs.seqs()

    async def delete(self, names: Iterable[str]) -> None:
        """Delete ``names``; log names trim whole segments (module docstring)."""
        if isinstance(names, str):
            raise TypeError(f"delete takes an iterable of names, not the string {names!r}")
        names = list(names)
        logs = [s for s in map(self._log, names) if s is not None]
        others = [n for n in names if self._log(n) is None]
        if others:
            await self._local.delete(others)
        if logs:
            await asyncio.to_thread(self._locked, self._trim, max(logs))

    def _trim(self, through: int) -> None:
        try:
            self._segs.refresh()
            self._segs.trim(through)
        except OSError as exc:
            raise self._error("trim", _log_name(through), exc) from exc

    async def try_lock(self, name: str) -> ObjectLock | None:
        """As `LocalObjectStore.try_lock`."""
        self._check_name(name)
        return await self._local.try_lock(name)

    async def close(self) -> None:
        """Release the claim and every lock handed out."""
        if self._claim is not None:
            self._claim.release()
        await self._local.close()

    # ------------------------------------------------------------- helpers

    def _log(self, name: str) -> int | None:
        """The seq of a log name, None for any other name; refuses our own dir."""
        self._check_name(name)
        return _log_seq(name) if name.startswith(_LOG) else None

    @staticmethod
    def _check_name(name: str) -> None:
        if isinstance(name, str) and (name == SEGMENT_DIR or name.startswith(f"{SEGMENT_DIR}/")):
            raise ValueError(f"invalid object name {name!r}: {SEGMENT_DIR}/ holds the segment log")

    def _error(self, op: str, name: str, exc: OSError) -> ObjectStoreError:
        return ObjectStoreError(
            f"cannot {op} {name!r} in {self.url}: {exc.strerror or exc}", name=name
        )
