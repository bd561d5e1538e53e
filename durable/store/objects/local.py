"""`LocalObjectStore`: objects as files below a directory, durable on power loss.

Each object is one file; ``"log/0001"`` is ``<root>/log/0001``. Every write
goes through a temporary file in the object's own directory that is fsynced
before it takes the name, and the directory is fsynced after, so a write
that returned survives a power cut and a reader sees old bytes or new bytes,
never a mix:

- `put`: temp file, fsync, ``os.replace``, fsync the directory.
- `create`: temp file, fsync, ``os.link(tmp, final)`` (atomic
  create-if-absent, also against other processes), unlink the temp file,
  fsync the directory.
- New parent directories are fsynced into their own parents.

Temporary files are named ``.tmp-<random>``; `list` never returns them, and
object names may not use that prefix. A crash can leave one behind; it is
garbage, never an object.

Every call does its whole sequence of system calls in one worker thread
(`asyncio.to_thread`), off the event loop. A call whose task is cancelled
still finishes its file operations in the thread. One exception: `get`
first looks the name up on the event loop (a ``stat``, which touches no
file data) and answers `ObjectNotFound` for an absent name without a
thread: the log's followers poll for the next object's name hundreds of
times a second while busy, and the thread hop cost more than the lookup.

Unlike a bucket, a directory cannot hold both ``"a"`` and ``"a/b"``: such a
write fails with `ObjectStoreError`. Directories emptied by `delete` stay.

`try_lock` takes ``fcntl.flock(LOCK_EX | LOCK_NB)`` on the file
``<root>/<name>`` (made empty if absent, so it also reads as an empty
object) and keeps it open until the lock is released or the store closed.
The kernel releases it when the process dies, kill -9 included. The lock
belongs to the open file: a second `try_lock` of the name, through this
store or another one on the same directory, in this process or another,
gets None while it is held. A child made by ``fork`` closes its copy of
the file at once, so a lock never outlives its holder in a child. On one
host only: across machines on a network filesystem it depends on the
server's lock support. Never delete a lock's name while it is held.
"""

from __future__ import annotations

import asyncio
import builtins
import contextlib
import errno
import fcntl
import os
import secrets
import weakref
from collections.abc import Iterable
from pathlib import Path

from durable.errors import ObjectExists, ObjectNotFound, ObjectStoreError
from durable.store.objects.base import Guarantee, ObjectLock, ObjectStore

__all__ = ["LocalObjectStore"]

_TMP_PREFIX = ".tmp-"
#: errno values meaning "no object of this name": the file, or one of its
#: parent directories, is missing or is not a directory.
_ABSENT = (errno.ENOENT, errno.ENOTDIR)
#: ... and for get and delete also: the name is a directory, which (like a
#: common prefix in a bucket) is not an object.
_NOT_AN_OBJECT = (*_ABSENT, errno.EISDIR)
#: errno values that retrying will not cure: permissions, a read-only mount.
_PERMANENT = (errno.EACCES, errno.EPERM, errno.EROFS)


class LocalObjectStore(ObjectStore):
    """An `ObjectStore` on a local (or shared POSIX) directory.

    ``root`` need not exist yet: the first write creates it. Writes are
    durable when they return (data and directory entries are fsynced), and
    `create` is atomic against every process that shares the directory.
    """

    guarantees = frozenset(
        {
            Guarantee.ATOMIC_CREATE,
            Guarantee.DURABLE_WRITE,
            Guarantee.SHARED,
            Guarantee.PROCESS_LOCK,
        }
    )

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self._root = os.path.abspath(os.fspath(root))
        self._locks: set[_FileLock] = set()

    @property
    def url(self) -> str:
        """The root directory as a ``file://`` URL."""
        return Path(self._root).as_uri()

    @property
    def root(self) -> str:
        """The absolute path of the root directory."""
        return self._root

    @property
    def is_local(self) -> bool:
        """True: a request is a system call or two."""
        return True

    def __repr__(self) -> str:
        return f"LocalObjectStore({self._root!r})"

    # ------------------------------------------------------------------ API

    async def get(self, name: str) -> bytes:
        """The whole object ``name``; `ObjectNotFound` if absent."""
        path = self._path(name)
        try:
            os.stat(path)
        except OSError as exc:
            if exc.errno in _ABSENT:
                raise ObjectNotFound(name) from None
            # any other error: the thread's read says what it is
        return await asyncio.to_thread(self._get, name, path)

    async def put(self, name: str, data: bytes) -> None:
        """Replace ``name`` atomically and durably."""
        path = self._path(name)
        await asyncio.to_thread(self._write, name, path, bytes(data), False)

    async def create(self, name: str, data: bytes) -> None:
        """Write ``name`` durably if absent; `ObjectExists` if it is taken."""
        path = self._path(name)
        await asyncio.to_thread(self._write, name, path, bytes(data), True)

    async def list(self, prefix: str) -> list[str]:
        """Every name that starts with ``prefix``, sorted ascending."""
        dir_part, sep, name_prefix = prefix.rpartition("/")
        if sep:
            _check_segments(prefix, dir_part.split("/"), "object name prefix")
        if "\x00" in name_prefix:
            raise ValueError(f"invalid object name prefix {prefix!r}: contains NUL")
        return await asyncio.to_thread(self._list, prefix, dir_part, name_prefix)

    async def delete(self, names: Iterable[str]) -> None:
        """Delete ``names`` durably; names already absent are skipped."""
        if isinstance(names, str):
            raise TypeError(f"delete takes an iterable of names, not the string {names!r}")
        paths = [(name, self._path(name)) for name in names]
        if paths:
            await asyncio.to_thread(self._delete, paths)

    async def try_lock(self, name: str) -> ObjectLock | None:
        """``flock`` the file ``<root>/<name>``; None while another holds it."""
        path = self._path(name)
        fd = await asyncio.to_thread(self._lock, name, path)
        if fd is None:
            return None
        lock = _FileLock(self, name, fd)
        self._locks.add(lock)
        return lock

    async def close(self) -> None:
        """Release every lock this store handed out."""
        for lock in list(self._locks):
            lock.release()

    # ------------------------------------------------------- thread bodies

    def _lock(self, name: str, path: str) -> int | None:
        try:
            _makedirs(os.path.dirname(path))
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        except OSError as exc:
            raise self._error("lock", name, exc) from exc
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return None
        except OSError as exc:
            os.close(fd)
            raise self._error("lock", name, exc) from exc
        return fd

    def _get(self, name: str, path: str) -> bytes:
        try:
            with open(path, "rb") as f:
                return f.read()
        except OSError as exc:
            if exc.errno in _NOT_AN_OBJECT:
                raise ObjectNotFound(name) from None
            raise self._error("get", name, exc) from exc

    def _write(self, name: str, path: str, data: bytes, exclusive: bool) -> None:
        op = "create" if exclusive else "put"
        directory = os.path.dirname(path)
        tmp = os.path.join(directory, _TMP_PREFIX + secrets.token_hex(8))
        try:
            _makedirs(directory)
            with open(tmp, "xb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            if exclusive:
                try:
                    os.link(tmp, path)
                except FileExistsError:
                    if os.path.isdir(path):
                        raise ObjectStoreError(
                            f"cannot create {name!r} in {self.url}: a directory of that name "
                            "exists",
                            name=name,
                        ) from None
                    raise ObjectExists(name) from None
                os.unlink(tmp)
            else:
                os.replace(tmp, path)
            _fsync_dir(directory)
        except OSError as exc:
            raise self._error(op, name, exc) from exc
        finally:
            with contextlib.suppress(OSError):
                os.unlink(tmp)

    def _list(self, prefix: str, dir_part: str, name_prefix: str) -> builtins.list[str]:
        base = os.path.join(self._root, *dir_part.split("/")) if dir_part else self._root
        found: builtins.list[str] = []
        try:
            entries = list(os.scandir(base))
        except OSError as exc:
            if exc.errno in _ABSENT:
                return []
            raise self._error("list", prefix, exc) from exc
        lead = dir_part + "/" if dir_part else ""
        for entry in entries:
            if entry.name.startswith(_TMP_PREFIX) or not entry.name.startswith(name_prefix):
                continue
            try:
                if entry.is_dir(follow_symlinks=False):
                    _walk(entry.path, lead + entry.name + "/", found)
                elif entry.is_file():
                    found.append(lead + entry.name)
            except OSError as exc:
                if exc.errno not in _ABSENT:  # removed while we listed: skip it
                    raise self._error("list", prefix, exc) from exc
        found.sort()
        return found

    def _delete(self, paths: builtins.list[tuple[str, str]]) -> None:
        touched: dict[str, str] = {}  # directory -> a name deleted from it
        for name, path in paths:
            try:
                os.unlink(path)
            except OSError as exc:
                if exc.errno in _NOT_AN_OBJECT:
                    continue
                raise self._error("delete", name, exc) from exc
            touched.setdefault(os.path.dirname(path), name)
        for directory, name in touched.items():
            try:
                _fsync_dir(directory)
            except OSError as exc:
                raise self._error("delete", name, exc) from exc

    # ------------------------------------------------------------- helpers

    def _path(self, name: str) -> str:
        if not isinstance(name, str):
            raise TypeError(f"object name must be a str, not {type(name).__name__}")
        _check_segments(name, name.split("/"))
        return os.path.join(self._root, *name.split("/"))

    def _error(self, op: str, name: str, exc: OSError) -> ObjectStoreError:
        reason = exc.strerror or str(exc)
        err = ObjectStoreError(f"cannot {op} {name!r} in {self.url}: {reason}", name=name)
        if exc.errno in _PERMANENT:
            err.transient = False  # fix the permissions or the mount, then open again
        return err


class _FileLock(ObjectLock):
    """An ``flock`` held on an open file of a `LocalObjectStore`."""

    def __init__(self, store: LocalObjectStore, name: str, fd: int) -> None:
        self._store = store
        self._name = name
        self._fd: int | None = fd
        _HELD.add(self)

    @property
    def name(self) -> str:
        """The name locked."""
        return self._name

    @property
    def held(self) -> bool:
        """True until released."""
        return self._fd is not None

    def release(self) -> None:
        """Unlock and close the file; a no-op once released."""
        fd, self._fd = self._fd, None
        if fd is None:
            return
        self._store._locks.discard(self)
        _HELD.discard(self)
        try:
            fcntl.flock(fd, fcntl.LOCK_UN)
        finally:
            os.close(fd)

    def _forget(self) -> None:
        """In a forked child: close the inherited file without unlocking."""
        fd, self._fd = self._fd, None
        if fd is not None:
            with contextlib.suppress(OSError):
                os.close(fd)

    def __repr__(self) -> str:
        state = "held" if self.held else "released"
        return f"<lock {self._name!r} of {self._store!r}, {state}>"


#: Every lock held in this process, for `_forget_in_child`.
_HELD: weakref.WeakSet[_FileLock] = weakref.WeakSet()


def _forget_in_child() -> None:
    # The child shares the parent's open files: closing its copies leaves the
    # parent's locks held, and a lock no longer outlives its holder in a child.
    for lock in list(_HELD):
        lock._forget()
    _HELD.clear()


os.register_at_fork(after_in_child=_forget_in_child)


def _check_segments(name: str, segments: list[str], what: str = "object name") -> None:
    """Raise ValueError unless every segment is a plain, non-empty file name."""
    for segment in segments:
        if segment in ("", ".", ".."):
            raise ValueError(
                f"invalid {what} {name!r}: segments must be non-empty and not '.' or '..' "
                "(no leading, trailing or doubled '/')"
            )
        if segment.startswith(_TMP_PREFIX):
            raise ValueError(
                f"invalid {what} {name!r}: {_TMP_PREFIX!r} is reserved for temporary files"
            )
        if "\x00" in segment:
            raise ValueError(f"invalid {what} {name!r}: contains NUL")


def _walk(directory: str, lead: str, found: list[str]) -> None:
    """Append the names of every file below ``directory`` to ``found``."""
    try:
        entries = list(os.scandir(directory))
    except OSError as exc:
        if exc.errno in _ABSENT:
            return
        raise
    for entry in entries:
        if entry.name.startswith(_TMP_PREFIX):
            continue
        if entry.is_dir(follow_symlinks=False):
            _walk(entry.path, lead + entry.name + "/", found)
        elif entry.is_file():
            found.append(lead + entry.name)


def _makedirs(directory: str) -> None:
    """Create ``directory`` and missing parents, fsyncing each new entry."""
    if os.path.isdir(directory):
        return
    parent = os.path.dirname(directory)
    if parent != directory:
        _makedirs(parent)
    try:
        os.mkdir(directory)
    except FileExistsError:
        if os.path.isdir(directory):  # a concurrent writer made it
            return
        raise
    _fsync_dir(parent)


def _fsync_dir(directory: str) -> None:
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
