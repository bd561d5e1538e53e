"""Stored formats of log objects and checkpoints, and their names.

Log object ``log/<seq:020d>``: a framed msgpack map
``{"w": writer id, "s": seq, "m": is-open-marker, "o": [key, value|None, ...]}``.
Checkpoint ``ckpt/<seq:020d>``: the whole state after log object ``seq``,
``{"s": seq, "w": writer id, "k": [keys], "v": [values], "mk": [marker seqs]}``.
New fields get defaults when read, so older objects stay readable.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import msgpack

from durable.errors import CorruptObject
from durable.store.framing import Kind, frame, unframe

__all__ = [
    "CKPT_PREFIX",
    "LOG_PREFIX",
    "Checkpoint",
    "LogObject",
    "ckpt_name",
    "decode_checkpoint",
    "decode_log",
    "encode_checkpoint",
    "encode_log",
    "log_name",
    "parse_seq",
]

LOG_PREFIX = "log/"
CKPT_PREFIX = "ckpt/"
_WIDTH = 20


def log_name(seq: int) -> str:
    """Object name of log object ``seq``."""
    return f"{LOG_PREFIX}{seq:0{_WIDTH}d}"


def ckpt_name(seq: int) -> str:
    """Object name of the checkpoint taken after log object ``seq``."""
    return f"{CKPT_PREFIX}{seq:0{_WIDTH}d}"


def parse_seq(name: str, prefix: str) -> int | None:
    """The sequence number in ``name``, or None if it is not one of ours."""
    tail = name[len(prefix) :] if name.startswith(prefix) else ""
    if len(tail) != _WIDTH or not tail.isdigit():
        return None
    return int(tail)


@dataclass(slots=True)
class LogObject:
    """One decoded log object."""

    seq: int
    writer: bytes
    ops: list[bytes | None]
    marker: bool = False


@dataclass(slots=True)
class Checkpoint:
    """One decoded checkpoint."""

    seq: int
    writer: bytes
    keys: list[bytes]
    values: list[bytes]
    markers: list[int] = field(default_factory=list)


def encode_log(seq: int, writer: bytes, ops: Sequence[bytes | None], marker: bool) -> bytes:
    """Frame a log object."""
    body = msgpack.packb({"w": writer, "s": seq, "m": marker, "o": ops}, use_bin_type=True)
    return frame(Kind.LOG, body)


def _unpack(name: str, kind: Kind, data: bytes) -> dict[str, Any]:
    _, body = unframe(name, data, kind)
    try:
        obj = msgpack.unpackb(body, raw=False, use_list=True)
    except Exception as e:  # msgpack raises several unrelated types
        raise CorruptObject(name, f"undecodable body ({e})") from e
    if not isinstance(obj, dict):
        raise CorruptObject(name, "body is not a map")
    return obj


def decode_log(name: str, data: bytes) -> LogObject:
    """Check and decode a log object read from ``name``."""
    obj = _unpack(name, Kind.LOG, data)
    try:
        log = LogObject(
            seq=_int(obj["s"]),
            writer=_bytes(obj["w"]),
            ops=_ops(obj.get("o", [])),
            marker=bool(obj.get("m")),
        )
    except (KeyError, TypeError, ValueError) as e:
        raise CorruptObject(name, f"missing or bad field ({e})") from e
    if log.seq != parse_seq(name, LOG_PREFIX):
        raise CorruptObject(name, f"holds seq {log.seq}, not the one in its name")
    return log


def _int(value: object) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise TypeError(f"expected an int, found {value!r:.80}")
    return value


def _bytes(value: object) -> bytes:
    if not isinstance(value, bytes):
        raise TypeError(f"expected bytes, found {value!r:.80}")
    return value


def _bytes_list(value: object) -> list[bytes]:
    if not isinstance(value, list) or not all(isinstance(x, bytes) for x in value):
        raise TypeError("expected a list of bytes")
    return value


def _ops(value: object) -> list[bytes | None]:
    """Flattened ``[key, value-or-None, ...]`` pairs: keys bytes, values bytes or None."""
    if not isinstance(value, list) or len(value) % 2:
        raise ValueError("operations are not a list of key, value pairs")
    for i, x in enumerate(value):
        if not isinstance(x, bytes) and (x is not None or i % 2 == 0):
            raise TypeError(f"operation field {i} is {x!r:.80}, not bytes")
    return value


def encode_checkpoint(
    seq: int, writer: bytes, keys: list[bytes], values: list[bytes], markers: list[int]
) -> bytes:
    """Frame a checkpoint."""
    body = msgpack.packb(
        {"s": seq, "w": writer, "k": keys, "v": values, "mk": markers}, use_bin_type=True
    )
    return frame(Kind.CHECKPOINT, body)


def decode_checkpoint(name: str, data: bytes) -> Checkpoint:
    """Check and decode a checkpoint read from ``name``."""
    obj = _unpack(name, Kind.CHECKPOINT, data)
    try:
        markers = obj.get("mk", [])
        if not isinstance(markers, list):
            raise TypeError("markers are not a list")
        ck = Checkpoint(
            seq=_int(obj["s"]),
            writer=_bytes(obj["w"]),
            keys=_bytes_list(obj["k"]),
            values=_bytes_list(obj["v"]),
            markers=[_int(m) for m in markers],
        )
    except (KeyError, TypeError, ValueError) as e:
        raise CorruptObject(name, f"missing or bad field ({e})") from e
    if len(ck.keys) != len(ck.values):
        raise CorruptObject(name, "key and value counts differ")
    if ck.seq != parse_seq(name, CKPT_PREFIX):
        raise CorruptObject(name, f"holds seq {ck.seq}, not the one in its name")
    return ck
