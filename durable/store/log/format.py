"""Stored formats of log objects and checkpoints, and their names.

Log object ``log/<seq:020d>``: a framed msgpack map
``{"w": writer id, "s": seq, "m": is-open-marker, "o": [key, value|None, ...]}``;
an open marker of a writer opened at an epoch (a partition's owner) also
holds ``"e": epoch``.
Checkpoint ``ckpt/<seq:020d>``: the whole state after log object ``seq``,
``{"s": seq, "w": writer id, "k": [keys], "v": [values], "mk": [marker seqs]}``,
and ``"e"``: the newest epoch of the markers up to ``seq``, once one had one.
New fields get defaults when read, so older objects stay readable (no
``"e"``: no epoch), and are written only when set, so a store whose writers
open without an epoch is written byte for byte as before; readers that
predate a field ignore it.
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
    "newer_epoch",
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


def newer_epoch(a: int | None, b: int | None) -> int | None:
    """The higher of two epochs, where None (no epoch) is below every epoch."""
    if a is None:
        return b
    return a if b is None or a >= b else b


@dataclass(slots=True)
class LogObject:
    """One decoded log object."""

    seq: int
    writer: bytes
    ops: list[bytes | None]
    marker: bool = False
    #: The epoch an open marker was written at (None: none, or not a marker).
    epoch: int | None = None


@dataclass(slots=True)
class Checkpoint:
    """One decoded checkpoint."""

    seq: int
    writer: bytes
    keys: list[bytes]
    values: list[bytes]
    markers: list[int] = field(default_factory=list)
    #: The newest epoch of the open markers up to `seq` (None: none had one).
    epoch: int | None = None


def encode_log(
    seq: int,
    writer: bytes,
    ops: Sequence[bytes | None],
    marker: bool,
    epoch: int | None = None,
) -> bytes:
    """Frame a log object (an open marker at ``epoch``, if given)."""
    obj: dict[str, Any] = {"w": writer, "s": seq, "m": marker, "o": ops}
    if epoch is not None:
        obj["e"] = epoch
    return frame(Kind.LOG, msgpack.packb(obj, use_bin_type=True))


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
            epoch=_epoch(obj.get("e")),
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


def _epoch(value: object) -> int | None:
    if value is None:
        return None
    epoch = _int(value)
    if epoch < 0:
        raise ValueError(f"epoch {epoch} is negative")
    return epoch


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
    seq: int,
    writer: bytes,
    keys: list[bytes],
    values: list[bytes],
    markers: list[int],
    epoch: int | None = None,
) -> bytes:
    """Frame a checkpoint (with the newest marker ``epoch``, if any)."""
    obj: dict[str, Any] = {"s": seq, "w": writer, "k": keys, "v": values, "mk": markers}
    if epoch is not None:
        obj["e"] = epoch
    return frame(Kind.CHECKPOINT, msgpack.packb(obj, use_bin_type=True))


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
            epoch=_epoch(obj.get("e")),
        )
    except (KeyError, TypeError, ValueError) as e:
        raise CorruptObject(name, f"missing or bad field ({e})") from e
    if len(ck.keys) != len(ck.values):
        raise CorruptObject(name, "key and value counts differ")
    if ck.seq != parse_seq(name, CKPT_PREFIX):
        raise CorruptObject(name, f"holds seq {ck.seq}, not the one in its name")
    return ck
