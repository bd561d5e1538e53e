"""Network filesystems and the segment medium: the type of a path's
filesystem comes from mountinfo; on NFS, SMB, 9p, sshfs... a writer on the
segment medium is refused (`UnsafeFilesystem`) and a plain path keeps the
object log.

A network filesystem cannot be mounted here, so the tests point
`durable.store.objects.mounts.MOUNTINFO` at a real mountinfo file that
says where one is mounted; everything else (the directories, the writer,
the stores) is real.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from durable.errors import UnsafeFilesystem
from durable.store.log import LogWriter, WriteBatch
from durable.store.objects import LocalObjectStore, SegmentObjectStore, mounts, open_object_store
from durable.store.objects.mounts import filesystem_type, parse_mountinfo

LINES = [
    "22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw",
    "40 22 0:35 / /mnt/with\\040space rw,relatime shared:7 - tmpfs tmpfs rw",
    "41 22 0:36 / /srv/nfs rw,relatime shared:8 master:2 - nfs4 server:/export rw,vers=4.2",
    "not a mountinfo line",
]


def test_mountinfo_lines_give_mount_points_and_types() -> None:
    assert parse_mountinfo("\n".join(LINES)) == [
        ("/", "ext4"),
        ("/mnt/with space", "tmpfs"),
        ("/srv/nfs", "nfs4"),
    ]


def test_the_longest_mount_point_holding_the_path_wins(tmp_path: Path) -> None:
    info = tmp_path / "mountinfo"
    info.write_text("\n".join(LINES) + "\n")
    assert filesystem_type("/srv/nfs/app/state", str(info)) == "nfs4"
    assert filesystem_type("/srv/nfs", str(info)) == "nfs4"
    assert filesystem_type("/srv/nfsother", str(info)) == "ext4"
    assert filesystem_type("/mnt/with space/x", str(info)) == "tmpfs"
    assert filesystem_type("/tmp", str(tmp_path / "absent")) is None  # not Linux: unknown


def test_this_machines_temp_dir_is_not_a_network_filesystem(tmp_path: Path) -> None:
    fstype = filesystem_type(tmp_path)
    assert fstype is not None
    assert fstype not in mounts.NETWORK_FILESYSTEMS


@pytest.fixture
def on_nfs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A directory that mountinfo says is an NFS mount."""
    where = tmp_path / "nfs"
    where.mkdir()
    info = tmp_path / "mountinfo"
    info.write_text(
        "22 1 8:1 / / rw - ext4 /dev/sda1 rw\n"
        f"41 22 0:36 / {where} rw,relatime - nfs4 server:/export rw\n"
    )
    monkeypatch.setattr(mounts, "MOUNTINFO", str(info))
    return where


async def test_a_segment_writer_on_a_network_filesystem_is_refused(on_nfs: Path) -> None:
    store = SegmentObjectStore(on_nfs / "state")
    with pytest.raises(UnsafeFilesystem) as err:
        await LogWriter.open(store)
    assert err.value.fstype == "nfs4"
    assert "nfs4" in str(err.value)
    assert "flock and fdatasync" in str(err.value)
    assert not (on_nfs / "state" / "segments").exists()  # nothing was written


async def test_a_plain_path_on_a_network_filesystem_keeps_the_object_log(on_nfs: Path) -> None:
    store = await open_object_store(on_nfs / "state")
    assert type(store) is LocalObjectStore
    w = await LogWriter.open(store)
    await w.commit(WriteBatch().put(b"k", b"v"))
    await w.close()
    assert (on_nfs / "state" / "log").is_dir()
