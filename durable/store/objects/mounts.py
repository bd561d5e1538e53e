"""Which filesystem a local path is on, read from ``/proc/self/mountinfo``.

The segment log medium (`durable.store.objects.segments`) trusts ``flock``
and ``fdatasync`` as a local filesystem keeps them; on a network filesystem
neither can be trusted (NFS and SMB emulate ``flock`` with server-side
locks that a partition loses or a client reboot forgets, and a sync may be
acknowledged by a cache that a server crash loses). `filesystem_type`
names the filesystem of a path, and `NETWORK_FILESYSTEMS` lists the types
that the medium refuses. Elsewhere than on Linux (no mountinfo) the type is
None and nothing is refused.
"""

from __future__ import annotations

import os

__all__ = ["MOUNTINFO", "NETWORK_FILESYSTEMS", "filesystem_type", "parse_mountinfo"]

#: Where the kernel lists this process's mounts.
MOUNTINFO = "/proc/self/mountinfo"

#: Filesystem types (as mountinfo names them) whose ``flock`` or
#: ``fdatasync`` cannot be trusted by the segment log.
NETWORK_FILESYSTEMS = frozenset(
    {
        "9p",
        "afs",
        "ceph",
        "cifs",
        "fuse.gcsfuse",
        "fuse.glusterfs",
        "fuse.goofys",
        "fuse.rclone",
        "fuse.s3fs",
        "fuse.sshfs",
        "glusterfs",
        "gpfs",
        "lustre",
        "ncpfs",
        "nfs",
        "nfs4",
        "smb3",
        "smbfs",
        "sshfs",
    }
)


def _unescape(field: str) -> str:
    """A mountinfo path field: spaces, tabs, newlines and backslashes are octal escapes."""
    for code, char in (("\\040", " "), ("\\011", "\t"), ("\\012", "\n"), ("\\134", "\\")):
        field = field.replace(code, char)
    return field


def parse_mountinfo(text: str) -> list[tuple[str, str]]:
    """``(mount point, filesystem type)`` of every line of a mountinfo text.

    A line is ``id parent major:minor root mount-point options
    [optional fields...] - type source super-options``; lines that do not
    have that shape are skipped.
    """
    mounts = []
    for line in text.splitlines():
        fields = line.split(" ")
        try:
            dash = fields.index("-", 6)
        except ValueError:
            continue
        if len(fields) < dash + 2:
            continue
        mounts.append((_unescape(fields[4]), fields[dash + 1]))
    return mounts


def filesystem_type(path: str | os.PathLike[str], mountinfo: str | None = None) -> str | None:
    """The type of the filesystem that holds ``path`` (``"ext4"``, ``"nfs4"``...).

    The mount whose mount point is the longest prefix of the path's real
    path (the last such line wins, as later mounts hide earlier ones);
    None when ``mountinfo`` (default: `MOUNTINFO`) cannot be read (not Linux).
    """
    try:
        with open(mountinfo or MOUNTINFO, encoding="utf-8", errors="surrogateescape") as f:
            mounts = parse_mountinfo(f.read())
    except OSError:
        return None
    real = os.path.realpath(os.fspath(path))
    best: tuple[int, str] | None = None
    for point, fstype in mounts:
        inside = real == point or real.startswith(point.rstrip("/") + "/")
        if inside and (best is None or len(point) >= best[0]):
            best = (len(point), fstype)
    return None if best is None else best[1]
