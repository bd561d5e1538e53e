"""Done records: the owner's durable note that it applied an inbox request.

An owner applies a request and, in the same transaction, writes its done
record; only once that transaction is durable does it delete the request's
object. A request found again (the owner crashed between the commit and the
delete, or a retried create put the same bytes back) whose done record
exists is not applied again. Two KV entries under the reserved prefix:

- ``workflow/inbox-done/<object name>/<nonce hex>``: the `DoneRecord` (when,
  and the error if the request failed);
- ``workflow/inbox-done-at/`` + time + ``<object name>/<nonce hex>``: its
  `ExpiryIndex` entry.

The nonce tells apart two requests that used the same object name one
after the other (a run id submitted again). `DoneRecords.sweep` removes
records older than the retention (one hour by default), far longer than a
request can wait between its commit and its delete.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import msgpack

from durable.engine.runs import RESERVED_KV_PREFIX
from durable.errors import CorruptEngineRecord
from durable.store.expiry import Delete, ExpiryEntry, ExpiryIndex
from durable.store.kv import KvEffects, KvNamespace
from durable.store.log.batch import WriteBatch

__all__ = [
    "DONE_INDEX_PREFIX",
    "DONE_PREFIX",
    "DONE_RETENTION",
    "DoneRecord",
    "DoneRecords",
    "decode_done",
    "done_key",
    "encode_done",
]

#: Where done records live.
DONE_PREFIX = RESERVED_KV_PREFIX + b"inbox-done/"
#: The `ExpiryIndex` of the done records.
DONE_INDEX_PREFIX = RESERVED_KV_PREFIX + b"inbox-done-at/"
#: How long a done record is kept (seconds).
DONE_RETENTION = 3600.0
_VERSION = 1
#: Error texts are cut to this many characters.
_MAX_ERROR = 2000


def _suffix(name: str, nonce: bytes) -> bytes:
    return name.encode() + b"/" + nonce.hex().encode()


def done_key(name: str, nonce: bytes) -> bytes:
    """The KV key of the done record of request object ``name`` with ``nonce``."""
    return DONE_PREFIX + _suffix(name, nonce)


@dataclass(frozen=True, slots=True)
class DoneRecord:
    """A request was applied at ``at_ms`` (the owner's clock). ``error`` and
    ``error_type`` (the exception's class name, e.g. ``"InputMismatch"``)
    say why it failed; None when it took effect."""

    at_ms: int
    error: str | None = None
    error_type: str | None = None


def encode_done(record: DoneRecord) -> bytes:
    """The stored bytes of a done record."""
    m: dict[str, Any] = {"v": _VERSION, "at_ms": record.at_ms}
    if record.error is not None:
        m["error"] = record.error[:_MAX_ERROR]
    if record.error_type is not None:
        m["error_type"] = record.error_type
    return msgpack.packb(m, use_bin_type=True)


def decode_done(data: bytes, what: str = "inbox done record") -> DoneRecord:
    """Decode a done record; `CorruptEngineRecord` naming ``what`` if it is not one."""
    try:
        m = msgpack.unpackb(data, raw=False)
    except Exception as e:  # msgpack raises several unrelated types
        raise CorruptEngineRecord(what, f"not MessagePack ({type(e).__name__}: {e})") from e
    if not isinstance(m, dict):
        raise CorruptEngineRecord(what, f"expected a map, found {type(m).__name__}")
    version, at_ms = m.get("v"), m.get("at_ms")
    if isinstance(version, bool) or not isinstance(version, int) or version < 1:
        raise CorruptEngineRecord(what, f"no format version (field 'v' is {version!r:.80})")
    if version > _VERSION:
        raise CorruptEngineRecord(what, f"format version {version} is newer: upgrade durable")
    if isinstance(at_ms, bool) or not isinstance(at_ms, int) or not 0 <= at_ms < 2**64:
        raise CorruptEngineRecord(what, f"field 'at_ms' is {at_ms!r:.80}")
    error, error_type = m.get("error"), m.get("error_type")
    for field, value in (("error", error), ("error_type", error_type)):
        if value is not None and not isinstance(value, str):
            raise CorruptEngineRecord(what, f"field {field!r} is {value!r:.80}")
    return DoneRecord(at_ms, error, error_type)


class DoneRecords:
    """The done records of one store, read and written through ``kv`` (the
    store's writable KV namespace); see the module docstring."""

    __slots__ = ("_index", "_kv")

    def __init__(self, kv: KvNamespace) -> None:
        self._kv = kv.internal()
        self._index = ExpiryIndex(self._kv, DONE_INDEX_PREFIX)

    def get(self, name: str, nonce: bytes) -> DoneRecord | None:
        """The done record of request ``name`` with ``nonce`` (None: not applied)."""
        raw = self._kv.get(done_key(name, nonce))
        if raw is None:
            return None
        try:
            return decode_done(raw, f"done record of inbox request {name!r}")
        except CorruptEngineRecord:
            return DoneRecord(0, "unreadable done record")  # applied all the same

    def writes(
        self, name: str, nonce: bytes, at_ms: int, error: BaseException | None = None
    ) -> dict[bytes, bytes]:
        """The KV puts that record request ``name`` as applied at ``at_ms``
        (failed with ``error``): commit them in the transaction that applies
        it, with nothing awaited between this call and that commit's staging
        but the operation's own steps (the index entry's key lowers the
        sweep's bound)."""
        record = DoneRecord(
            at_ms,
            None if error is None else str(error),
            None if error is None else type(error).__name__,
        )
        return {
            done_key(name, nonce): encode_done(record),
            self._index.entry_key(at_ms, _suffix(name, nonce)): b"",
        }

    async def commit(self, writes: dict[bytes, bytes]) -> None:
        """Commit ``writes`` (from `writes`) alone; durable when this returns."""
        effects = KvEffects()
        for key, value in writes.items():
            effects.put(key, value)
        await self._kv.commit(self._kv.stage_effects(WriteBatch(), effects))

    async def sweep(self, now_ms: int, retention: float = DONE_RETENTION) -> int:
        """Remove the done records older than ``retention`` seconds; how many.
        Reads nothing while none is due."""

        def expire(entry: ExpiryEntry) -> Delete:
            return Delete(KvEffects().delete(DONE_PREFIX + entry.suffix))

        return await self._index.sweep(now_ms, retention, expire)
