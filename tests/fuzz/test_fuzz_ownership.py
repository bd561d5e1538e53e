"""Fuzzing the ownership decoders: member objects and owner-chain versions,
and `Liveness` and `OwnerChain` fed with them (part C of issue 14).

Property (see `fuzzing`): any bytes decode to a well-typed value or raise
the decoder's typed error, nothing else; liveness and the chain reader
never raise on what they read (an undecodable member still counts by its
bytes; an undecodable chain version reads as a release).
"""

from __future__ import annotations

import asyncio

from fuzzing import FUZZ, corrupted, decodes_or_raises
from hypothesis import given
from hypothesis import strategies as st

from durable.cluster.chain import (
    ChainVersion,
    OwnerChain,
    Reason,
    decode_version,
    encode_version,
    version_name,
)
from durable.cluster.members import (
    Liveness,
    MemberRecord,
    Role,
    Status,
    decode_member,
    encode_member,
)
from durable.errors import CorruptObject, UnsupportedFormat
from durable.store.objects import MemoryObjectStore

ERRORS = (CorruptObject, UnsupportedFormat)
VERSION = 5
ids = st.from_regex(r"[0-9A-Z]{1,26}", fullmatch=True)

members = st.builds(
    MemberRecord,
    st.integers(0, 2**64 - 1),
    st.sampled_from(Role),
    st.booleans(),
    st.none() | st.text(max_size=12),
    st.binary(min_size=1, max_size=16),
).map(encode_member)
versions = st.builds(ChainVersion, st.just(VERSION), st.none() | ids, st.sampled_from(Reason)).map(
    encode_version
)


@FUZZ
@given(st.data())
def test_member_objects(data: st.DataObject) -> None:
    raw = data.draw(corrupted(members, names=("v", "counter", "nonce", "role", "released")))
    decodes_or_raises(lambda: decode_member("cluster/members/m1", raw), ERRORS, MemberRecord)
    live = Liveness(15_000)
    status = decodes_or_raises(lambda: live.observe("m1", raw, 0), (), Status)
    assert status in (Status.UNKNOWN, Status.GONE)  # first sight, or released


@FUZZ
@given(st.data())
def test_chain_versions(data: st.DataObject) -> None:
    raw = data.draw(corrupted(versions, names=("v", "version", "owner", "reason")))
    decodes_or_raises(lambda: decode_version(version_name(VERSION), raw), ERRORS, ChainVersion)


async def _load(raw: bytes) -> ChainVersion | None:
    store = MemoryObjectStore()
    await store.create(version_name(VERSION), raw)
    return await OwnerChain(store).load()


@FUZZ
@given(st.data())
def test_the_chain_reader_never_raises_on_what_it_reads(data: st.DataObject) -> None:
    raw = data.draw(corrupted(versions, names=("v", "version", "owner", "reason")))
    head = decodes_or_raises(lambda: asyncio.run(_load(raw)), (), ChainVersion | None)
    assert head is None or head.version == VERSION
