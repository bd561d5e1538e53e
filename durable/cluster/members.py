"""Members: the heartbeat object of every worker process, and liveness.

Every worker-role process is a *member* of its store, with an id that is a
ULID (so ids sort by start time). It rewrites its object
``cluster/members/<member_id>`` (a plain put) every heartbeat: a MessagePack
map ``{"v", "counter", "nonce", "role", "released", "locked_on"}``. The
counter and a fresh random nonce make every put's bytes differ from the
last, so an observer sees each one as a change.

`Liveness` judges members by what one observer saw, on the observer's own
clock: no clock of another machine is ever compared with it. A member is
*alive* while its object's bytes change within ``ttl`` of the observer's
clock; a newly seen object proves nothing (*unknown*) until it changes, and
is *dead* once unchanged for ``ttl`` since first seen; a released member
(``released: true``) or one whose object was deleted is *gone* at once.
Statuses are those of the latest observation of each member, so a decision
made from them is only as fresh as the reads it made: an observer that was
paused reads again before it judges.
"""

from __future__ import annotations

import enum
import os
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import msgpack

from durable.errors import CorruptObject, UnsupportedFormat

__all__ = [
    "MEMBERS_PREFIX",
    "MEMBER_FORMAT",
    "Liveness",
    "MemberRecord",
    "Role",
    "Status",
    "decode_member",
    "encode_member",
    "member_id_of",
    "member_name",
]

#: Where the member objects live, below the store's root.
MEMBERS_PREFIX = "cluster/members/"
#: The format version of member objects this code writes and reads.
MEMBER_FORMAT = 1
_NONCE_BYTES = 16


def member_name(member_id: str) -> str:
    """The object name of member ``member_id``."""
    return MEMBERS_PREFIX + member_id


def member_id_of(name: str) -> str | None:
    """The member id of object ``name``, or None if it is no member object."""
    if not name.startswith(MEMBERS_PREFIX):
        return None
    rest = name[len(MEMBERS_PREFIX) :]
    return rest if rest and "/" not in rest else None


class Role(enum.Enum):
    """What a member does: own the store, or wait to take it over."""

    OWNER = "owner"
    STANDBY = "standby"


@dataclass(frozen=True, slots=True)
class MemberRecord:
    """One heartbeat of a member.

    ``locked_on`` names the host on which the member holds the store's
    local owner lock (`durable.cluster.owner.OWNER_LOCK`), None when it
    holds none: a standby on that host that gets the lock then knows at
    once that this member let it go (it released or died).
    """

    counter: int
    role: Role
    released: bool = False
    locked_on: str | None = None
    nonce: bytes = b""


def encode_member(record: MemberRecord) -> bytes:
    """The stored bytes of ``record``, with a fresh nonce if it has none."""
    m: dict[str, Any] = {
        "v": MEMBER_FORMAT,
        "counter": record.counter,
        "nonce": record.nonce or os.urandom(_NONCE_BYTES),
        "role": record.role.value,
        "released": record.released,
    }
    if record.locked_on is not None:
        m["locked_on"] = record.locked_on
    return msgpack.packb(m, use_bin_type=True)


def decode_member(name: str, data: bytes) -> MemberRecord:
    """Decode member object ``name``; `CorruptObject` or `UnsupportedFormat` if unusable."""
    try:
        m = msgpack.unpackb(data, raw=False)
    except Exception as e:  # msgpack raises several unrelated types
        raise CorruptObject(name, f"not a member object (not MessagePack: {e})") from e
    if not isinstance(m, dict):
        raise CorruptObject(name, f"not a member object (a {type(m).__name__}, not a map)")
    version = m.get("v")
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise CorruptObject(name, f"not a member object (format version {version!r})")
    if version > MEMBER_FORMAT:
        raise UnsupportedFormat(name, version, MEMBER_FORMAT)
    counter, nonce, role = m.get("counter"), m.get("nonce"), m.get("role")
    released, locked_on = m.get("released", False), m.get("locked_on")
    if not isinstance(counter, int) or isinstance(counter, bool) or counter < 0:
        raise CorruptObject(name, f"bad member object: counter {counter!r}")
    if not isinstance(nonce, bytes):
        raise CorruptObject(name, f"bad member object: nonce {nonce!r}")
    if role not in ("owner", "standby"):
        raise CorruptObject(name, f"bad member object: role {role!r}")
    if not isinstance(released, bool):
        raise CorruptObject(name, f"bad member object: released {released!r}")
    if locked_on is not None and not isinstance(locked_on, str):
        raise CorruptObject(name, f"bad member object: locked_on {locked_on!r}")
    return MemberRecord(counter, Role(role), released, locked_on, nonce)


class Status(enum.Enum):
    """What an observer knows of a member (see `Liveness`)."""

    #: Seen, but not seen change yet, for less than the ttl (or never seen).
    UNKNOWN = "unknown"
    #: Its object changed within the ttl.
    ALIVE = "alive"
    #: Its object did not change for the ttl (or never appeared within it).
    DEAD = "dead"
    #: It released its membership, or its object was deleted.
    GONE = "gone"


@dataclass(slots=True)
class _Seen:
    data: bytes | None  # the latest bytes seen, None when absent
    record: MemberRecord | None  # decoded from ``data``, None if absent or undecodable
    first_ms: int  # the first observation
    changed_ms: int | None  # the latest observation that saw the bytes change
    observed_ms: int  # the latest observation
    had_data: bool  # an object was seen once


class Liveness:
    """The liveness of members as one observer saw them (pure: no I/O).

    Feed it every read of a member object with `observe` (``data=None``
    for a read that found no object), stamped with the observer's clock
    when the read returned. ``ttl_ms`` is the time without change after
    which a member is dead.
    """

    def __init__(self, ttl_ms: int) -> None:
        if ttl_ms <= 0:
            raise ValueError(f"Liveness needs a ttl > 0 ms, got {ttl_ms}")
        self.ttl_ms = ttl_ms
        self._seen: dict[str, _Seen] = {}
        #: Members whose latest bytes did not decode (their liveness still counts).
        self.undecodable: set[str] = set()

    def observe(self, member_id: str, data: bytes | None, now_ms: int) -> Status:
        """Record that a read at ``now_ms`` found ``data`` (None: no object)."""
        seen = self._seen.get(member_id)
        record = self._decode(member_id, data)
        if seen is None:
            self._seen[member_id] = _Seen(data, record, now_ms, None, now_ms, data is not None)
        else:
            if data != seen.data:
                seen.changed_ms = now_ms
            seen.data, seen.record = data, record
            seen.observed_ms = max(seen.observed_ms, now_ms)
            seen.had_data = seen.had_data or data is not None
        return self.status(member_id)

    def status(self, member_id: str) -> Status:
        """The member's status as of its latest observation."""
        seen = self._seen.get(member_id)
        if seen is None:
            return Status.UNKNOWN
        if (seen.record is not None and seen.record.released) or (
            seen.data is None and seen.had_data
        ):
            return Status.GONE
        since = seen.changed_ms if seen.changed_ms is not None else seen.first_ms
        if seen.observed_ms - since >= self.ttl_ms:
            return Status.DEAD
        return Status.UNKNOWN if seen.changed_ms is None else Status.ALIVE

    def record(self, member_id: str) -> MemberRecord | None:
        """The member's latest decodable record, or None."""
        seen = self._seen.get(member_id)
        return None if seen is None else seen.record

    def known(self) -> list[str]:
        """Every member observed (and not forgotten), in id order."""
        return sorted(self._seen)

    def forget(self, members: Iterable[str]) -> None:
        """Stop tracking ``members`` (their objects were deleted)."""
        for member_id in members:
            self._seen.pop(member_id, None)
            self.undecodable.discard(member_id)

    def _decode(self, member_id: str, data: bytes | None) -> MemberRecord | None:
        if data is None:
            self.undecodable.discard(member_id)
            return None
        try:
            record = decode_member(member_name(member_id), data)
        except (CorruptObject, UnsupportedFormat):
            self.undecodable.add(member_id)
            return None
        self.undecodable.discard(member_id)
        return record
