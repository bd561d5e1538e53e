"""The partition manifest: how many partitions a store has, and how runs are routed.

A store created with ``partitions=P`` is P ordinary stores under one URL,
below ``p000/`` ... ``p<P-1>/`` (`partition_prefix`; each opened through a
`durable.store.objects.PrefixedObjectStore`). P is recorded once, when the
store is created, in the object ``cluster.json`` at the store's root::

    {
      "hash": "sha256-u64/v1",
      "partitions": 16,
      "v": 1
    }

JSON rather than MessagePack on purpose: operators read it. ``v`` is the
format version, ``hash`` names the routing function. A run lives in
partition `partition_of` of its id: the first 8 bytes of the SHA-256 of the
UTF-8 id, as a big-endian integer, modulo P. The function is pinned by test
vectors, since changing it would strand every run already stored (Python's
`hash` is salted per process and never used). P cannot change after
creation for the same reason: `open_manifest` refuses another P
(`PartitionMismatch`, naming both).

A store without ``cluster.json`` and without ``p000/`` objects is
unpartitioned (every store made before partitions existed, and every one
opened without ``partitions=``): its layout is one store at the root.

Each owned partition is a log writer and an inbox poll, so P is at most
`MAX_PARTITIONS` (1000, the names ``p000``..``p999``).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any

from durable.errors import (
    CorruptObject,
    InvalidArgument,
    ObjectNotFound,
    PartitionMismatch,
    UnsupportedFormat,
)
from durable.store.log.format import LOG_PREFIX
from durable.store.log.retry import DEFAULT_RETRY_SECONDS, create_retrying, retry_transient
from durable.store.objects.base import ObjectStore

__all__ = [
    "HASH",
    "MANIFEST",
    "MANIFEST_FORMAT",
    "MAX_PARTITIONS",
    "Manifest",
    "check_partitions",
    "co_located_id",
    "decode_manifest",
    "encode_manifest",
    "open_manifest",
    "partition_of",
    "partition_prefix",
]

#: The manifest's object name, at the store's root.
MANIFEST = "cluster.json"
#: The routing function `partition_of` implements, as the manifest names it.
HASH = "sha256-u64/v1"
#: The format version of manifests this code writes and reads.
MANIFEST_FORMAT = 1
#: The largest partition count: each owned partition is a log writer and an
#: inbox poll, and the partitions are named ``p000``..``p999``.
MAX_PARTITIONS = 1000


def partition_of(run_id: str, partitions: int) -> int:
    """The partition (0 .. ``partitions - 1``) that holds run ``run_id``.

    The first 8 bytes of the SHA-256 of the UTF-8 id, big-endian, modulo
    ``partitions``: the same in every process and on every machine.
    ``partitions`` is a checked count (`check_partitions`, a `Manifest`).
    """
    return int.from_bytes(hashlib.sha256(run_id.encode()).digest()[:8], "big") % partitions


def co_located_id(base: str, partition: int, partitions: int, *, max_len: int = 128) -> str:
    """A run id derived from ``base`` that `partition_of` puts in ``partition``.

    For ids the engine mints for another run's sake (a child workflow, a
    fork), so that they live in the partition of the run they belong to and
    the two stay one local transaction apart. ``base`` itself when it routes
    there already (always with one partition); else ``base`` with the
    smallest suffix ``-p<k>`` (k = 1, 2, ...) that routes there: about
    ``partitions`` SHA-256 computations, deterministic everywhere. A
    ``base`` too long for a suffix within ``max_len`` is first shortened to
    ``"h-"`` and 60 hex digits of its SHA-256.
    """
    if partition_of(base, partitions) == partition:
        return base
    if len(base) + 2 + len(str(partitions * 64)) > max_len:
        base = "h-" + hashlib.sha256(base.encode()).hexdigest()[:60]
    k = 1
    while partition_of(f"{base}-p{k}", partitions) != partition:
        k += 1
    return f"{base}-p{k}"


def partition_prefix(partition: int) -> str:
    """Where partition ``partition``'s store lives below the root: ``"p003/"``."""
    return f"p{partition:03d}/"


def check_partitions(value: object) -> int:
    """``value`` as a partition count: an int (not a bool) from 1 to `MAX_PARTITIONS`.

    `InvalidArgument` naming the value and the range otherwise.
    """
    if isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= MAX_PARTITIONS:
        return value
    raise InvalidArgument(
        f"partitions={value!r} is not a partition count: give an int from 1 to "
        f"{MAX_PARTITIONS} (each partition is a log writer and an inbox poll; the count is "
        "fixed when the store is created)"
    )


@dataclass(frozen=True, slots=True)
class Manifest:
    """A partitioned store's manifest: its partition count and routing function."""

    partitions: int
    hash: str = HASH


def encode_manifest(manifest: Manifest) -> bytes:
    """The stored bytes of ``manifest``: indented JSON, sorted keys, UTF-8."""
    m = {"v": MANIFEST_FORMAT, "partitions": manifest.partitions, "hash": manifest.hash}
    return (json.dumps(m, sort_keys=True, indent=2) + "\n").encode()


def decode_manifest(name: str, data: bytes) -> Manifest:
    """Decode manifest object ``name``; `CorruptObject` or `UnsupportedFormat` if unusable."""
    try:
        m: Any = json.loads(data.decode())
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise CorruptObject(name, f"not a partition manifest (not UTF-8 JSON: {e})") from e
    if not isinstance(m, dict):
        raise CorruptObject(name, f"not a partition manifest (a JSON {type(m).__name__})")
    fmt = m.get("v")
    if not isinstance(fmt, int) or isinstance(fmt, bool) or fmt < 1:
        raise CorruptObject(name, f"not a partition manifest (format version {fmt!r})")
    if fmt > MANIFEST_FORMAT:
        raise UnsupportedFormat(name, fmt, MANIFEST_FORMAT)
    partitions, routing = m.get("partitions"), m.get("hash")
    if (
        not isinstance(partitions, int)
        or isinstance(partitions, bool)
        or not 1 <= partitions <= MAX_PARTITIONS
    ):
        raise CorruptObject(
            name, f"bad partition manifest: partitions {partitions!r} (1 to {MAX_PARTITIONS})"
        )
    if not isinstance(routing, str):
        raise CorruptObject(name, f"bad partition manifest: hash {routing!r}")
    if routing != HASH:
        raise UnsupportedFormat(name, fmt, MANIFEST_FORMAT, f"the routing hash {routing!r}")
    return Manifest(partitions, routing)


async def open_manifest(
    objects: ObjectStore,
    partitions: int | None,
    retry_seconds: float = DEFAULT_RETRY_SECONDS,
) -> Manifest | None:
    """The manifest of the store ``objects``; None for an unpartitioned store.

    With ``partitions`` (checked by `check_partitions`): the store's
    manifest, created with that count if the store is new (create-if-absent:
    of several processes creating it at once, one count wins); an existing
    one with another count, or an unpartitioned store that already holds a
    log, raises `PartitionMismatch`. Without: the stored manifest, or None
    when there is none (an unpartitioned or a new store).

    A manifest that cannot be decoded, or none while partition stores exist,
    raises `CorruptObject` naming it. Nothing is written on any error path.
    Costs one GET once the store exists; creating it adds two LISTs and a
    create. Transient store errors are retried for ``retry_seconds``.
    """
    requested = None if partitions is None else check_partitions(partitions)
    stored = await _read(objects, retry_seconds)
    if stored is None:
        if await _exists(objects, partition_prefix(0), retry_seconds):
            raise CorruptObject(
                MANIFEST,
                f"missing while partition stores exist (objects below "
                f"{partition_prefix(0)!r} of {objects.url!r}); it holds the partition count "
                "every run id is routed by, and is not recreated with a guessed one",
            )
        if requested is None:
            return None
        if await _exists(objects, LOG_PREFIX, retry_seconds):
            raise PartitionMismatch(objects.url, 1, requested, unpartitioned=True)
        mine = Manifest(requested)
        data = encode_manifest(mine)
        theirs = await create_retrying(objects, MANIFEST, data, retry_seconds)
        if theirs is None:
            return mine
        stored = decode_manifest(MANIFEST, theirs)
    if requested is not None and stored.partitions != requested:
        raise PartitionMismatch(objects.url, stored.partitions, requested)
    return stored


async def _read(objects: ObjectStore, retry_seconds: float) -> Manifest | None:
    try:
        data = await retry_transient(lambda: objects.get(MANIFEST), MANIFEST, retry_seconds)
    except ObjectNotFound:
        return None
    return decode_manifest(MANIFEST, data)


async def _exists(objects: ObjectStore, prefix: str, retry_seconds: float) -> bool:
    return bool(await retry_transient(lambda: objects.list(prefix), prefix, retry_seconds))
