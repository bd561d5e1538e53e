"""The codec record: what a store's payloads need, checked when an Engine opens.

Arguments, results, exceptions and signals are stored by the engine's
`Codec`. An engine that cannot read them (no signing key where pickles are
signed, another key, ``codec="msgpack"`` where pickles are stored) would
fail every run it picks up; one that writes what the others cannot read
(signed pickles among unsigned ones, pickles in a plain-data store) would
break them later. So a store records what its payloads need, and an
`Engine` checks it before it reads or writes a run (`ensure_codec_record`,
called by ``Engine.__aenter__``).

The record is the KV key ``workflow/codec`` (the engine's reserved prefix):
a MessagePack map ``{"v": 1, "codec": "auto" | "msgpack", "keys": [...]}``
where ``keys`` are the fingerprints (`key_fingerprint`) of every signing
key whose signatures the store's pickles may carry (empty: its pickles are
unsigned; always empty with ``"msgpack"``, which stores no pickle). A key
itself is never stored.

- **No record** (a new store, or one written by a durable older than the
  record): the engine records its own configuration (all its keys), and
  the commit is durable before the engine starts. The first engine to open
  such a store decides for it.
- **A record this engine matches**: it opens. If its signing key (the first
  of ``signing_key=[new, old]``) is not recorded yet but every recorded key
  is among its keys, it is a rotation: the record gains the new key
  (durable before the engine starts), and engines without it are refused
  from then on.
- **A record it does not match** raises `CodecMismatch` naming what is
  missing (`mismatch`), and the engine does not open: ``codec="msgpack"``
  on a store with pickles, ``codec="auto"`` on a plain-data store, no key
  on a signed store, a key on an unsigned one, a recorded key it lacks.
- **A deliberate change** (retire a key no stored pickle needs any more,
  start signing a store, switch the codec): ``Engine(...,
  replace_codec_record=True)`` records this engine's configuration instead
  of checking it. A run whose payloads it then cannot verify is released
  back to the queue (logged), not failed, until an engine that can read
  them runs it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import msgpack

from durable._logging import get_logger
from durable.decorators.codec import Codec
from durable.engine.runs import RESERVED_KV_PREFIX
from durable.errors import CodecMismatch, CorruptEngineRecord

if TYPE_CHECKING:
    from durable.store.kv import KvNamespace

__all__ = [
    "CODEC_RECORD_KEY",
    "CODEC_RECORD_VERSION",
    "CodecRecord",
    "decode_record",
    "encode_record",
    "check_codec_record",
    "ensure_codec_record",
    "mismatch",
    "rotated",
]

log = get_logger("durable.decorators")

#: The KV key of a store's codec record.
CODEC_RECORD_KEY = RESERVED_KV_PREFIX + b"codec"
#: The format version of the codec record.
CODEC_RECORD_VERSION = 1
_CHANGE = "or, to change it deliberately, open it once with replace_codec_record=True"


@dataclass(frozen=True, slots=True)
class CodecRecord:
    """What a store's payloads need: its codec mode and the fingerprints of
    the signing keys its pickles may be signed with (the key that signs
    first)."""

    codec: str
    keys: tuple[str, ...] = ()

    @classmethod
    def of(cls, codec: Codec) -> CodecRecord:
        """The record of a store written by ``codec`` alone."""
        if codec.mode == "msgpack":
            return cls("msgpack")
        return cls("auto", codec.fingerprints)


def encode_record(record: CodecRecord) -> bytes:
    """The stored bytes of ``record``."""
    m = {"v": CODEC_RECORD_VERSION, "codec": record.codec, "keys": list(record.keys)}
    packed: bytes = msgpack.packb(m, use_bin_type=True)
    return packed


def decode_record(data: bytes) -> CodecRecord:
    """`encode_record` reversed; `CorruptEngineRecord` if it is not one."""
    try:
        m = msgpack.unpackb(data, raw=False)
        if not isinstance(m, dict):
            raise ValueError(f"a {type(m).__name__}, not a map")
        version = m.get("v")
        if not isinstance(version, int) or version > CODEC_RECORD_VERSION:
            raise ValueError(
                f"format version {version!r}; this durable reads {CODEC_RECORD_VERSION}: "
                "upgrade durable"
            )
        codec, keys = m.get("codec"), m.get("keys", [])
        if codec not in ("auto", "msgpack"):
            raise ValueError(f"codec {codec!r} is not 'auto' or 'msgpack'")
        if not isinstance(keys, list) or not all(isinstance(k, str) for k in keys):
            raise ValueError("keys is not a list of fingerprints")
    except (ValueError, TypeError, msgpack.UnpackException) as e:
        raise CorruptEngineRecord(
            "the store's codec record", f"{e}; rewrite it with replace_codec_record=True"
        ) from None
    return CodecRecord(codec, tuple(keys))


def _listed(fingerprints: tuple[str, ...] | list[str]) -> str:
    return ", ".join(fingerprints) if fingerprints else "none"


def mismatch(record: CodecRecord, codec: Codec) -> str | None:
    """What ``codec`` lacks to read (and write) a store holding what ``record``
    says; None when it matches. Pure: no I/O."""
    if record.codec != codec.mode:
        if codec.mode == "msgpack":
            keys = " and its signing_key" if record.keys else ""
            return (
                "the store was created with codec='auto' and may hold pickles, which "
                f"codec='msgpack' never reads: open it with codec='auto'{keys}, {_CHANGE}"
            )
        return (
            "the store was created with codec='msgpack' (plain data only), and an Engine "
            "with codec='auto' would write pickles its other engines refuse: open it with "
            f"codec='msgpack', {_CHANGE}"
        )
    if record.codec == "msgpack":
        return None  # no pickle is ever stored: keys do not matter
    mine = codec.fingerprints
    if record.keys and not mine:
        return (
            "its pickles are signed (signing key fingerprint "
            f"{_listed(record.keys)}) and this Engine has no signing_key: pass the "
            f"store's signing_key, {_CHANGE}"
        )
    if mine and not record.keys:
        return (
            "its pickles are unsigned (it was created without a signing_key), and an "
            "Engine with a signing_key refuses unsigned pickles: open it without "
            f"signing_key, {_CHANGE} (once no run that holds a pickle is left)"
        )
    missing = [k for k in record.keys if k not in mine]
    if missing:
        return (
            "its pickles may be signed with a key this Engine lacks (fingerprint "
            f"{_listed(missing)}; this Engine's keys: {_listed(mine)}): pass that key "
            "too (signing_key=[new, old] signs with the new key and still verifies the "
            f"old one), {_CHANGE} (once no pickle signed with it is left)"
        )
    return None


def rotated(record: CodecRecord, codec: Codec) -> CodecRecord | None:
    """``record`` with ``codec``'s signing key added when a matching engine
    signs with a key the record does not hold yet (a rotation); None when
    the record stays as it is."""
    mine = codec.fingerprints
    if record.codec != "auto" or not mine or mine[0] in record.keys:
        return None
    return CodecRecord("auto", (*record.keys, mine[0]))


async def ensure_codec_record(
    kv: KvNamespace, codec: Codec, url: str, *, replace: bool = False
) -> None:
    """Check ``codec`` against the store's codec record, writing the record
    first if there is none (or if ``replace``), extending it on a rotation;
    every write is durable on return. `CodecMismatch` naming what is missing
    when ``codec`` cannot read the store's payloads. ``kv`` is the internal
    view of the store's KV namespace."""
    want = CodecRecord.of(codec)
    while True:
        raw = kv.get(CODEC_RECORD_KEY)
        if raw is None or replace:
            if raw is not None and raw == encode_record(want):
                return
            if await kv.compare_put(CODEC_RECORD_KEY, raw, encode_record(want)):
                event = "codec record replaced" if raw is not None else "codec record written"
                log.info(event, url=url, codec=want.codec, keys=list(want.keys))
                return
            continue  # changed under us: look again
        record = decode_record(raw)
        problem = mismatch(record, codec)
        if problem is not None:
            raise CodecMismatch(url, problem)
        grown = rotated(record, codec)
        if grown is None:
            return
        if await kv.compare_put(CODEC_RECORD_KEY, raw, encode_record(grown)):
            log.info("signing key added to the codec record", url=url, keys=list(grown.keys))
            return


async def check_codec_record(kv: KvNamespace, codec: Codec, url: str) -> None:
    """Check ``codec`` against the store's codec record without writing
    (a process that does not own the store): `CodecMismatch` naming what is
    missing; nothing to check while the store has no record yet (its owner
    writes one)."""
    raw = kv.get(CODEC_RECORD_KEY)
    if raw is None:
        return
    problem = mismatch(decode_record(raw), codec)
    if problem is not None:
        raise CodecMismatch(url, problem)
