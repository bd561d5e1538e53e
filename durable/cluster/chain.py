"""The owner chain: who owns the store, as create-if-absent versions.

Version ``v`` is the object ``cluster/owner/<v:020d>``, a MessagePack map
``{"v": format, "version": v, "owner": member_id | None, "reason"}``,
written with create-if-absent (the log's own primitive, atomic on every
backend). The owner is the member the newest version names; None after a
release. To change the owner, create version ``head + 1``: of two members
that try at once, exactly one succeeds, and the loser re-reads and decides
again. Versions are never deleted (one small object per change of owner):
a reader that was away for long still finds every version after the one it
knows, so its create can never land below the true head.

The chain only says who *should* own the store. Safety rests on the log:
the new owner's `LogWriter.open` writes an open marker that fences every
older writer, whatever the chain says.

`OwnerChain` reads it cheaply: one LIST when it starts, then one GET of
``head + 1`` per poll (a 404 while nothing changes).

The mechanics are not the owner's alone: `VersionChain` is any chain of
create-if-absent versions below a prefix, given a `ChainFormat` (how a
version is encoded, decoded, and read when it cannot be).
`OwnerChain` is one; the assignment table of a pool of workers
(`durable.cluster.assignment.AssignmentChain`) is another.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

import msgpack

from durable._logging import get_logger
from durable.errors import CorruptObject, ObjectExists, ObjectNotFound, UnsupportedFormat
from durable.store.objects.base import ObjectStore

__all__ = [
    "CHAIN_FORMAT",
    "CHAIN_PREFIX",
    "OWNER_CHAIN",
    "ChainFormat",
    "ChainVersion",
    "OwnerChain",
    "Reason",
    "VersionChain",
    "Versioned",
    "chain_name",
    "chain_version",
    "decode_version",
    "encode_version",
    "version_name",
]

log = get_logger("durable.cluster")

#: Where the chain's versions live, below the store's root.
CHAIN_PREFIX = "cluster/owner/"
#: The format version of chain objects this code writes and reads.
CHAIN_FORMAT = 1


def version_name(version: int) -> str:
    """The object name of chain version ``version`` (>= 1)."""
    return chain_name(CHAIN_PREFIX, version)


def chain_name(prefix: str, version: int) -> str:
    """The object name of version ``version`` of the chain below ``prefix``."""
    return f"{prefix}{version:020d}"


def chain_version(prefix: str, name: str) -> int | None:
    """The version object ``name`` holds in the chain below ``prefix``, or None."""
    rest = name[len(prefix) :] if name.startswith(prefix) else ""
    return int(rest) if len(rest) == 20 and rest.isdigit() else None


def _version_of(name: str) -> int | None:
    return chain_version(CHAIN_PREFIX, name)


class Reason(enum.Enum):
    """Why a chain version was written."""

    #: The first owner of a store (the chain was empty).
    START = "start"
    #: The named owner was dead, gone or superseded (or ``takeover=True``).
    TAKEOVER = "takeover"
    #: The owner let go (``owner`` is None).
    RELEASE = "release"
    #: A standby took a released store.
    HANDOVER = "handover"


@dataclass(frozen=True, slots=True)
class ChainVersion:
    """One version of the chain: ``owner`` (a member id, None once released)."""

    version: int
    owner: str | None
    reason: Reason


def encode_version(entry: ChainVersion) -> bytes:
    """The stored bytes of ``entry``."""
    m: dict[str, Any] = {
        "v": CHAIN_FORMAT,
        "version": entry.version,
        "owner": entry.owner,
        "reason": entry.reason.value,
    }
    return msgpack.packb(m, use_bin_type=True)


def decode_version(name: str, data: bytes) -> ChainVersion:
    """Decode chain object ``name``; `CorruptObject` or `UnsupportedFormat` if unusable."""
    try:
        m = msgpack.unpackb(data, raw=False)
    except Exception as e:  # msgpack raises several unrelated types
        raise CorruptObject(name, f"not an owner-chain version (not MessagePack: {e})") from e
    if not isinstance(m, dict):
        raise CorruptObject(name, f"not an owner-chain version (a {type(m).__name__})")
    fmt = m.get("v")
    if not isinstance(fmt, int) or isinstance(fmt, bool) or fmt < 1:
        raise CorruptObject(name, f"not an owner-chain version (format version {fmt!r})")
    if fmt > CHAIN_FORMAT:
        raise UnsupportedFormat(name, fmt, CHAIN_FORMAT)
    version, owner, reason = m.get("version"), m.get("owner"), m.get("reason")
    expected = _version_of(name)
    if expected is None or not isinstance(version, int) or isinstance(version, bool):
        raise CorruptObject(name, f"bad owner-chain version: version {version!r}")
    if version != expected:
        raise CorruptObject(name, f"bad owner-chain version: it says version {version}")
    if owner is not None and not isinstance(owner, str):
        raise CorruptObject(name, f"bad owner-chain version: owner {owner!r}")
    try:
        why = Reason(reason)
    except ValueError:
        raise CorruptObject(name, f"bad owner-chain version: reason {reason!r}") from None
    return ChainVersion(version, owner, why)


def _unreadable(name: str, version: int, error: Exception) -> ChainVersion:
    """A version that cannot be read counts as a release: someone acquires (and
    the log's open marker keeps that safe)."""
    log.error("owner-chain version unreadable, read as a release", key=name, error=str(error))
    return ChainVersion(version, None, Reason.RELEASE)


class Versioned(Protocol):
    """A chain version: it knows its number."""

    @property
    def version(self) -> int:
        """The version number (>= 1)."""
        ...


V = TypeVar("V", bound=Versioned)


@dataclass(frozen=True, slots=True)
class ChainFormat(Generic[V]):
    """How the versions of one chain are named and stored.

    Version ``v`` is the object ``<prefix><v:020d>``. ``decode(name, data)``
    raises `CorruptObject` or `UnsupportedFormat` for bytes it cannot use;
    such a version then reads as ``unreadable(name, version, error)`` (a
    version must read as *something*: the chain cannot skip a number).
    """

    prefix: str
    encode: Callable[[V], bytes]
    decode: Callable[[str, bytes], V]
    unreadable: Callable[[str, int, Exception], V]

    def name(self, version: int) -> str:
        """The object name of version ``version``."""
        return chain_name(self.prefix, version)

    def version_of(self, name: str) -> int | None:
        """The version an object ``name`` holds, or None if it is none of this chain's."""
        return chain_version(self.prefix, name)


class VersionChain(Generic[V]):
    """A reader and writer of a chain of create-if-absent versions on ``objects``.

    `head` is the newest version this reader has seen (None: none yet).
    Versions are never deleted, so a reader that was away finds every
    version after its head, and `create` can never land below the true
    head. Errors of the store (`ObjectStoreError`) propagate; the caller
    retries later.
    """

    def __init__(self, objects: ObjectStore, fmt: ChainFormat[V]) -> None:
        self.objects = objects
        self.format = fmt
        self.head: V | None = None

    async def load(self) -> V | None:
        """LIST the chain and read its newest version (then `poll` from there)."""
        listed = map(self.format.version_of, await self.objects.list(self.format.prefix))
        for version in sorted((v for v in listed if v is not None), reverse=True):
            entry = await self._get(version)
            if entry is not None:
                self._advance(entry)
                break
        return await self.poll()

    async def poll(self) -> V | None:
        """Read every version after `head` (one GET that finds nothing, when
        nothing changed); the new head."""
        while True:
            entry = await self._get(self.next_version())
            if entry is None:
                return self.head
            self._advance(entry)

    def next_version(self) -> int:
        """The number the next version gets: ``head + 1`` (1 on an empty chain)."""
        return 1 if self.head is None else self.head.version + 1

    async def create(self, entry: V) -> bool:
        """Create ``entry``, numbered `next_version`: True if this call wrote
        it, False if another writer got there first (`head` is then re-read)."""
        if entry.version != self.next_version():
            raise ValueError(
                f"chain {self.format.prefix!r}: version {entry.version} is not the next "
                f"version, {self.next_version()}"
            )
        try:
            await self.objects.create(self.format.name(entry.version), self.format.encode(entry))
        except ObjectExists:
            await self.poll()
            return False
        self._advance(entry)
        return True

    def _advance(self, entry: V) -> None:
        if self.head is None or entry.version > self.head.version:
            self.head = entry

    async def _get(self, version: int) -> V | None:
        name = self.format.name(version)
        try:
            data = await self.objects.get(name)
        except ObjectNotFound:
            return None
        try:
            return self.format.decode(name, data)
        except (CorruptObject, UnsupportedFormat) as e:
            return self.format.unreadable(name, version, e)


#: The owner chain's format: an unreadable version reads as a release.
OWNER_CHAIN: ChainFormat[ChainVersion] = ChainFormat(
    CHAIN_PREFIX, encode_version, decode_version, _unreadable
)


class OwnerChain(VersionChain[ChainVersion]):
    """A reader and writer of the owner chain on ``objects``.

    `head` is the newest version this reader has seen (None: none yet).
    Errors of the store (`ObjectStoreError`) propagate; the caller retries
    at its next heartbeat.
    """

    def __init__(self, objects: ObjectStore) -> None:
        super().__init__(objects, OWNER_CHAIN)

    async def append(self, owner: str | None, reason: Reason) -> bool:
        """Create version ``head + 1`` naming ``owner``: True if this call wrote
        it, False if another writer got there first (`head` is then re-read)."""
        return await self.create(ChainVersion(self.next_version(), owner, reason))
