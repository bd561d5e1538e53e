"""The pure parts of ownership: member and chain encodings, `Liveness`, `decide`,
the timing options; and `OwnerChain` on a memory store."""

from __future__ import annotations

import msgpack
import pytest

from durable.cluster.chain import (
    ChainVersion,
    OwnerChain,
    Reason,
    decode_version,
    encode_version,
    version_name,
)
from durable.cluster.decide import decide
from durable.cluster.members import (
    Liveness,
    MemberRecord,
    Role,
    Status,
    decode_member,
    encode_member,
    member_id_of,
    member_name,
)
from durable.cluster.owner import check_timing
from durable.errors import CorruptObject, InvalidArgument, UnsupportedFormat
from durable.store.objects.memory import MemoryObjectStore

TTL = 15_000

# ------------------------------------------------------------------ members


def test_member_record_round_trips_and_every_put_differs() -> None:
    record = MemberRecord(7, Role.OWNER, released=False, locked_on="host-a")
    first, second = encode_member(record), encode_member(record)
    assert first != second  # a fresh nonce per put: an observer sees a change
    back = decode_member("cluster/members/m1", first)
    assert (back.counter, back.role, back.released, back.locked_on) == (
        7,
        Role.OWNER,
        False,
        "host-a",
    )
    assert len(back.nonce) == 16
    assert decode_member("x", encode_member(MemberRecord(1, Role.STANDBY))).locked_on is None


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b"\xc1", "not MessagePack"),
        (msgpack.packb([1, 2]), "not a map"),
        (msgpack.packb({"v": 0}), "format version 0"),
        (msgpack.packb({"v": 1, "counter": -1, "nonce": b"", "role": "owner"}), "counter"),
        (msgpack.packb({"v": 1, "counter": 1, "nonce": "x", "role": "owner"}), "nonce"),
        (msgpack.packb({"v": 1, "counter": 1, "nonce": b"", "role": "boss"}), "role"),
        (
            msgpack.packb({"v": 1, "counter": 1, "nonce": b"", "role": "owner", "released": 1}),
            "released",
        ),
        (
            msgpack.packb({"v": 1, "counter": 1, "nonce": b"", "role": "owner", "locked_on": 3}),
            "locked_on",
        ),
    ],
)
def test_bad_member_objects_raise_corrupt_object_naming_the_key(body: bytes, message: str) -> None:
    with pytest.raises(CorruptObject, match=message) as info:
        decode_member("cluster/members/m9", body)
    assert info.value.name == "cluster/members/m9"


def test_member_object_of_a_newer_format_is_unsupported() -> None:
    with pytest.raises(UnsupportedFormat):
        decode_member("cluster/members/m9", msgpack.packb({"v": 2}))


def test_member_names() -> None:
    assert member_name("01ABC") == "cluster/members/01ABC"
    assert member_id_of("cluster/members/01ABC") == "01ABC"
    assert member_id_of("cluster/members/") is None
    assert member_id_of("cluster/members/a/b") is None
    assert member_id_of("cluster/owner/00000000000000000001") is None


# ----------------------------------------------------------------- liveness


def _beat(counter: int = 1, *, released: bool = False) -> bytes:
    return encode_member(MemberRecord(counter, Role.STANDBY, released=released))


def test_first_sight_proves_nothing_until_the_object_changes() -> None:
    live = Liveness(TTL)
    stale = _beat()
    assert live.observe("a", stale, 0) is Status.UNKNOWN
    assert live.observe("a", stale, TTL - 1) is Status.UNKNOWN
    assert live.observe("a", stale, TTL) is Status.DEAD  # unchanged for a ttl since first seen


def test_alive_while_it_changes_within_the_ttl_on_the_observers_clock() -> None:
    live = Liveness(TTL)
    live.observe("a", _beat(1), 0)
    assert live.observe("a", _beat(2), 3_000) is Status.ALIVE
    assert live.observe("a", last := _beat(3), 6_000) is Status.ALIVE
    assert live.observe("a", last, 6_000 + TTL - 1) is Status.ALIVE
    assert live.observe("a", last, 6_000 + TTL) is Status.DEAD
    assert live.observe("a", _beat(4), 6_000 + TTL + 1) is Status.ALIVE  # it woke up


def test_status_is_as_of_the_latest_observation_not_of_a_later_now() -> None:
    # An observer paused after its last read judges nobody dead before it reads again.
    live = Liveness(TTL)
    live.observe("a", _beat(1), 0)
    live.observe("a", _beat(2), 3_000)
    assert live.status("a") is Status.ALIVE


def test_released_or_deleted_is_gone_at_once() -> None:
    live = Liveness(TTL)
    live.observe("a", _beat(1), 0)
    assert live.observe("a", _beat(2, released=True), 1) is Status.GONE
    live.observe("b", _beat(1), 0)
    assert live.observe("b", None, 1) is Status.GONE
    assert live.observe("c", None, 0) is Status.UNKNOWN  # never seen: a named owner not yet written
    assert live.observe("c", None, TTL) is Status.DEAD


def test_undecodable_bytes_still_count_for_liveness() -> None:
    live = Liveness(TTL)
    live.observe("a", b"junk-1", 0)
    assert live.undecodable == {"a"}
    assert live.observe("a", b"junk-2", 1_000) is Status.ALIVE
    assert live.record("a") is None
    live.observe("a", _beat(), 2_000)
    assert live.undecodable == set()
    live.forget(["a"])
    assert live.known() == []


def test_liveness_needs_a_positive_ttl() -> None:
    with pytest.raises(ValueError, match="ttl"):
        Liveness(0)


# -------------------------------------------------------------------- chain


def test_chain_version_round_trips() -> None:
    entry = ChainVersion(12, "m1", Reason.TAKEOVER)
    assert decode_version(version_name(12), encode_version(entry)) == entry
    released = ChainVersion(13, None, Reason.RELEASE)
    assert decode_version(version_name(13), encode_version(released)) == released
    assert version_name(3) == "cluster/owner/00000000000000000003"


@pytest.mark.parametrize(
    ("name", "body", "message"),
    [
        (version_name(1), b"\xc1", "not MessagePack"),
        (version_name(1), msgpack.packb("x"), "a str"),
        (version_name(1), msgpack.packb({"v": True}), "format version"),
        (version_name(2), encode_version(ChainVersion(1, "a", Reason.START)), "says version 1"),
        ("elsewhere", encode_version(ChainVersion(1, "a", Reason.START)), "version 1"),
        (version_name(1), msgpack.packb({"v": 1, "version": 1, "owner": 5}), "owner"),
        (version_name(1), msgpack.packb({"v": 1, "version": 1, "reason": "whim"}), "reason"),
    ],
)
def test_bad_chain_versions_raise_corrupt_object(name: str, body: bytes, message: str) -> None:
    with pytest.raises(CorruptObject, match=message):
        decode_version(name, body)


async def test_owner_chain_lists_once_then_gets_the_next_version() -> None:
    objects = MemoryObjectStore()
    a, b = OwnerChain(objects), OwnerChain(objects)
    assert await a.load() is None
    assert await a.append("m1", Reason.START)
    assert a.head == ChainVersion(1, "m1", Reason.START)
    assert await b.append("m2", Reason.START) is False  # lost: re-read
    assert b.head == a.head
    assert await b.append(None, Reason.RELEASE)
    assert await b.append("m2", Reason.HANDOVER)
    assert await a.poll() == ChainVersion(3, "m2", Reason.HANDOVER)
    fresh = OwnerChain(objects)
    assert await fresh.load() == ChainVersion(3, "m2", Reason.HANDOVER)


async def test_an_unreadable_chain_version_reads_as_a_release() -> None:
    objects = MemoryObjectStore()
    chain = OwnerChain(objects)
    await chain.append("m1", Reason.START)
    await objects.create(version_name(2), b"garbage")
    assert await chain.poll() == ChainVersion(2, None, Reason.RELEASE)
    assert await OwnerChain(objects).load() == ChainVersion(2, None, Reason.RELEASE)


# ------------------------------------------------------------------- decide


def _v(owner: str | None, version: int = 4) -> ChainVersion:
    return ChainVersion(version, owner, Reason.START if owner else Reason.RELEASE)


A, B, C = "m1", "m2", "m3"


def test_first_worker_on_an_empty_chain_and_takeover_acquire_at_once() -> None:
    assert decide(B, None, {A: Status.ALIVE}).reason is Reason.START
    d = decide(B, _v(A), {A: Status.ALIVE}, takeover=True)
    assert (d.acquire, d.reason) == (True, Reason.TAKEOVER)


@pytest.mark.parametrize("status", [Status.ALIVE, Status.UNKNOWN])
def test_a_live_or_unknown_owner_keeps_the_store(status: Status) -> None:
    assert not decide(B, _v(A), {A: status}).acquire
    assert not decide(B, _v(A), {}).acquire  # never read: unknown


@pytest.mark.parametrize("status", [Status.DEAD, Status.GONE])
def test_a_dead_or_gone_owner_is_taken_over(status: Status) -> None:
    d = decide(B, _v(A), {A: status})
    assert (d.acquire, d.reason) == (True, Reason.TAKEOVER)
    assert A in d.why


def test_a_released_store_is_handed_over_to_the_lowest_live_standby() -> None:
    assert decide(B, _v(None), {A: Status.GONE}).reason is Reason.HANDOVER
    blocked = decide(C, _v(None), {A: Status.GONE, B: Status.ALIVE})
    assert not blocked.acquire
    assert B in blocked.why
    assert not decide(C, _v(None), {B: Status.UNKNOWN}).acquire  # may be alive: wait for it
    assert decide(C, _v(None), {B: Status.DEAD}).acquire


def test_higher_ids_never_block_and_the_dead_owner_is_no_candidate() -> None:
    assert decide(B, _v(A), {A: Status.DEAD, C: Status.ALIVE}).acquire
    assert decide(B, _v(C), {C: Status.DEAD, A: Status.DEAD}).acquire
    assert not decide(C, _v(A), {A: Status.DEAD, B: Status.ALIVE}).acquire


def test_the_host_lock_let_go_overrides_a_still_fresh_heartbeat() -> None:
    assert decide(B, _v(A), {A: Status.ALIVE}, owner_let_go_lock=True).acquire
    assert not decide(C, _v(A), {A: Status.ALIVE, B: Status.ALIVE}, owner_let_go_lock=True).acquire


def test_a_member_named_owner_that_lost_the_store_takes_it_again_if_lowest() -> None:
    assert decide(B, _v(B), {}).reason is Reason.TAKEOVER
    assert not decide(B, _v(B), {A: Status.ALIVE}).acquire


# ------------------------------------------------------------------- timing


def test_timing_defaults_and_validation() -> None:
    assert check_timing(15, 3) == (15.0, 3.0)
    for ttl, heartbeat, message in [
        (0, 1, "ttl must be a number of seconds > 0"),
        (15, -1, "heartbeat must be"),
        (15, True, "heartbeat must be"),
        (float("inf"), 1, "ttl must be"),
        ("15", 3, "ttl must be"),
        (15, 7.5, "less than half the ttl"),
    ]:
        with pytest.raises(InvalidArgument, match=message):
            check_timing(ttl, heartbeat)  # type: ignore[arg-type]


def test_a_former_owner_still_saying_so_is_no_standby() -> None:
    # m1 died owning; the chain names m2, dead too: m3 does not wait for m1's litter.
    assert decide(C, _v(B), {A: Status.UNKNOWN, B: Status.DEAD}, owning={A, B}).acquire
    assert not decide(C, _v(B), {A: Status.UNKNOWN, B: Status.DEAD}).acquire
