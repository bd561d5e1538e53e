"""Memo entries without I/O: object names, key hashing, value encoding.

Everything here is a plain function, so the layout and the stored format are
tested without a store. `durable.engine.memo` does the I/O.

Object layout below the memo store's prefix ``{p}``::

    {p}/memos/{run_id}/run/{sha256(key)}                  run-scoped entries
    {p}/memos/{run_id}/steps/{step:020d}/{sha256(key)}    per-step entries
    {p}/step-outputs/{run_id}/...                         step-output replay

The key hash is the SHA-256 hex digest of the key's UTF-8 bytes (lone
surrogates allowed), so any string is a valid key. Run ids cannot contain
``/``, so ``{p}/memos/{run_id}/`` never lists another run's objects.

An entry is a frame (`durable.store.framing`, kind `Kind.MEMO`) whose body
is the MessagePack map ``{"k": <key as UTF-8 bin>, "v": <value>}``. The key
is stored to detect a misplaced entry; readers ignore unknown fields.

Values are plain data: ``None``, ``bool``, ``int`` (64-bit), ``float``,
``str``, ``bytes``/``bytearray``/``memoryview`` (stored as ``bin``), lists
and tuples (read back as lists), dicts whose keys are ``str``, ``bytes``,
``int``, ``float``, ``bool`` or ``None``, and dataclass instances (stored
as maps of their fields by name, read back as dicts). Anything else raises
`TypeError`.
"""

from __future__ import annotations

import dataclasses
import hashlib
from typing import Any

import msgpack

from durable.errors import CorruptObject, InvalidArgument
from durable.store.framing import Kind, frame, unframe

__all__ = [
    "CONTENT_KEY_PREFIX",
    "canonical",
    "content_key",
    "decode_entry",
    "encode_entry",
    "key_hash",
    "normalize_prefix",
    "plain_default",
    "run_dir",
    "run_scope",
    "step_outputs_dir",
    "step_scope",
]

#: The prefix of every key `content_key` derives.
CONTENT_KEY_PREFIX = "content:"
#: The largest step number (a u64, like the runtime's step numbers).
MAX_STEP = 2**64 - 1


# ------------------------------------------------------------------- layout


def normalize_prefix(prefix: str) -> str:
    """``prefix`` without leading or trailing ``/``; `InvalidArgument` if malformed."""
    if not isinstance(prefix, str):
        raise InvalidArgument(f"memo prefix must be a str, got {type(prefix).__name__}")
    stripped = prefix.strip("/")
    if stripped and any(s in ("", ".", "..") for s in stripped.split("/")):
        raise InvalidArgument(f"invalid memo prefix {prefix!r}: no empty, '.' or '..' segments")
    return stripped


def _base(prefix: str) -> str:
    return f"{prefix}/" if prefix else ""


def run_dir(prefix: str, run_id: str) -> str:
    """The names of every memo entry (both scopes) of ``run_id`` start with this."""
    return f"{_base(prefix)}memos/{run_id}/"


def run_scope(prefix: str, run_id: str) -> str:
    """The names of the run-scoped entries of ``run_id`` start with this."""
    return f"{run_dir(prefix, run_id)}run/"


def step_scope(prefix: str, run_id: str, step: int) -> str:
    """The names of the entries of step ``step`` of ``run_id`` start with this."""
    if isinstance(step, bool) or not isinstance(step, int):
        raise InvalidArgument(f"step number must be an int, got {type(step).__name__}")
    if not 0 <= step <= MAX_STEP:
        raise InvalidArgument(f"step number {step} of run {run_id!r} is outside 0..{MAX_STEP}")
    return f"{run_dir(prefix, run_id)}steps/{step:020d}/"


def step_outputs_dir(prefix: str, run_id: str) -> str:
    """The area reserved for the step-output replay records of ``run_id``."""
    return f"{_base(prefix)}step-outputs/{run_id}/"


def _key_bytes(key: str) -> bytes:
    if not isinstance(key, str):
        raise TypeError(f"memo key must be a str, got {type(key).__name__}")
    return key.encode("utf-8", "surrogatepass")


def key_hash(key: str) -> str:
    """The SHA-256 hex digest of ``key``: the last segment of its object name."""
    return hashlib.sha256(_key_bytes(key)).hexdigest()


# ------------------------------------------------------------------- values


def plain_default(obj: Any) -> Any:
    """msgpack's ``default`` hook for plain data: a dataclass becomes the map of
    its fields; anything else is a `TypeError` ("not plain data")."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: getattr(obj, f.name) for f in dataclasses.fields(obj)}
    raise TypeError(f"a {type(obj).__name__} is not plain data")


def _unpack(data: bytes) -> Any:
    return msgpack.unpackb(data, raw=False, strict_map_key=False)


def encode_entry(key: str, value: Any) -> tuple[bytes, Any]:
    """The framed object for ``key`` -> ``value``, and ``value`` as it reads back.

    Raises `TypeError` naming the key if ``value`` is not plain data (or
    would not read back, like a dict with a list as a key).
    """
    kb = _key_bytes(key)
    try:
        body = msgpack.packb({"k": kb, "v": value}, default=plain_default, use_bin_type=True)
        decoded = _unpack(body)["v"]
    except (TypeError, ValueError, OverflowError, RecursionError) as e:
        raise TypeError(
            f"memo value for key {_short(key)!r} cannot be encoded: {e}; memo values "
            "must be plain data (None, bool, int, float, str, bytes, list, tuple, dict, "
            "dataclass)"
        ) from None
    return frame(Kind.MEMO, body), decoded


def decode_entry(name: str, data: bytes, key: str) -> Any:
    """The value stored in object ``name`` for ``key``.

    Raises `CorruptObject` (or `UnsupportedFormat`) naming the object if the
    frame, the MessagePack body or its shape is wrong.
    """
    _, body = unframe(name, data, Kind.MEMO)
    try:
        entry = _unpack(body)
    except Exception as e:  # msgpack raises several unrelated types
        raise CorruptObject(name, f"undecodable memo entry: {e}") from None
    if not isinstance(entry, dict) or "v" not in entry:
        raise CorruptObject(name, "memo entry is not a map with a value")
    if entry.get("k") != _key_bytes(key):
        raise CorruptObject(name, "memo entry holds another key")
    return entry["v"]


# ------------------------------------------------------------- content keys


def _sort_key(key: Any) -> tuple[int, Any]:
    """Map keys sort by kind (None, bool, number, str, bytes, other), then value."""
    if key is None:
        return (0, 0)
    if isinstance(key, bool):
        return (1, key)
    if isinstance(key, int | float):
        return (2, key)
    if isinstance(key, str):
        return (3, key)
    if isinstance(key, bytes):
        return (4, key)
    return (5, msgpack.packb(key, use_bin_type=True))


def canonical(obj: Any) -> Any:
    """``obj`` with every map's keys sorted (`_sort_key`), dataclasses as maps:
    equal values encode to equal bytes (content keys, input hashes)."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        obj = plain_default(obj)
    if isinstance(obj, dict):
        items = [(canonical(k), canonical(v)) for k, v in obj.items()]
        items.sort(key=lambda kv: _sort_key(kv[0]))
        return dict(items)
    if isinstance(obj, list | tuple):
        return tuple(canonical(v) for v in obj)
    return obj


def content_key(input: Any) -> str:
    """``"content:"`` + the SHA-256 hex digest of ``input`` as MessagePack.

    ``input`` is plain data as for values. Map keys (and dataclass fields) are
    sorted first (str keys in code-point order, as `sorted` does), so equal
    dicts give the same key whatever their insertion order, and a dataclass
    the same key as the dict of its fields. Raises `TypeError` if ``input``
    is not plain data.
    """
    try:
        packed = msgpack.packb(canonical(input), default=plain_default, use_bin_type=True)
    except (TypeError, ValueError, OverflowError, RecursionError) as e:
        raise TypeError(
            f"memo content input cannot be encoded: {e}; content inputs must be plain "
            "data (None, bool, int, float, str, bytes, list, tuple, dict, dataclass)"
        ) from None
    return CONTENT_KEY_PREFIX + hashlib.sha256(packed).hexdigest()


def _short(key: str, limit: int = 100) -> str:
    return key if len(key) <= limit else key[:limit] + "..."
