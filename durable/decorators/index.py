"""The run index: every workflow run of a store, newest first, in its memory.

``engine.runs(...)`` (`durable.decorators.listing`) pages through it; it is
never a scan of the run records and never an object read. Two KV keys per
run, under the engine's reserved prefix::

    workflow/run-index/t/{2**64-1 - started_ms: 8 bytes big-endian}{run_id}
        -> {"v": 1, "workflow": name, "started": ms, "queue": name (unless
            the default), "attrs": {str: str}, "seq": n, "steps": n (once archived),
            "ver": the workflow's version (`durable.decorators.versions`),
            "inc": its incarnation, once it continued as new
            (`durable.decorators.continuation`)}
    workflow/run-index/r/{run_id} -> started_ms, 8 bytes big-endian

The first (the *order key*) sorts newest first, ties by run id; the second
finds it from a run id. Both are written by the transaction that submits
the run (`index_records`, through `durable.decorators.submit.submit_run`),
so a run is listed exactly when it exists; nothing is written when a run
ends: its state, end time and error are read from its terminal record. The
few writes that change an entry ride commits that happen anyway: a
``durable.set_attributes`` (one KV write in the run's group commit, like
``durable.publish``) and the archive of a large terminated run (its journal
count, in the commit that moves the journal out). Retention
(``Engine(retention=)``) and ``engine.forget`` delete both keys with the
run's other records.

Cost per run: no object write; about 60 bytes plus twice the run id, the
workflow name and the attributes, in the submit's log object and in the
store's memory (and its checkpoints) for as long as the run is kept.

Runs started by a durable older than the index have no entry: they are not
listed (they still answer ``handle.status()``); see docs/operating.md.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

import msgpack

from durable.engine.runs import RESERVED_KV_PREFIX
from durable.errors import CorruptEngineRecord

if TYPE_CHECKING:
    from durable.store.kv import KvNamespace

__all__ = [
    "INDEX_PREFIX",
    "ORDER_PREFIX",
    "IndexEntry",
    "by_id_key",
    "decode_entry",
    "encode_entry",
    "find_entry",
    "index_keys",
    "index_records",
    "order_key",
    "order_suffix",
]

#: Every key of the run index is under this prefix.
INDEX_PREFIX = RESERVED_KV_PREFIX + b"run-index/"
#: The order keys: newest run first.
ORDER_PREFIX = INDEX_PREFIX + b"t/"
_BY_ID_PREFIX = INDEX_PREFIX + b"r/"
_U64_MAX = 2**64 - 1
_VERSION = 1


def order_suffix(started_ms: int, run_id: str) -> bytes:
    """The part of an order key after `ORDER_PREFIX`: sorts newest first."""
    return (_U64_MAX - started_ms).to_bytes(8, "big") + run_id.encode()


def order_key(started_ms: int, run_id: str) -> bytes:
    """The order key of a run started at ``started_ms`` (epoch ms)."""
    return ORDER_PREFIX + order_suffix(started_ms, run_id)


def by_id_key(run_id: str) -> bytes:
    """The key that finds run ``run_id``'s order key."""
    return _BY_ID_PREFIX + run_id.encode()


def run_id_of(key: bytes) -> str:
    """The run id of an order key."""
    return key[len(ORDER_PREFIX) + 8 :].decode()


@dataclass(frozen=True, slots=True)
class IndexEntry:
    """What the index holds of one run."""

    run_id: str
    workflow: str
    started_ms: int
    attributes: Mapping[str, str] = field(default_factory=dict)
    #: How many ``set_attributes`` of the run have been applied (replays skip).
    seq: int = 0
    #: The journal's positions, kept once the run's journal was archived.
    steps: int | None = None
    #: The workflow's queue (None: the default, ``"workflows"``).
    queue: str | None = None
    #: The workflow's version in the code that started the run (None: not recorded).
    version: str | None = None
    #: How many times the run continued as new (``durable.continue_as_new``):
    #: rewritten by the settlement that starts each new incarnation.
    incarnation: int = 0

    def replace(self, **changes: Any) -> IndexEntry:
        """A copy with ``changes``."""
        return replace(self, **changes)


def encode_entry(entry: IndexEntry) -> bytes:
    """The stored value of an order key."""
    m: dict[str, Any] = {"v": _VERSION, "workflow": entry.workflow, "started": entry.started_ms}
    if entry.attributes:
        m["attrs"] = dict(entry.attributes)
    if entry.seq:
        m["seq"] = entry.seq
    if entry.steps is not None:
        m["steps"] = entry.steps
    if entry.queue is not None:
        m["queue"] = entry.queue
    if entry.version is not None:
        m["ver"] = entry.version
    if entry.incarnation:
        m["inc"] = entry.incarnation
    packed: bytes = msgpack.packb(m, use_bin_type=True)
    return packed


def decode_entry(run_id: str, data: bytes) -> IndexEntry:
    """The `IndexEntry` of run ``run_id`` stored as ``data``."""
    try:
        m = msgpack.unpackb(data, raw=False)
        if not isinstance(m, dict) or not isinstance(m.get("v"), int) or m["v"] > _VERSION:
            raise ValueError(f"not an index entry of a known version: {m!r:.80}")
        workflow, started = m["workflow"], m["started"]
        attrs = m.get("attrs") or {}
        seq, steps, queue, version = m.get("seq", 0), m.get("steps"), m.get("queue"), m.get("ver")
        if not isinstance(workflow, str) or not isinstance(started, int):
            raise ValueError("bad workflow name or start time")
        if not isinstance(attrs, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in attrs.items()
        ):
            raise ValueError("attributes must map str to str")
        if not isinstance(seq, int) or not (steps is None or isinstance(steps, int)):
            raise ValueError("bad seq or steps")
        if not (queue is None or isinstance(queue, str)):
            raise ValueError("bad queue")
        if not (version is None or isinstance(version, str)):
            raise ValueError("bad version")
        incarnation = m.get("inc", 0)
        if not isinstance(incarnation, int) or isinstance(incarnation, bool) or incarnation < 0:
            raise ValueError("bad incarnation")
    except (ValueError, TypeError, KeyError, msgpack.UnpackException) as e:
        raise CorruptEngineRecord(
            f"the run index entry of run {run_id!r}", str(e) or type(e).__name__
        ) from None
    return IndexEntry(run_id, workflow, started, attrs, seq, steps, queue, version, incarnation)


def index_records(entry: IndexEntry) -> dict[bytes, bytes]:
    """The KV writes that index a new run (to commit with its submission)."""
    return {
        order_key(entry.started_ms, entry.run_id): encode_entry(entry),
        by_id_key(entry.run_id): entry.started_ms.to_bytes(8, "big"),
    }


def find_entry(kv: KvNamespace, run_id: str) -> tuple[bytes, bytes] | None:
    """Run ``run_id``'s order key and stored entry (read at once); None if
    the run is not indexed."""
    started = kv.get(by_id_key(run_id))
    if started is None:
        return None
    key = order_key(int.from_bytes(started, "big"), run_id)
    data = kv.get(key)
    return None if data is None else (key, data)


def index_keys(kv: KvNamespace, run_id: str) -> list[bytes]:
    """The index keys run ``run_id`` has in ``kv`` (none, or both)."""
    started = kv.get(by_id_key(run_id))
    if started is None:
        return []
    return [by_id_key(run_id), order_key(int.from_bytes(started, "big"), run_id)]
