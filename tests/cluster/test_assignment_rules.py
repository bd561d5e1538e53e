"""The assignment table's pure rules (`plan`, `handover`, `release`), its
encoding, and `AssignmentChain` on a memory store."""

from __future__ import annotations

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from durable.cluster.assignment import (
    ASSIGNMENT_FORMAT,
    AssignmentChain,
    Slot,
    Table,
    assignment_name,
    decode_table,
    encode_table,
    handover,
    is_coordinator,
    plan,
    release,
)
from durable.cluster.members import Status
from durable.errors import CorruptObject, InvalidArgument, UnsupportedFormat
from durable.store.objects.memory import MemoryObjectStore

A, B, C, D = "m1", "m2", "m3", "m4"
ALIVE, UNKNOWN, DEAD, GONE = Status.ALIVE, Status.UNKNOWN, Status.DEAD, Status.GONE


def _table(*slots: tuple[str | None, int, str | None] | str | None, version: int = 5) -> Table:
    out = []
    for s in slots:
        out.append(Slot(*s) if isinstance(s, tuple) else Slot(s, 1))
    return Table(version, len(out), tuple(out))


def _dest(table: Table) -> dict[str, int]:
    """Each member's load once every pending move is done."""
    out: dict[str, int] = {}
    for s in table.slots:
        m = s.next or s.owner
        assert m is not None
        out[m] = out.get(m, 0) + 1
    return out


# ------------------------------------------------------------------- plan


def test_the_first_member_takes_every_partition_of_an_empty_table() -> None:
    t = plan(A, Table.empty(4), {})
    assert t == Table(1, 4, (Slot(A, 1),) * 4)
    assert plan(A, t, {}) is None  # nothing more to do


def test_only_the_lowest_member_that_may_be_alive_plans() -> None:
    orphaned = _table(A, None, C)
    for s in (ALIVE, UNKNOWN):
        assert not is_coordinator(B, {A: s, C: ALIVE})
        assert plan(B, orphaned, {A: s, C: ALIVE}) is None
    for s in (DEAD, GONE):
        assert is_coordinator(B, {A: s, C: ALIVE})
        assert plan(B, orphaned, {A: s, C: ALIVE}) is not None
    assert is_coordinator(A, {B: ALIVE, C: UNKNOWN})
    assert plan(A, _table(A, B, C), {B: ALIVE, C: ALIVE}) is None  # balanced: nothing to write


@pytest.mark.parametrize("gone", [DEAD, GONE])
def test_a_dead_or_gone_owners_partitions_go_at_once_to_the_least_loaded(gone: Status) -> None:
    t = _table(A, A, B, C, C, C, version=7)
    out = plan(A, t, {B: ALIVE, C: gone})
    assert out is not None
    assert out.version == 8
    # C's three: B (1) then A (2 -> tie with B at 2, A is lower) then B.
    assert out.slots[3:] == (Slot(B, 2), Slot(A, 2), Slot(B, 2))
    assert out.slots[:3] == t.slots[:3]  # sticky: nothing else moves
    assert plan(A, out, {B: ALIVE, C: gone}) is None


def test_an_ownerless_partition_goes_to_the_least_loaded() -> None:
    t = _table((None, 4, None), A, A)
    out = plan(A, t, {B: ALIVE})
    assert out is not None
    assert out.slots[0] == Slot(B, 5)


def test_a_dead_owners_partition_goes_to_its_next_if_alive_else_elsewhere() -> None:
    t = _table((C, 3, B), A, A, B)
    out = plan(A, t, {B: ALIVE, C: DEAD})
    assert out is not None
    assert out.slots[0] == Slot(B, 4)
    t = _table((C, 3, D), A, B)
    out = plan(A, t, {B: ALIVE, C: DEAD, D: DEAD})
    assert out is not None
    assert out.slots[0] == Slot(A, 4)  # its next died too: the least loaded (A, the lower id)


def test_a_dead_next_is_cleared_and_the_move_planned_again() -> None:
    t = _table(A, A, A, (A, 1, D), version=2)
    out = plan(A, t, {B: ALIVE, D: DEAD})
    assert out is not None
    assert out.slots[3] == Slot(A, 1, B)  # re-pointed at the live member
    assert _dest(out) == {A: 2, B: 2}


def test_unknown_owners_keep_their_partitions_and_nothing_is_balanced() -> None:
    t = _table(C, C, C, C, A)
    assert plan(A, t, {B: ALIVE, C: UNKNOWN}) is None  # C may be alive: wait
    assert plan(A, t, {B: ALIVE, C: ALIVE}) is not None


def test_an_owner_above_its_fair_share_gets_a_next_and_keeps_owning() -> None:
    t = _table(A, A, A, A, A, A, A, A)
    out = plan(A, t, {B: ALIVE})
    assert out is not None
    assert [s.owner for s in out.slots] == [A] * 8  # nobody stops before handing over
    assert [s.epoch for s in out.slots] == [1] * 8
    assert [s.next for s in out.slots] == [None] * 4 + [B] * 4
    assert plan(A, out, {B: ALIVE}) is None  # moves pending: nothing more


@pytest.mark.parametrize(
    ("partitions", "members", "shares"),
    [(16, 3, {6: 1, 5: 2}), (8, 3, {3: 2, 2: 1}), (2, 3, {1: 2, 0: 1}), (7, 7, {1: 7})],
)
def test_fair_shares_when_p_is_not_divisible(
    partitions: int, members: int, shares: dict[int, int]
) -> None:
    ids = [f"m{i}" for i in range(1, members + 1)]
    t = plan(ids[0], Table.empty(partitions), dict.fromkeys(ids[1:], ALIVE))
    assert t is not None
    loads = _dest(t)
    counts: dict[int, int] = {}
    for m in ids:
        counts[loads.get(m, 0)] = counts.get(loads.get(m, 0), 0) + 1
    assert counts == shares


def test_moves_are_sticky_within_one_of_balanced() -> None:
    # 5 / 3 / 3 of 11 among three: within one? no (5 - 3 = 2): one move.
    t = _table(*([A] * 5 + [B] * 3 + [C] * 3))
    out = plan(A, t, {B: ALIVE, C: ALIVE})
    assert out is not None
    assert sorted(_dest(out).values()) == [3, 4, 4]
    assert sum(s.next is not None for s in out.slots) == 1
    # 4 / 4 / 3: balanced, whoever holds the extra ones.
    t = _table(*([A] * 3 + [B] * 4 + [C] * 4))
    assert plan(A, t, {B: ALIVE, C: ALIVE}) is None


def test_a_pending_move_is_cancelled_or_redirected_rather_than_adding_one() -> None:
    # A was to hand p0 to B; now B holds the rest: the move is cancelled.
    out = plan(A, _table((A, 1, B), B, B, B), {B: ALIVE})
    assert out is not None
    assert out.slots[0] == Slot(A, 1)
    assert [s.next for s in out.slots[1:]] == [None, None, A]
    # C was to hand three to B, which has one already: one is redirected to A, one
    # cancelled (C keeps it).
    out = plan(A, _table((C, 1, B), (C, 1, B), (C, 1, B), B), {B: ALIVE, C: ALIVE})
    assert out is not None
    assert [s.next for s in out.slots] == [A, None, B, None]
    assert _dest(out) == {A: 1, B: 2, C: 1}


# ------------------------------------------------------- handover, release


def test_handover_gives_drained_partitions_to_their_next() -> None:
    t = _table((A, 3, B), (A, 1, C), A, B, version=9)
    out = handover(A, t, 0, 2, 3)
    assert out is not None
    assert out.version == 10
    assert out.slots == (Slot(B, 4), Slot(A, 1, C), Slot(A, 1), Slot(B, 1))
    assert handover(A, out, 0, 2, 3) is None  # nothing of A's with a next among them
    assert handover(B, t, 0) is None  # not B's
    with pytest.raises(InvalidArgument, match="partition 4 does not exist"):
        handover(A, t, 4)


def test_release_gives_everything_away_and_cancels_moves_towards_the_leaver() -> None:
    t = _table(A, A, (A, 2, C), B, (B, 1, A), C)
    out = release(A, t, {B: ALIVE, C: ALIVE, D: DEAD})
    assert out is not None
    assert out.slots[4] == Slot(B, 1)  # no longer moving to A
    assert out.slots[2] == Slot(C, 3)  # to its next
    assert {out.slots[0].owner, out.slots[1].owner} == {B, C}
    assert [s.epoch for s in out.slots[:2]] == [2, 2]
    assert A not in _dest(out)
    assert release(A, out, {B: ALIVE}) is None


def test_the_last_member_releases_to_nobody() -> None:
    out = release(A, _table(A, A), {B: DEAD})
    assert out is not None
    assert out.slots == (Slot(None, 2), Slot(None, 2))
    assert plan(B, out, {A: GONE}) == Table(7, 2, (Slot(B, 3), Slot(B, 3)))


# ------------------------------------------------- plan's own invariants

_MEMBERS = [A, B, C, D, "m5"]


@st.composite
def _situations(draw: st.DrawFn) -> tuple[Table, dict[str, Status]]:
    partitions = draw(st.integers(1, 12))
    owners = st.sampled_from([None, *_MEMBERS])
    slots = tuple(
        Slot(draw(owners), draw(st.integers(0, 5)), draw(owners)) for _ in range(partitions)
    )
    statuses = {m: draw(st.sampled_from(list(Status))) for m in _MEMBERS[1:]}
    return Table(draw(st.integers(0, 50)), partitions, slots), statuses


@settings(max_examples=300, deadline=None)
@given(_situations())
def test_plan_settles_and_never_lowers_an_epoch(situation: tuple[Table, dict[str, Status]]) -> None:
    """From any table: one plan gives every partition a live owner (or one
    that may be alive), epochs never go down, a second plan changes nothing,
    and once every move is handed over the load is balanced within one."""
    table, statuses = situation
    out = plan(A, table, statuses) or table
    live = {A} | {m for m, s in statuses.items() if s is ALIVE}
    for old, new in zip(table.slots, out.slots, strict=True):
        assert new.owner is not None
        assert statuses.get(new.owner, ALIVE) in (ALIVE, UNKNOWN)
        assert new.epoch >= old.epoch
        if new.owner != old.owner:
            assert new.epoch == old.epoch + 1
            assert new.owner in live
        assert new.next is None or (new.next != new.owner and new.next in live | set(statuses))
    assert plan(A, out, statuses) is None
    if all(s.owner in live and (s.next is None or s.next in live) for s in out.slots):
        done = out
        for m in sorted(live):
            done = handover(m, done, *range(done.partitions)) or done
        loads = [done.loads().get(m, 0) for m in live]
        assert max(loads) - min(loads) <= 1
        assert plan(A, done, statuses) is None


# --------------------------------------------------------------- encoding


def test_tables_round_trip() -> None:
    t = _table((A, 3, None), (None, 0, None), (B, 12, C), version=4)
    assert decode_table(assignment_name(4), encode_table(t)) == t
    assert decode_table(assignment_name(4), encode_table(t), 3) == t
    assert assignment_name(4) == "cluster/assignment/00000000000000000004"


def _raw(**fields: object) -> bytes:
    m: dict[str, object] = {"v": 1, "version": 1, "partitions": 1, "slots": [["m1", 1, None]]}
    m.update(fields)
    return msgpack.packb(m)


@pytest.mark.parametrize(
    ("name", "body", "message"),
    [
        (assignment_name(1), b"\xc1", "not MessagePack"),
        (assignment_name(1), msgpack.packb([1]), "a list"),
        (assignment_name(1), _raw(v=True), "format version"),
        (assignment_name(2), _raw(), "says version 1"),
        ("elsewhere", _raw(), "says version 1"),
        (assignment_name(1), _raw(partitions=0, slots=[]), "partitions 0"),
        (assignment_name(1), _raw(partitions=2), "not 2 slots"),
        (assignment_name(1), _raw(slots=[["m1", -1, None]]), "slot 0"),
        (assignment_name(1), _raw(slots=[["m1", 1]]), "slot 0"),
        (assignment_name(1), _raw(slots=[[5, 1, None]]), "slot 0"),
        (assignment_name(1), _raw(slots=[["m1", 1, b"x"]]), "slot 0"),
        (assignment_name(1), _raw(slots=[["m1", True, None]]), "slot 0"),
    ],
)
def test_bad_tables_raise_corrupt_object_naming_the_key(
    name: str, body: bytes, message: str
) -> None:
    with pytest.raises(CorruptObject, match=message) as info:
        decode_table(name, body)
    assert name in str(info.value)


def test_a_table_of_another_partition_count_or_newer_format_is_refused() -> None:
    with pytest.raises(CorruptObject, match="1 partitions, the store has 8"):
        decode_table(assignment_name(1), _raw(), 8)
    with pytest.raises(UnsupportedFormat):
        decode_table(assignment_name(1), _raw(v=ASSIGNMENT_FORMAT + 1))


# ------------------------------------------------------------------ chain


async def test_the_chain_lists_once_then_gets_the_next_version() -> None:
    objects = MemoryObjectStore()
    a, b = AssignmentChain(objects, 2), AssignmentChain(objects, 2)
    assert await a.load() is None
    assert a.table == Table.empty(2)
    first = plan(A, a.table, {})
    assert first is not None
    assert await a.append(first)
    assert a.head == first
    assert await b.append(Table(1, 2, (Slot(B, 1),) * 2)) is False  # lost: re-read
    assert b.table == first
    moved = handover(A, Table(1, 2, (Slot(A, 1), Slot(A, 1, B))), 1)
    assert moved is not None
    assert await b.append(moved)
    assert await a.poll() == moved
    assert await AssignmentChain(objects, 2).load() == moved
    with pytest.raises(ValueError, match="not the next version"):
        await a.append(first)
    assert await objects.list("cluster/assignment/") == [assignment_name(1), assignment_name(2)]


@pytest.mark.parametrize("body", [b"garbage", encode_table(Table(3, 5, (Slot(A, 1),) * 5))])
async def test_an_unreadable_version_reads_as_ownerless_above_every_epoch(body: bytes) -> None:
    objects = MemoryObjectStore()
    chain = AssignmentChain(objects, 2)
    for version in (1, 2):
        assert await chain.append(Table(version, 2, (Slot(A, version), Slot(B, 1))))
    await objects.create(assignment_name(3), body)  # garbage, or 5 partitions of 2
    assert await chain.poll() == Table(3, 2, (Slot(None, 3),) * 2)
    assert await AssignmentChain(objects, 2).load() == Table(3, 2, (Slot(None, 3),) * 2)
    out = plan(B, chain.table, {A: DEAD})
    assert out == Table(4, 2, (Slot(B, 4),) * 2)
