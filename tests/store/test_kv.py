"""The caller KV namespace (semantics 1.20) on a real log writer."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest

from durable.errors import (
    ConflictingKvEffect,
    Fenced,
    KvValueTooLarge,
    ReadOnlyStore,
    ReservedKey,
    StoreClosed,
)
from durable.store.clock import MockClock
from durable.store.keyspace import MAX_KV_VALUE_SIZE, PENDING, USER
from durable.store.kv import KvEffects, KvNamespace, KvPage
from durable.store.log import LogOptions, LogReader, LogWriter, State, WriteBatch
from durable.store.objects import (
    FaultyObjectStore,
)
from durable.store.objects.base import ObjectStore

Factory = Callable[[], ObjectStore]
RESERVED = (b"workflow/", b"jobs/")


@pytest.fixture
def kv(writer: LogWriter) -> KvNamespace:
    return KvNamespace(writer, reserved_prefixes=RESERVED)


async def reader_on(make_objects: Factory) -> KvNamespace:
    """A read-only namespace over what is durable on the store right now."""
    return KvNamespace(await LogReader.open(make_objects()))


async def reopen(make_objects: Factory, writer: LogWriter) -> LogWriter:
    await writer.close()
    return await LogWriter.open(make_objects())


def keys(page: KvPage) -> list[bytes]:
    return [k for k, _ in page.entries]


# ------------------------------------------------------------------ get/put


async def test_get_of_an_absent_key_is_none(kv: KvNamespace) -> None:
    assert kv.get(b"nothing") is None


async def test_put_then_get_and_overwrite(kv: KvNamespace) -> None:
    await kv.put(b"k", b"v1")
    assert kv.get(b"k") == b"v1"
    await kv.put(b"k", b"v2")
    assert kv.get(b"k") == b"v2"


async def test_empty_key_and_empty_value_are_allowed(kv: KvNamespace) -> None:
    await kv.put(b"", b"")
    assert kv.get(b"") == b""


async def test_keys_live_under_the_user_tag_and_never_collide(
    kv: KvNamespace, writer: LogWriter
) -> None:
    internal = PENDING + b"\x01\x05queue"
    await writer.commit(WriteBatch().put(internal, b"internal record"))
    await kv.put(internal, b"caller value")  # a caller key equal to an internal key
    assert writer.state.get(internal) == b"internal record"
    assert writer.state.get(USER + internal) == b"caller value"
    assert kv.get(internal) == b"caller value"
    await kv.delete(internal)
    assert writer.state.get(internal) == b"internal record"


async def test_put_is_durable_before_it_returns(make_objects: Factory, kv: KvNamespace) -> None:
    await kv.put(b"k", b"v")
    # A reader loads only what is on the object store.
    assert (await reader_on(make_objects)).get(b"k") == b"v"


async def test_put_waits_for_the_log_write(make_objects: Factory) -> None:
    clock = MockClock()
    slow = FaultyObjectStore(make_objects(), clock_sleep=clock.sleep)
    w = await LogWriter.open(slow)
    kv = KvNamespace(w)
    slow.latency = 1.0  # every store call now takes 1 s of mock time
    put = asyncio.create_task(kv.put(b"k", b"v"))
    await clock.wait_for_sleepers()  # the log write is in flight
    assert kv.get(b"k") == b"v"  # visible in memory at once...
    for _ in range(5):
        await asyncio.sleep(0)
    assert not put.done()  # ...but put has not returned
    clock.advance(1.0)
    await put
    assert (await reader_on(make_objects)).get(b"k") == b"v"
    slow.latency = 0.0
    await w.close()


async def test_writes_survive_close_and_reopen(make_objects: Factory, writer: LogWriter) -> None:
    kv = KvNamespace(writer)
    await kv.put(b"a", b"1")
    await kv.put(b"b", b"2")
    await kv.put(b"c", b"3")
    await kv.delete(b"b")
    assert await kv.compare_put(b"a", b"1", b"11")
    assert await kv.compare_delete(b"c", b"3")
    w2 = await reopen(make_objects, writer)
    try:
        kv2 = KvNamespace(w2)
        assert kv2.get(b"a") == b"11"
        assert kv2.get(b"b") is None
        assert kv2.get(b"c") is None
    finally:
        await w2.close()


# ------------------------------------------------------------------ delete


async def test_delete_is_durable(make_objects: Factory, kv: KvNamespace) -> None:
    await kv.put(b"k", b"v")
    await kv.delete(b"k")
    assert kv.get(b"k") is None
    assert (await reader_on(make_objects)).get(b"k") is None


async def test_delete_of_an_absent_key_is_fine(kv: KvNamespace) -> None:
    await kv.delete(b"never-there")
    assert kv.get(b"never-there") is None


# ----------------------------------------------------------- compare_delete


async def test_compare_delete_deletes_on_match(make_objects: Factory, kv: KvNamespace) -> None:
    await kv.put(b"k", b"v")
    assert await kv.compare_delete(b"k", b"v") is True
    assert kv.get(b"k") is None
    assert (await reader_on(make_objects)).get(b"k") is None


async def test_compare_delete_keeps_the_value_on_mismatch(
    kv: KvNamespace, writer: LogWriter
) -> None:
    await kv.put(b"k", b"v")
    commits = writer.stats.commits
    assert await kv.compare_delete(b"k", b"other") is False
    assert await kv.compare_delete(b"absent", b"v") is False
    assert kv.get(b"k") == b"v"
    assert writer.stats.commits == commits  # nothing written


# -------------------------------------------------------------- compare_put


async def test_compare_put_absent_expectation(kv: KvNamespace) -> None:
    assert await kv.compare_put(b"k", None, b"first") is True
    assert kv.get(b"k") == b"first"
    assert await kv.compare_put(b"k", None, b"second") is False
    assert kv.get(b"k") == b"first"


async def test_compare_put_on_match_is_durable(make_objects: Factory, kv: KvNamespace) -> None:
    await kv.put(b"k", b"old")
    assert await kv.compare_put(b"k", b"old", b"new") is True
    assert (await reader_on(make_objects)).get(b"k") == b"new"


async def test_compare_put_on_mismatch_writes_nothing(kv: KvNamespace, writer: LogWriter) -> None:
    await kv.put(b"k", b"old")
    commits = writer.stats.commits
    assert await kv.compare_put(b"k", b"stale", b"new") is False
    assert await kv.compare_put(b"absent", b"something", b"new") is False
    assert kv.get(b"k") == b"old"
    assert kv.get(b"absent") is None
    assert writer.stats.commits == commits


async def test_unmatched_compares_answer_during_a_write_outage(make_objects: Factory) -> None:
    w1 = await LogWriter.open(make_objects())
    kv = KvNamespace(w1)
    await kv.put(b"k", b"v")
    w2 = await LogWriter.open(make_objects())  # fences w1
    try:
        with pytest.raises(Fenced):
            await kv.put(b"other", b"x")  # w1 learns it is fenced: writes now fail
        assert w1.failure is not None
        assert await kv.compare_put(b"k", b"stale", b"new") is False
        assert await kv.compare_put(b"k", None, b"new") is False
        assert await kv.compare_delete(b"k", b"stale") is False
        with pytest.raises(Fenced):
            await kv.compare_put(b"k", b"v", b"new")  # a match must write: it fails
        with pytest.raises(Fenced):
            await kv.compare_delete(b"k", b"v")
    finally:
        await w1.close()
        await w2.close()


async def test_concurrent_compare_put_loops_lose_no_update(make_objects: Factory) -> None:
    clock = MockClock()
    slow = FaultyObjectStore(make_objects(), clock_sleep=clock.sleep)
    w = await LogWriter.open(slow)
    kv = KvNamespace(w)
    slow.latency = 0.001  # commits wait on the store, so the loops interleave
    driver = asyncio.create_task(_tick(clock, 0.001))
    try:

        async def incr(times: int) -> None:
            for _ in range(times):
                while True:
                    raw = kv.get(b"counter")
                    n = int(raw) if raw is not None else 0
                    await asyncio.sleep(0)  # let the others read the same value
                    if await kv.compare_put(b"counter", raw, str(n + 1).encode()):
                        break

        await asyncio.gather(*(incr(10) for _ in range(8)))
        assert kv.get(b"counter") == b"80"
    finally:
        driver.cancel()
        await asyncio.gather(driver, return_exceptions=True)
        slow.latency = 0.0
        await w.close()
    w2 = await LogWriter.open(make_objects())
    assert KvNamespace(w2).get(b"counter") == b"80"
    await w2.close()


async def _tick(clock: MockClock, step: float) -> None:
    """Move a mock clock forward whenever something sleeps on it."""
    while True:
        await clock.wait_for_sleepers()
        clock.advance(step)
        await asyncio.sleep(0)


# ------------------------------------------------------------- value limit


async def test_a_value_at_the_limit_is_accepted(kv: KvNamespace) -> None:
    value = b"x" * MAX_KV_VALUE_SIZE
    await kv.put(b"big", value)
    assert kv.get(b"big") == value
    assert MAX_KV_VALUE_SIZE == 262_144


@pytest.mark.parametrize("op", ["put", "compare_put", "compare_put_unmatched"])
async def test_a_value_over_the_limit_writes_nothing(
    make_objects: Factory, kv: KvNamespace, writer: LogWriter, op: str
) -> None:
    await kv.put(b"k", b"old")
    commits = writer.stats.commits
    too_big = b"x" * (MAX_KV_VALUE_SIZE + 1)
    attempt = {
        "put": lambda: kv.put(b"k", too_big),
        "compare_put": lambda: kv.compare_put(b"k", b"old", too_big),
        "compare_put_unmatched": lambda: kv.compare_put(b"k", b"not-current", too_big),
    }[op]
    with pytest.raises(KvValueTooLarge) as info:
        await attempt()
    assert info.value.size == MAX_KV_VALUE_SIZE + 1
    assert info.value.max == MAX_KV_VALUE_SIZE
    assert info.value.key == b"k"
    assert isinstance(info.value, ValueError)
    assert writer.stats.commits == commits
    assert kv.get(b"k") == b"old"
    await writer.flush()
    assert (await reader_on(make_objects)).get(b"k") == b"old"


# -------------------------------------------------------------- key types


@pytest.mark.parametrize("bad", ["text", bytearray(b"k"), memoryview(b"k"), 3, None])
async def test_keys_must_be_bytes(kv: KvNamespace, writer: LogWriter, bad: object) -> None:
    commits = writer.stats.commits
    with pytest.raises(TypeError, match="must be bytes"):
        kv.get(bad)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="must be bytes"):
        await kv.put(bad, b"v")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="must be bytes"):
        await kv.delete(bad)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="must be bytes"):
        await kv.compare_put(bad, None, b"v")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="must be bytes"):
        await kv.compare_delete(bad, b"v")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="must be bytes"):
        kv.scan(bad, limit=10)  # type: ignore[arg-type]
    assert writer.stats.commits == commits


async def test_a_str_key_error_says_how_to_fix_it(kv: KvNamespace) -> None:
    with pytest.raises(TypeError, match=r"encode it"):
        await kv.put("k", b"v")  # type: ignore[arg-type]


async def test_values_and_expectations_must_be_bytes(kv: KvNamespace) -> None:
    with pytest.raises(TypeError, match="value must be bytes"):
        await kv.put(b"k", "v")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="expected value must be bytes"):
        await kv.compare_put(b"k", "v", b"v")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="expected value must be bytes"):
        await kv.compare_delete(b"k", None)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="start must be bytes"):
        kv.scan(b"", "a", limit=1)  # type: ignore[arg-type]
    assert kv.get(b"k") is None


# -------------------------------------------------------- reserved prefixes


@pytest.mark.parametrize("key", [b"workflow/", b"workflow/run-1", b"jobs/x"])
async def test_caller_writes_under_reserved_prefixes_raise(
    kv: KvNamespace, writer: LogWriter, key: bytes
) -> None:
    commits = writer.stats.commits
    with pytest.raises(ReservedKey) as info:
        await kv.put(key, b"v")
    assert info.value.key == key
    assert key.startswith(info.value.prefix)
    with pytest.raises(ReservedKey):
        await kv.delete(key)
    with pytest.raises(ReservedKey):
        await kv.compare_put(key, None, b"v")
    with pytest.raises(ReservedKey):
        await kv.compare_delete(key, b"v")
    with pytest.raises(ReservedKey):
        kv.stage_effects(WriteBatch(), KvEffects().put(key, b"v"))
    assert writer.stats.commits == commits
    assert kv.get(key) is None


async def test_keys_beside_reserved_prefixes_are_the_callers(kv: KvNamespace) -> None:
    for key in (b"workflow", b"workflowx", b"job/x", b"x/workflow/"):
        await kv.put(key, b"v")
        assert kv.get(key) == b"v"


async def test_the_internal_view_writes_reserved_keys_and_callers_read_them(
    kv: KvNamespace,
) -> None:
    internal = kv.internal()
    assert internal.is_internal
    assert not kv.is_internal
    assert internal.reserved_prefixes == kv.reserved_prefixes == RESERVED
    await internal.put(b"workflow/run-1", b"record")
    assert await internal.compare_put(b"workflow/run-1", b"record", b"record2")
    assert kv.get(b"workflow/run-1") == b"record2"  # reading is allowed
    assert keys(kv.scan(b"workflow/", limit=10)) == [b"workflow/run-1"]
    await internal.delete(b"workflow/run-1")
    assert kv.get(b"workflow/run-1") is None


async def test_an_empty_reserved_prefix_is_refused(writer: LogWriter) -> None:
    with pytest.raises(ValueError, match="every KV key"):
        KvNamespace(writer, reserved_prefixes=[b""])
    with pytest.raises(TypeError):
        KvNamespace(writer, reserved_prefixes=["workflow/"])  # type: ignore[list-item]


# --------------------------------------------------------------- read-only


async def test_a_namespace_over_a_reader_is_read_only(
    make_objects: Factory, kv: KvNamespace
) -> None:
    await kv.put(b"k", b"v")
    ro = await reader_on(make_objects)
    assert ro.read_only
    assert not kv.read_only
    assert ro.get(b"k") == b"v"
    assert keys(ro.scan(b"", limit=10)) == [b"k"]
    with pytest.raises(ReadOnlyStore, match="read-only"):
        await ro.put(b"k", b"w")
    with pytest.raises(ReadOnlyStore):
        await ro.delete(b"k")
    with pytest.raises(ReadOnlyStore):
        await ro.compare_put(b"k", b"v", b"w")
    with pytest.raises(ReadOnlyStore):
        await ro.compare_put(b"k", b"unmatched", b"w")
    with pytest.raises(ReadOnlyStore):
        await ro.compare_delete(b"k", b"v")
    with pytest.raises(ReadOnlyStore):
        ro.commit(WriteBatch())
    with pytest.raises(ReadOnlyStore):
        await ro.internal().put(b"k", b"w")
    assert kv.get(b"k") == b"v"


async def test_a_reader_namespace_follows_refreshes(make_objects: Factory, kv: KvNamespace) -> None:
    await kv.put(b"k", b"1")
    reader = await LogReader.open(make_objects())
    ro = KvNamespace(reader)
    assert ro.get(b"k") == b"1"
    await kv.put(b"k", b"2")
    await kv.put(b"n", b"x")
    assert ro.get(b"k") == b"1"  # not refreshed yet
    await reader.refresh()
    assert ro.get(b"k") == b"2"
    assert keys(ro.scan(b"", limit=10)) == [b"k", b"n"]


async def test_a_reader_namespace_reads_the_state_a_reload_installs(
    make_objects: Factory, kv: KvNamespace
) -> None:
    await kv.put(b"k", b"1")
    reader = await LogReader.open(make_objects())
    ro = KvNamespace(reader)
    reader.state = State([(USER + b"k", b"reloaded")])  # what a reload does
    assert ro.get(b"k") == b"reloaded"


async def test_a_reader_namespace_sees_commits_after_the_log_was_trimmed(
    make_objects: Factory,
) -> None:
    w = await LogWriter.open(make_objects(), LogOptions(checkpoint_max_objects=1))
    kv = KvNamespace(w)
    await kv.put(b"k", b"1")
    reader = await LogReader.open(make_objects())
    ro = KvNamespace(reader)
    for i in range(2, 6):
        await kv.put(b"k", str(i).encode())
    await w.close()  # the final checkpoint trims every log object
    await reader.refresh()
    assert ro.get(b"k") == b"5"


# ----------------------------------------------------- interrupted writes


async def test_an_interrupted_write_leaves_nothing_after_reopen(make_objects: Factory) -> None:
    faulty = FaultyObjectStore(make_objects())
    w = await LogWriter.open(faulty)
    kv = KvNamespace(w)
    await kv.put(b"before", b"1")
    faulty.crash_after_writes(0)  # the process dies before the next log write
    batch = kv.stage_effects(WriteBatch(), KvEffects().put(b"a", b"1").put(b"b", b"2"))
    with pytest.raises(StoreClosed):
        await kv.commit(batch.delete(USER + b"before"))
    with pytest.raises(StoreClosed):
        await kv.put(b"later", b"x")
    await w.close()
    w2 = await LogWriter.open(make_objects())
    try:
        kv2 = KvNamespace(w2)
        assert kv2.get(b"before") == b"1"
        assert kv2.get(b"a") is None
        assert kv2.get(b"b") is None
        assert kv2.get(b"later") is None
    finally:
        await w2.close()


async def test_a_crash_after_the_log_write_keeps_the_whole_commit(make_objects: Factory) -> None:
    faulty = FaultyObjectStore(make_objects())
    w = await LogWriter.open(faulty)
    kv = KvNamespace(w)
    faulty.crash_after_writes(1)  # the log object lands, then the process dies
    batch = kv.stage_effects(WriteBatch(), KvEffects().put(b"a", b"1").put(b"b", b"2"))
    await kv.commit(batch)  # its log object landed...
    with pytest.raises(StoreClosed):
        await kv.put(b"c", b"3")  # ...and the next write finds the process dead
    await w.close()
    w2 = await LogWriter.open(make_objects())
    try:
        kv2 = KvNamespace(w2)
        assert (kv2.get(b"a"), kv2.get(b"b")) == (b"1", b"2")
        assert kv2.get(b"c") is None
    finally:
        await w2.close()


# -------------------------------------------------------------------- scan


@pytest.fixture
async def filled(kv: KvNamespace, writer: LogWriter) -> KvNamespace:
    batch = WriteBatch()
    for key in (b"a", b"a/", b"a/1", b"a/2", b"a/3", b"a/4", b"a/5", b"a0", b"b/1", b"\xff"):
        kv.stage_put(batch, key, b"v" + key)
    batch.put(PENDING + b"internal", b"never listed")
    await writer.commit(batch)
    return kv


async def test_scan_lists_a_prefix_in_order_without_the_tag(filled: KvNamespace) -> None:
    page = filled.scan(b"a/", limit=100)
    assert page.entries == [(k, b"v" + k) for k in (b"a/", b"a/1", b"a/2", b"a/3", b"a/4", b"a/5")]
    assert page.more is False


async def test_scan_limit_sets_more(filled: KvNamespace) -> None:
    page = filled.scan(b"a/", limit=2)
    assert keys(page) == [b"a/", b"a/1"]
    assert page.more is True
    assert page.last_key == b"a/1"
    exact = filled.scan(b"a/", limit=6)
    assert len(exact.entries) == 6
    assert exact.more is False


async def test_scan_limit_zero_is_an_empty_page(filled: KvNamespace) -> None:
    assert filled.scan(b"a/", limit=0) == KvPage([], False)
    with pytest.raises(ValueError, match="limit"):
        filled.scan(b"a/", limit=-1)


async def test_scan_of_the_whole_namespace_never_shows_internal_keys(filled: KvNamespace) -> None:
    page = filled.scan(b"", limit=100)
    assert keys(page) == [
        b"a",
        b"a/",
        b"a/1",
        b"a/2",
        b"a/3",
        b"a/4",
        b"a/5",
        b"a0",
        b"b/1",
        b"\xff",
    ]
    assert KvPage([], False).last_key is None


async def test_scan_bounds_inside_the_prefix(filled: KvNamespace) -> None:
    assert keys(filled.scan(b"a/", b"a/2", b"a/4", limit=10)) == [b"a/2", b"a/3"]
    assert keys(filled.scan(b"a/", b"a/2", b"a/4", inclusive=(False, True), limit=10)) == [
        b"a/3",
        b"a/4",
    ]
    assert keys(filled.scan(b"a/", b"a/2", b"a/4", inclusive=(True, True), limit=10)) == [
        b"a/2",
        b"a/3",
        b"a/4",
    ]
    # Bounds need not be existing keys.
    assert keys(filled.scan(b"a/", b"a/15", b"a/35", limit=10)) == [b"a/2", b"a/3"]


async def test_scan_bounds_outside_the_prefix_are_clamped(filled: KvNamespace) -> None:
    everything = [b"a/", b"a/1", b"a/2", b"a/3", b"a/4", b"a/5"]
    assert keys(filled.scan(b"a/", b"", b"\xff\xff", limit=10)) == everything
    assert keys(filled.scan(b"a/", b"a", b"b", limit=10)) == everything
    # Exclusive bounds outside the prefix do not cut into it.
    assert keys(filled.scan(b"a/", b"a", b"a0", inclusive=(False, True), limit=10)) == everything
    assert keys(filled.scan(b"a/", b"0", b"a/3", limit=10)) == [b"a/", b"a/1", b"a/2"]
    assert keys(filled.scan(b"a/", b"a/3", b"z", limit=10)) == [b"a/3", b"a/4", b"a/5"]
    assert keys(filled.scan(b"a/", b"a/", limit=10, inclusive=(False, False))) == everything[1:]


@pytest.mark.parametrize(
    ("start", "end", "inclusive"),
    [
        (b"b/", b"b/9", (True, False)),  # a foreign range: wholly in another prefix
        (b"a0", None, (True, False)),  # starts past the prefix
        (None, b"a", (True, True)),  # ends before the prefix
        (b"a/3", b"a/3", (True, False)),  # empty: start == end, end exclusive
        (b"a/3", b"a/3", (False, True)),
        (b"a/4", b"a/2", (True, True)),  # inverted
    ],
)
async def test_empty_and_foreign_ranges_give_an_empty_page(
    filled: KvNamespace, start: bytes | None, end: bytes | None, inclusive: tuple[bool, bool]
) -> None:
    for reverse in (False, True):
        page = filled.scan(b"a/", start, end, inclusive=inclusive, reverse=reverse, limit=10)
        assert page == KvPage([], False)


async def test_a_single_key_range(filled: KvNamespace) -> None:
    assert keys(filled.scan(b"a/", b"a/3", b"a/3", inclusive=(True, True), limit=10)) == [b"a/3"]


async def test_scan_of_an_empty_or_missing_prefix(filled: KvNamespace) -> None:
    assert filled.scan(b"zzz/", limit=10) == KvPage([], False)


async def test_scan_of_an_all_ff_prefix(filled: KvNamespace) -> None:
    await filled.put(b"\xff\xff", b"x")
    assert keys(filled.scan(b"\xff", limit=10)) == [b"\xff", b"\xff\xff"]
    assert keys(filled.scan(b"\xff", b"\xff\x00", limit=10)) == [b"\xff\xff"]
    assert keys(filled.scan(b"\xff", reverse=True, limit=10)) == [b"\xff\xff", b"\xff"]


async def test_descending_scan(filled: KvNamespace) -> None:
    page = filled.scan(b"a/", reverse=True, limit=4)
    assert keys(page) == [b"a/5", b"a/4", b"a/3", b"a/2"]
    assert page.more is True
    rest = filled.scan(b"a/", end=page.last_key, reverse=True, limit=4)
    assert keys(rest) == [b"a/1", b"a/"]
    assert rest.more is False
    ranged = filled.scan(b"a/", b"a/2", b"a/4", inclusive=(True, True), reverse=True, limit=10)
    assert keys(ranged) == [b"a/4", b"a/3", b"a/2"]
    clamped = filled.scan(b"a/", b"", b"zz", reverse=True, limit=2)
    assert keys(clamped) == [b"a/5", b"a/4"]


async def test_continuing_with_an_exclusive_start_covers_every_key_once(
    filled: KvNamespace,
) -> None:
    seen: list[bytes] = []
    page = filled.scan(b"a/", limit=2)
    seen += keys(page)
    while page.more:
        page = filled.scan(b"a/", page.last_key, inclusive=(False, False), limit=2)
        seen += keys(page)
    assert seen == [b"a/", b"a/1", b"a/2", b"a/3", b"a/4", b"a/5"]


# ----------------------------------------------------------------- entries


async def test_entries_streams_pages(filled: KvNamespace) -> None:
    pages = [p async for p in filled.entries(b"a/", page_size=4)]
    assert [[k for k, _ in p] for p in pages] == [
        [b"a/", b"a/1", b"a/2", b"a/3"],
        [b"a/4", b"a/5"],
    ]
    assert pages[0][1] == (b"a/1", b"va/1")


async def test_entries_with_bounds_and_descending(filled: KvNamespace) -> None:
    pages = [p async for p in filled.entries(b"a/", b"a/1", b"a/5", reverse=True, page_size=2)]
    assert [[k for k, _ in p] for p in pages] == [[b"a/4", b"a/3"], [b"a/2", b"a/1"]]
    pages = [
        p async for p in filled.entries(b"a/", b"a/1", b"a/5", inclusive=(False, True), page_size=3)
    ]
    assert [[k for k, _ in p] for p in pages] == [[b"a/2", b"a/3", b"a/4"], [b"a/5"]]
    pages = [
        p
        async for p in filled.entries(
            b"a/", b"a/1", b"a/5", inclusive=(True, True), reverse=True, page_size=2
        )
    ]
    assert [[k for k, _ in p] for p in pages] == [[b"a/5", b"a/4"], [b"a/3", b"a/2"], [b"a/1"]]


async def test_entries_of_an_empty_range_yields_nothing(filled: KvNamespace) -> None:
    assert [p async for p in filled.entries(b"nothing/")] == []
    assert [p async for p in filled.entries(b"a/", b"a/3", b"a/3")] == []
    with pytest.raises(ValueError, match="page_size"):
        async for _ in filled.entries(b"a/", page_size=0):
            pass


async def test_entries_is_lazy(filled: KvNamespace) -> None:
    seen: list[bytes] = []
    async for page in filled.entries(b"a/", page_size=2):
        seen += [k for k, _ in page]
        if seen == [b"a/", b"a/1"]:
            await filled.put(b"a/45", b"new")  # ahead of the cursor: seen
            await filled.delete(b"a/5")  # ahead of the cursor: not seen
    assert seen == [b"a/", b"a/1", b"a/2", b"a/3", b"a/4", b"a/45"]


# --------------------------------------------------------------- effects


async def test_kv_effects_reject_a_key_both_put_and_deleted() -> None:
    with pytest.raises(ConflictingKvEffect):
        KvEffects().put(b"k", b"v").delete(b"k")
    with pytest.raises(ConflictingKvEffect):
        KvEffects().delete(b"k").put(b"k", b"v")
    with pytest.raises(KvValueTooLarge):
        KvEffects().put(b"k", b"x" * (MAX_KV_VALUE_SIZE + 1))
    effects = KvEffects().put(b"a", b"1").put(b"a", b"2").delete(b"b").delete(b"b")
    assert effects.puts == {b"a": b"2"}
    assert effects.deletes == [b"b"]
    assert len(effects) == 2
    assert effects


async def test_staged_effects_commit_together(make_objects: Factory, kv: KvNamespace) -> None:
    await kv.put(b"gone", b"x")
    batch = kv.stage_effects(WriteBatch(), KvEffects().put(b"a", b"1").delete(b"gone"))
    await kv.commit(batch)
    ro = await reader_on(make_objects)
    assert (ro.get(b"a"), ro.get(b"gone")) == (b"1", None)


async def test_a_rejected_effect_leaves_the_batch_untouched(kv: KvNamespace) -> None:
    batch = WriteBatch().put(b"\x01x", b"y")
    with pytest.raises(ReservedKey):
        kv.stage_effects(batch, KvEffects().put(b"ok", b"1").delete(b"jobs/1"))
    assert len(batch) == 1


# ------------------------------------------------------------------ watch


async def test_a_watch_fires_once_the_write_is_durable_not_before(make_objects: Factory) -> None:
    clock = MockClock()
    slow = FaultyObjectStore(make_objects(), clock_sleep=clock.sleep)
    w = await LogWriter.open(slow)
    kv = KvNamespace(w)
    fut = kv.watch(b"k")
    other = kv.watch(b"other")
    slow.latency = 1.0
    put = asyncio.create_task(kv.put(b"k", b"v"))
    await clock.wait_for_sleepers()  # the log write is in flight
    assert kv.get(b"k") == b"v"
    assert not fut.done()  # in memory, not yet durable
    clock.advance(1.0)
    await put
    await asyncio.wait_for(fut, 5)
    assert not other.done()  # a write of another key fires nothing
    kv.unwatch(b"other", other)
    slow.latency = 0.0
    await w.close()


async def test_a_delete_fires_a_watch_and_an_unwatched_future_never_fires(
    kv: KvNamespace,
) -> None:
    await kv.put(b"k", b"v")
    fired, withdrawn = kv.watch(b"k"), kv.watch(b"k")
    kv.unwatch(b"k", withdrawn)
    await kv.delete(b"k")
    await asyncio.wait_for(fired, 5)
    assert not withdrawn.done()
    kv.unwatch(b"k", fired)  # after it fired: a no-op


async def test_watchers_fail_when_the_store_closes_or_the_write_fails(
    make_objects: Factory,
) -> None:
    w = await LogWriter.open(make_objects())
    kv = KvNamespace(w)
    fut = kv.watch(b"k")
    await w.close()
    with pytest.raises(StoreClosed):
        await fut

    faulty = FaultyObjectStore(make_objects())
    w = await LogWriter.open(faulty, LogOptions(write_retry_seconds=0.0))
    kv = KvNamespace(w)
    fut = kv.watch(b"k")
    faulty.fail_next("create")  # no retry window: the writer stops
    with pytest.raises(StoreClosed):
        await kv.put(b"k", b"v")
    with pytest.raises(StoreClosed):
        await fut
    await w.close()


async def test_count_agrees_with_a_scan_without_reading_values(filled: KvNamespace) -> None:
    for prefix in (b"a/", b"a", b"", b"b/", b"zzz/", b"\xff", b"a/3"):
        assert filled.count(prefix) == len(filled.scan(prefix, limit=100).entries), prefix
    await filled.put(b"\xff\xff", b"x")
    assert filled.count(b"\xff") == 2  # a prefix with no end key counts to the last key
    with pytest.raises(TypeError):
        filled.count("a/")  # type: ignore[arg-type]
