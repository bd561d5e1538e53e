"""LocalObjectStore details beyond the conformance suite: temp files,
atomic replace for readers, fsync, name checks and error translation."""

from __future__ import annotations

import asyncio
import errno
import os
import sys
import threading
from pathlib import Path

import pytest

from durable.errors import ObjectExists, ObjectNotFound, ObjectStoreError
from durable.store.objects import Guarantee, LocalObjectStore

MIB = 1 << 20


def _all_entries(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


def _temp_files(root: Path) -> list[Path]:
    return [p for p in root.rglob("*") if p.name.startswith(".tmp-")]


def test_describes_itself(tmp_path: Path) -> None:
    store = LocalObjectStore(tmp_path)
    assert store.url == tmp_path.as_uri()
    assert store.root == str(tmp_path)
    assert store.guarantees == {
        Guarantee.ATOMIC_CREATE,
        Guarantee.DURABLE_WRITE,
        Guarantee.SHARED,
        Guarantee.PROCESS_LOCK,
    }
    assert store.is_local
    assert "LocalObjectStore" in repr(store)


async def test_root_is_made_on_first_write(tmp_path: Path) -> None:
    root = tmp_path / "not" / "yet"
    store = LocalObjectStore(root)
    assert await store.list("") == []
    with pytest.raises(ObjectNotFound):
        await store.get("x")
    await store.delete(["x"])
    assert not root.exists()
    await store.put("a/b", b"1")
    assert (root / "a" / "b").read_bytes() == b"1"


async def test_relative_root_is_fixed_at_construction(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    store = LocalObjectStore("rel")
    monkeypatch.chdir("/")
    await store.put("x", b"1")
    assert (tmp_path / "rel" / "x").read_bytes() == b"1"


async def test_no_temp_files_left(tmp_path: Path) -> None:
    store = LocalObjectStore(tmp_path)
    await store.put("a/b/put", b"1")
    await store.put("a/b/put", b"2")
    await store.create("a/b/created", b"3")
    with pytest.raises(ObjectExists):
        await store.create("a/b/created", b"4")
    with pytest.raises(ObjectStoreError):  # "a/b" is a directory
        await store.put("a/b", b"5")
    with pytest.raises(ObjectStoreError):
        await store.create("a/b", b"6")
    await store.delete(["a/b/put"])
    assert _temp_files(tmp_path) == []
    assert _all_entries(tmp_path) == ["a", "a/b", "a/b/created"]


async def test_list_skips_temp_files(tmp_path: Path) -> None:
    store = LocalObjectStore(tmp_path)
    await store.put("log/0001", b"x")
    (tmp_path / "log" / ".tmp-leftover").write_bytes(b"from a crash")
    (tmp_path / ".tmp-dir").mkdir()
    (tmp_path / ".tmp-dir" / "f").write_bytes(b"")
    assert await store.list("") == ["log/0001"]
    assert await store.list("log/") == ["log/0001"]
    assert await store.list("log/.") == []


async def test_list_skips_directories_emptied_by_delete(tmp_path: Path) -> None:
    store = LocalObjectStore(tmp_path)
    await store.put("a/b/c", b"x")
    await store.delete(["a/b/c"])
    assert (tmp_path / "a" / "b").is_dir()
    assert await store.list("") == []
    assert await store.list("a") == []


async def test_put_is_atomic_for_a_concurrent_reader(tmp_path: Path) -> None:
    store = LocalObjectStore(tmp_path)
    one, two = b"\x01" * MIB, b"\x02" * MIB
    await store.put("obj", one)
    stop = threading.Event()
    seen: list[bytes] = []
    errors: list[BaseException] = []

    def reader() -> None:
        async def read() -> None:
            while not stop.is_set():
                data = await store.get("obj")  # never ObjectNotFound
                if data not in (one, two):
                    seen.append(data[:16] + b"..." + data[-16:] + f" ({len(data)})".encode())
                direct = (tmp_path / "obj").read_bytes()
                if direct not in (one, two):
                    seen.append(direct[:16] + b"..." + direct[-16:])

        try:
            asyncio.run(read())
        except BaseException as exc:
            errors.append(exc)

    thread = threading.Thread(target=reader)
    thread.start()
    try:
        for i in range(100):
            await store.put("obj", two if i % 2 == 0 else one)
    finally:
        stop.set()
        await asyncio.to_thread(thread.join)
    assert errors == []
    assert seen == []


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/fd")
async def test_writes_fsync_file_and_directories(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    synced: list[str] = []
    real_fsync = os.fsync

    def fsync(fd: int) -> None:
        synced.append(os.readlink(f"/proc/self/fd/{fd}"))
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    root = tmp_path / "root"
    store = LocalObjectStore(root)

    await store.put("a/b/obj", b"data")
    temp = [p for p in synced if Path(p).name.startswith(".tmp-")]
    assert len(temp) == 1
    assert Path(temp[0]).parent == root / "a" / "b"
    # New directories are synced into their parents, then the object's directory.
    dirs = [p for p in synced if p not in temp]
    assert set(dirs) == {str(tmp_path), str(root), str(root / "a"), str(root / "a" / "b")}
    assert dirs[-1] == str(root / "a" / "b")
    assert synced.index(temp[0]) < synced.index(str(root / "a" / "b"))

    synced.clear()
    await store.create("a/b/new", b"data")
    assert [Path(p).name.startswith(".tmp-") for p in synced] == [True, False]
    assert synced[1] == str(root / "a" / "b")

    synced.clear()
    await store.delete(["a/b/new", "a/b/obj", "a/missing"])
    assert synced == [str(root / "a" / "b")]


INVALID_NAMES = [
    "",
    "/abs",
    "trailing/",
    "a//b",
    "..",
    "../escape",
    "a/../b",
    ".",
    "a/./b",
    "nul\x00byte",
    ".tmp-reserved",
    "a/.tmp-reserved",
]


@pytest.mark.parametrize("name", INVALID_NAMES)
async def test_invalid_names_are_rejected(tmp_path: Path, name: str) -> None:
    store = LocalObjectStore(tmp_path / "root")
    for call in (
        store.get(name),
        store.put(name, b"x"),
        store.create(name, b"x"),
        store.delete([name]),
    ):
        with pytest.raises(ValueError, match="invalid object name") as info:
            await call
        assert repr(name) in str(info.value)
    assert not (tmp_path / "root").exists()


@pytest.mark.parametrize("prefix", ["/", "/a", "../", "a//", "a/../", "./a", "x\x00"])
async def test_invalid_prefixes_are_rejected(tmp_path: Path, prefix: str) -> None:
    store = LocalObjectStore(tmp_path)
    with pytest.raises(ValueError, match="invalid object name prefix") as info:
        await store.list(prefix)
    assert repr(prefix) in str(info.value)


async def test_odd_but_valid_names(tmp_path: Path) -> None:
    store = LocalObjectStore(tmp_path)
    names = ["..dots", ".hidden", "a/...", "sp ace", "ünï/cödé", "tmp-x", "a/.tmp"]
    for name in names:
        await store.put(name, name.encode())
    assert await store.list("") == sorted(names)
    for name in names:
        assert await store.get(name) == name.encode()


async def test_delete_rejects_a_bare_string(tmp_path: Path) -> None:
    store = LocalObjectStore(tmp_path)
    await store.put("a", b"x")
    with pytest.raises(TypeError, match="iterable of names"):
        await store.delete("abc")
    assert await store.get("a") == b"x"


async def test_a_directory_is_not_an_object(tmp_path: Path) -> None:
    store = LocalObjectStore(tmp_path)
    await store.put("dir/obj", b"x")
    with pytest.raises(ObjectNotFound):
        await store.get("dir")
    await store.delete(["dir"])  # not an object: skipped
    assert await store.get("dir/obj") == b"x"


async def test_errors_are_translated_and_name_the_object(tmp_path: Path) -> None:
    store = LocalObjectStore(tmp_path)
    await store.put("file", b"x")
    await store.put("dir/obj", b"x")

    # A name below a file: reading finds nothing, writing cannot work.
    with pytest.raises(ObjectNotFound):
        await store.get("file/below")
    with pytest.raises(ObjectStoreError) as info:
        await store.put("file/below", b"y")
    assert not isinstance(info.value, ObjectNotFound | ObjectExists)
    assert info.value.name == "file/below"
    assert "'file/below'" in str(info.value)
    assert isinstance(info.value.__cause__, OSError)

    # A name that is a directory cannot be written.
    for write in (store.put("dir", b"y"), store.create("dir", b"y")):
        with pytest.raises(ObjectStoreError) as info:
            await write
        assert not isinstance(info.value, ObjectExists)
        assert info.value.name == "dir"
        assert store.url in str(info.value)

    # A name too long for the filesystem.
    long = "x" * 300
    for call in (store.get(long), store.put(long, b"y"), store.create(long, b"y")):
        with pytest.raises(ObjectStoreError) as info:
            await call
        assert type(info.value) is ObjectStoreError
        assert info.value.name == long
        assert info.value.transient

    assert _temp_files(tmp_path) == []


async def test_list_through_a_file_is_empty(tmp_path: Path) -> None:
    store = LocalObjectStore(tmp_path)
    await store.put("file", b"x")
    assert await store.list("file/") == []
    assert await store.list("file") == ["file"]


async def test_shared_between_handles(tmp_path: Path) -> None:
    writer, reader = LocalObjectStore(tmp_path), LocalObjectStore(tmp_path)
    await writer.create("log/0001", b"a")
    assert await reader.list("log/") == ["log/0001"]
    with pytest.raises(ObjectExists):
        await reader.create("log/0001", b"b")


async def test_accepts_bytes_like_and_copies(tmp_path: Path) -> None:
    store = LocalObjectStore(tmp_path)
    buf = bytearray(b"abc")
    await store.put("b", buf)  # type: ignore[arg-type]
    buf[0] = 0
    assert await store.get("b") == b"abc"


@pytest.mark.parametrize("code", [errno.EACCES, errno.EPERM, errno.EROFS])
def test_permission_and_read_only_errors_are_permanent(tmp_path: Path, code: int) -> None:
    # Retrying cannot cure them: an open must fail at once, not after its retry window.
    error = LocalObjectStore(tmp_path)._error("create", "probe/x", OSError(code, os.strerror(code)))
    assert not error.transient
    assert os.strerror(code) in str(error)
    other = LocalObjectStore(tmp_path)._error("put", "x", OSError(errno.EIO, "I/O error"))
    assert other.transient


@pytest.mark.skipif(os.name != "posix" or os.geteuid() == 0, reason="root ignores permissions")
async def test_an_unwritable_directory_fails_at_once(tmp_path: Path) -> None:
    root = tmp_path / "ro"
    root.mkdir()
    root.chmod(0o500)
    try:
        with pytest.raises(ObjectStoreError) as info:
            await LocalObjectStore(root).put("x", b"1")
        assert not info.value.transient
    finally:
        root.chmod(0o700)


async def test_get_of_an_absent_name_answers_without_a_thread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A follower polls for the next log object's name hundreds of times a
    second while busy: the absent answer costs a ``stat``, not a thread hop."""
    store = LocalObjectStore(tmp_path)
    await store.put("log/1", b"x")

    def no_thread(*args: object, **kwargs: object) -> None:
        raise AssertionError("a thread for an absent name")

    monkeypatch.setattr(asyncio, "to_thread", no_thread)
    with pytest.raises(ObjectNotFound):
        await store.get("log/2")
    with pytest.raises(ObjectNotFound):
        await store.get("nodir/2")
    monkeypatch.undo()
    assert await store.get("log/1") == b"x"  # a present one: read in the thread
