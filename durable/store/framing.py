"""Framing of every stored object: magic, kind, format version, length, checksum.

A frame is ``MAGIC(4) | kind(1) | version(1) | reserved(2) | length(4) |
crc32(4) | body``. `unframe` checks all of it and raises `CorruptObject`
(naming the object) or `UnsupportedFormat`, never returns damaged bytes.
"""

from __future__ import annotations

import enum
import struct
import zlib

from durable.errors import CorruptObject, UnsupportedFormat

__all__ = ["FORMAT_VERSION", "Kind", "frame", "unframe"]

MAGIC = b"DRBL"
_HEADER = struct.Struct(">4sBBHII")
#: The newest format version this code writes and reads.
FORMAT_VERSION = 1


class Kind(enum.IntEnum):
    """What an object holds."""

    LOG = 1
    CHECKPOINT = 2
    BLOB = 3
    MEMO = 4
    REPLAY = 5
    INBOX = 6


def frame(kind: Kind, body: bytes, version: int = FORMAT_VERSION) -> bytes:
    """Wrap ``body`` in a checksummed frame."""
    return _HEADER.pack(MAGIC, kind, version, 0, len(body), zlib.crc32(body)) + body


def unframe(name: str, data: bytes, kind: Kind) -> tuple[int, bytes]:
    """Check a frame read from object ``name``; return (version, body)."""
    if len(data) < _HEADER.size:
        raise CorruptObject(name, f"truncated: {len(data)} bytes, shorter than a header")
    magic, got_kind, version, _, length, crc = _HEADER.unpack_from(data)
    if magic != MAGIC:
        raise CorruptObject(name, "bad magic (not a durable object)")
    if got_kind != kind:
        raise CorruptObject(name, f"holds kind {got_kind}, expected {int(kind)}")
    if version > FORMAT_VERSION or version == 0:
        raise UnsupportedFormat(name, version, FORMAT_VERSION)
    body = data[_HEADER.size :]
    if len(body) != length:
        raise CorruptObject(name, f"truncated: body is {len(body)} bytes, header says {length}")
    if zlib.crc32(body) != crc:
        raise CorruptObject(name, "checksum mismatch")
    return version, body
