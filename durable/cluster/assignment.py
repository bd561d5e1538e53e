"""The assignment table: which member of a pool owns which partition.

A partitioned store's P partitions are shared by the pool's members (worker
processes that heartbeat, `durable.cluster.members`). Who owns what is a
`Table`, one `Slot` per partition: its ``owner`` (a member id, None while
nobody does), its ``epoch`` (raised by one whenever the owner changes; the
log's open marker, not the epoch, is what fences a former owner, the epoch
says which assignment is newer), and ``next`` (the member the owner is to
hand the partition to once it drained, None if none).

The table is stored as a chain of create-if-absent versions,
``cluster/assignment/<v:020d>`` (`AssignmentChain`, a
`durable.cluster.chain.VersionChain`): a change is the create of version
``head + 1``; of two members that write at once exactly one succeeds and
the other re-reads and decides again. Races on it can only cost liveness.

The rules are pure functions of what a member read (the newest table and
the members' statuses by `durable.cluster.members.Liveness`), so the
simulations drive them directly:

- `plan`, written only by the *coordinator*, the member with the lowest id
  among those that may be alive (alive, or unknown: seen but not yet seen
  to change). A partition whose owner is dead, gone or None goes at once,
  at epoch + 1, to its ``next`` if that member is alive, else to the
  least-loaded live member. A ``next`` that is dead or gone is cleared.
  Then, once every owner and ``next`` is alive, the load is balanced: while
  the most-loaded live member holds two more partitions than the
  least-loaded (counting a partition for its ``next`` when it has one), one
  of its partitions gets ``next`` = the least-loaded member (or a pending
  move is cancelled or redirected). With P not divisible by N, any
  assignment within one is balanced: moves are sticky, and who holds the
  extra partitions never changes for its own sake.
- `handover`, written by an owner that drained partitions whose ``next``
  is set: each goes to its ``next`` at epoch + 1.
- `release`, written by a member that leaves gracefully, once it drained
  everything: each partition it owns goes at epoch + 1 to its ``next`` if
  alive, else to the least-loaded other live member (None if there is no
  other: the next coordinator assigns it), and moves towards it are
  cancelled. It then puts its member object with ``released: true``.

A member owns a partition while the newest table it read names it the
owner, and it stops writing a partition the moment a newer table names
someone else (or its ``next`` is set and it drained). Safety rests on the
log: a new owner's `LogWriter.open` writes an open marker that fences every
older writer of that partition.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from functools import partial
from typing import Any, TypeGuard

import msgpack

from durable._logging import get_logger
from durable.cluster.chain import ChainFormat, VersionChain, chain_name, chain_version
from durable.cluster.members import Status
from durable.errors import CorruptObject, InvalidArgument, UnsupportedFormat
from durable.store.objects.base import ObjectStore

__all__ = [
    "ASSIGNMENT_FORMAT",
    "ASSIGNMENT_PREFIX",
    "AssignmentChain",
    "Slot",
    "Table",
    "assignment_name",
    "decode_table",
    "encode_table",
    "handover",
    "is_coordinator",
    "plan",
    "release",
]

log = get_logger("durable.cluster")

#: Where the table's versions live, below the store's root.
ASSIGNMENT_PREFIX = "cluster/assignment/"
#: The format version of table objects this code writes and reads.
ASSIGNMENT_FORMAT = 1

_MAY_BE_ALIVE = frozenset({Status.ALIVE, Status.UNKNOWN})
_DEPARTED = frozenset({Status.DEAD, Status.GONE})


@dataclass(frozen=True, slots=True)
class Slot:
    """One partition's assignment: ``owner`` at ``epoch``, moving to ``next``."""

    owner: str | None
    epoch: int
    next: str | None = None


@dataclass(frozen=True, slots=True)
class Table:
    """Version ``version`` of the assignment of ``partitions`` partitions."""

    version: int
    partitions: int
    slots: tuple[Slot, ...]

    @classmethod
    def empty(cls, partitions: int) -> Table:
        """The table before the first version (version 0: nobody owns anything)."""
        return cls(0, partitions, (Slot(None, 0),) * partitions)

    def owned_by(self, member: str) -> list[int]:
        """The partitions ``member`` owns, in order."""
        return [p for p, slot in enumerate(self.slots) if slot.owner == member]

    def loads(self) -> dict[str, int]:
        """How many partitions each member owns (owners only)."""
        out: dict[str, int] = {}
        for slot in self.slots:
            if slot.owner is not None:
                out[slot.owner] = out.get(slot.owner, 0) + 1
        return out


def assignment_name(version: int) -> str:
    """The object name of table version ``version`` (>= 1)."""
    return chain_name(ASSIGNMENT_PREFIX, version)


# ------------------------------------------------------------------ rules


def is_coordinator(me: str, statuses: Mapping[str, Status]) -> bool:
    """Whether ``me`` writes `plan`'s versions: no member with a lower id
    may be alive (alive or unknown) in ``statuses``."""
    return not any(m < me and s in _MAY_BE_ALIVE for m, s in statuses.items())


def plan(me: str, table: Table, statuses: Mapping[str, Status]) -> Table | None:
    """The next version the coordinator ``me`` writes, or None when nothing
    must change (or ``me`` is not the coordinator).

    ``table`` is the newest version just read (`Table.empty` when the chain
    is empty); ``statuses`` the liveness of the members just observed
    (every listed member, and every owner and ``next`` the table names: a
    member missing from it counts as unknown; ``me`` is alive).
    """
    if not is_coordinator(me, statuses):
        return None
    status = _status_of(me, statuses)
    live = sorted({m for m, s in statuses.items() if s is Status.ALIVE} | {me})
    slots = list(table.slots)
    for p, slot in enumerate(slots):
        if slot.next is not None and (slot.next == slot.owner or status(slot.next) in _DEPARTED):
            slots[p] = replace(slot, next=None)
    loads = _loads(slots, live)
    for p, slot in enumerate(slots):
        if slot.owner is None or status(slot.owner) in _DEPARTED:
            if slot.next is not None and slot.next in loads:
                heir = slot.next  # its load already counts this partition
            else:
                heir = _least(loads)
                loads[heir] += 1
            slots[p] = Slot(heir, slot.epoch + 1)
    named = {m for slot in slots for m in (slot.owner, slot.next) if m is not None}
    if all(status(m) is Status.ALIVE for m in named):
        _balance(slots, loads)
    return None if tuple(slots) == table.slots else _next(table, slots)


def handover(me: str, table: Table, *partitions: int) -> Table | None:
    """The version by which owner ``me``, having drained ``partitions``,
    hands each whose ``next`` is set to that member (epoch + 1); None if
    none of them is still ``me``'s with a ``next``."""
    slots = list(table.slots)
    for p in partitions:
        if not 0 <= p < table.partitions:
            raise InvalidArgument(
                f"partition {p} does not exist: the table has {table.partitions} partitions"
            )
        slot = slots[p]
        if slot.owner == me and slot.next is not None:
            slots[p] = Slot(slot.next, slot.epoch + 1)
    return None if tuple(slots) == table.slots else _next(table, slots)


def release(me: str, table: Table, statuses: Mapping[str, Status]) -> Table | None:
    """The version by which ``me``, leaving and drained, gives its partitions
    away: each to its ``next`` if alive, else to the least-loaded other live
    member (None if there is none), at epoch + 1; moves towards ``me`` are
    cancelled. None if the table names ``me`` nowhere."""
    others = sorted(m for m, s in statuses.items() if s is Status.ALIVE and m != me)
    slots = [replace(s, next=None) if s.next == me else s for s in table.slots]
    loads = _loads(slots, others)
    for p, slot in enumerate(slots):
        if slot.owner != me:
            continue
        if slot.next is not None and slot.next in loads:
            heir: str | None = slot.next
        elif loads:
            heir = _least(loads)
            loads[heir] += 1
        else:
            heir = None
        slots[p] = Slot(heir, slot.epoch + 1)
    return None if tuple(slots) == table.slots else _next(table, slots)


def _status_of(me: str, statuses: Mapping[str, Status]) -> Callable[[str], Status]:
    def status(member: str) -> Status:
        return Status.ALIVE if member == me else statuses.get(member, Status.UNKNOWN)

    return status


def _loads(slots: Iterable[Slot], members: Iterable[str]) -> dict[str, int]:
    """Each member's load: the partitions it owns without a ``next``, and
    those it is the ``next`` of."""
    loads = dict.fromkeys(members, 0)
    for slot in slots:
        dest = slot.next if slot.next is not None else slot.owner
        if dest in loads:
            loads[dest] += 1
    return loads


def _least(loads: Mapping[str, int]) -> str:
    return min(loads, key=lambda m: (loads[m], m))


def _balance(slots: list[Slot], loads: dict[str, int]) -> None:
    """Move partitions from the most- to the least-loaded live member until
    no two differ by more than one (each step lowers the spread of loads)."""
    while True:
        hi = max(loads, key=lambda m: (loads[m], m))
        lo = _least(loads)
        if loads[hi] - loads[lo] <= 1:
            return
        p, slot = _move(slots, hi, lo)
        slots[p] = slot
        loads[hi] -= 1
        loads[lo] += 1


def _move(slots: list[Slot], hi: str, lo: str) -> tuple[int, Slot]:
    """One partition of ``hi``'s load, moved to ``lo``: cancel a pending move
    away from ``lo``, else redirect a pending move towards ``hi``, else set
    ``next`` on the highest partition ``hi`` owns."""
    for p, slot in enumerate(slots):
        if slot.owner == lo and slot.next == hi:
            return p, replace(slot, next=None)
    for p, slot in enumerate(slots):
        if slot.next == hi:
            return p, replace(slot, next=lo)
    for p in reversed(range(len(slots))):
        slot = slots[p]
        if slot.owner == hi and slot.next is None:
            return p, replace(slot, next=lo)
    raise AssertionError(f"member {hi} has a load but no partition")  # pragma: no cover


def _next(table: Table, slots: list[Slot]) -> Table:
    return Table(table.version + 1, table.partitions, tuple(slots))


# --------------------------------------------------------------- encoding


def encode_table(table: Table) -> bytes:
    """The stored bytes of ``table``: a MessagePack map ``{"v", "version",
    "partitions", "slots"}``, each slot an array ``[owner, epoch, next]``."""
    m: dict[str, Any] = {
        "v": ASSIGNMENT_FORMAT,
        "version": table.version,
        "partitions": table.partitions,
        "slots": [[s.owner, s.epoch, s.next] for s in table.slots],
    }
    return msgpack.packb(m, use_bin_type=True)


def decode_table(name: str, data: bytes, partitions: int | None = None) -> Table:
    """Decode table object ``name`` (of a store of ``partitions`` partitions,
    if given); `CorruptObject` or `UnsupportedFormat` if unusable."""
    try:
        m = msgpack.unpackb(data, raw=False)
    except Exception as e:  # msgpack raises several unrelated types
        raise CorruptObject(name, f"not an assignment table (not MessagePack: {e})") from e
    if not isinstance(m, dict):
        raise CorruptObject(name, f"not an assignment table (a {type(m).__name__})")
    fmt = m.get("v")
    if not _is_int(fmt) or fmt < 1:
        raise CorruptObject(name, f"not an assignment table (format version {fmt!r})")
    if fmt > ASSIGNMENT_FORMAT:
        raise UnsupportedFormat(name, fmt, ASSIGNMENT_FORMAT)
    version, count, raw = m.get("version"), m.get("partitions"), m.get("slots")
    if not _is_int(version) or version != chain_version(ASSIGNMENT_PREFIX, name):
        raise CorruptObject(name, f"bad assignment table: it says version {version!r}")
    if not _is_int(count) or count < 1:
        raise CorruptObject(name, f"bad assignment table: partitions {count!r}")
    if partitions is not None and count != partitions:
        raise CorruptObject(
            name, f"bad assignment table: {count} partitions, the store has {partitions}"
        )
    if not isinstance(raw, list) or len(raw) != count:
        raise CorruptObject(name, f"bad assignment table: not {count} slots")
    return Table(version, count, tuple(_slot(name, p, s) for p, s in enumerate(raw)))


def _slot(name: str, p: int, raw: object) -> Slot:
    if isinstance(raw, list) and len(raw) == 3:
        owner, epoch, nxt = raw
        if (
            (owner is None or isinstance(owner, str))
            and (nxt is None or isinstance(nxt, str))
            and _is_int(epoch)
            and epoch >= 0
        ):
            return Slot(owner, epoch, nxt)
    raise CorruptObject(name, f"bad assignment table: slot {p} is {raw!r}")


def _is_int(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def _unreadable(partitions: int, name: str, version: int, error: Exception) -> Table:
    """A version that cannot be read names no owner, at epoch ``version``:
    above every earlier epoch (each version raises an epoch by at most one
    from 0), so the partitions are assigned again, with epochs that never
    go back (the log's open markers keep that safe)."""
    log.error("assignment table unreadable, read as ownerless", key=name, error=str(error))
    return Table(version, partitions, (Slot(None, version),) * partitions)


class AssignmentChain(VersionChain[Table]):
    """A reader and writer of the assignment table of ``partitions`` partitions
    on ``objects``: one LIST at `load`, then one GET of ``head + 1`` per
    `poll`; `append` creates the next version.

    `head` is the newest version read (None: none yet), `table` the same
    as a `Table` (`Table.empty` before the first version). Errors of the
    store (`ObjectStoreError`) propagate; the caller retries later.
    """

    def __init__(self, objects: ObjectStore, partitions: int) -> None:
        super().__init__(
            objects,
            ChainFormat(
                ASSIGNMENT_PREFIX,
                encode_table,
                partial(_decode_for, partitions),
                partial(_unreadable, partitions),
            ),
        )
        self.partitions = partitions

    @property
    def table(self) -> Table:
        """The newest table read (`Table.empty` if the chain is empty)."""
        return self.head if self.head is not None else Table.empty(self.partitions)

    async def append(self, table: Table) -> bool:
        """Create ``table`` (from `plan`, `handover` or `release` of `table`):
        True if this call wrote it, False if another writer got there first
        (`head` is then re-read: decide again from `table`)."""
        return await self.create(table)


def _decode_for(partitions: int, name: str, data: bytes) -> Table:
    return decode_table(name, data, partitions)
