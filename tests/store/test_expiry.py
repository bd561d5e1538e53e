"""`ExpiryIndex` (semantics 1.22) over a caller-KV prefix on a real log writer."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest

from durable.errors import Fenced, ReadOnlyStore, ReservedKey
from durable.store.clock import MockClock
from durable.store.expiry import (
    Delete,
    DeleteIf,
    ExpiryAction,
    ExpiryEntry,
    ExpiryIndex,
    Keep,
)
from durable.store.keyspace import PENDING, USER
from durable.store.kv import KvEffects, KvNamespace
from durable.store.log import LogReader, LogWriter, State, WriteBatch
from durable.store.objects.base import ObjectStore

Factory = Callable[[], ObjectStore]
P = b"idx/"
RETENTION = 60.0  # seconds
RET_MS = 60_000


@pytest.fixture
def kv(writer: LogWriter) -> KvNamespace:
    return KvNamespace(writer, reserved_prefixes=[b"workflow/"])


@pytest.fixture
def clock() -> MockClock:
    return MockClock()


@pytest.fixture
def index(kv: KvNamespace) -> ExpiryIndex:
    return ExpiryIndex(kv, P, page_size=3)


@pytest.fixture
def scans(monkeypatch: pytest.MonkeyPatch) -> list[bytes | None]:
    """Record the start key of every `State.scan` (every read of the store's state)."""
    seen: list[bytes | None] = []
    real = State.scan

    def spy(self: State, start: bytes | None = None, *args: object, **kw: object) -> object:
        seen.append(start)
        return real(self, start, *args, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(State, "scan", spy)
    return seen


class Recorder:
    """A sweep callback that records entries and answers with a fixed action."""

    def __init__(self, action: ExpiryAction | None = None) -> None:
        self.seen: list[ExpiryEntry] = []
        self.action = action or Delete()

    def __call__(self, entry: ExpiryEntry) -> ExpiryAction:
        self.seen.append(entry)
        return self.action

    @property
    def suffixes(self) -> list[bytes]:
        return [e.suffix for e in self.seen]


async def add_all(index: ExpiryIndex, *entries: tuple[int, bytes]) -> None:
    for at_ms, suffix in entries:
        await index.add(at_ms, suffix)


def key_at(at_ms: int, suffix: bytes = b"") -> bytes:
    """An entry key built by hand (`ExpiryIndex.entry_key` would lower the bound)."""
    return P + at_ms.to_bytes(8, "big") + suffix


def index_keys(kv: KvNamespace) -> list[bytes]:
    return [k for k, _ in kv.scan(P, limit=1000).entries]


# --------------------------------------------------------------- key layout


async def test_entry_key_layout_and_parse(index: ExpiryIndex) -> None:
    key = index.entry_key(0x0102030405060708, b"run-1")
    assert key == P + bytes([1, 2, 3, 4, 5, 6, 7, 8]) + b"run-1"
    assert index.parse(key) == (0x0102030405060708, b"run-1")
    assert index.parse(index.entry_key(5)) == (5, b"")
    assert index.parse(index.entry_key(2**64 - 1, b"x")) == (2**64 - 1, b"x")


async def test_parse_rejects_foreign_and_short_keys(index: ExpiryIndex) -> None:
    assert index.parse(b"other/" + bytes(8)) is None
    assert index.parse(b"idx" + bytes(8)) is None  # the prefix minus its last byte
    assert index.parse(P + bytes(7)) is None
    assert index.parse(P) is None
    assert index.parse(P + bytes(8)) == (0, b"")


async def test_entry_keys_sort_by_time(index: ExpiryIndex) -> None:
    times = [0, 1, 255, 256, 65_535, 1_700_000_000_000, 2**63, 2**64 - 1]
    built = [index.entry_key(t, b"\xff\xff") for t in times]
    assert sorted(built) == built
    assert index.entry_key(1, b"\xff") < index.entry_key(2, b"")


async def test_entry_key_checks_its_arguments(index: ExpiryIndex) -> None:
    for bad in (-1, 2**64):
        with pytest.raises(ValueError, match="at_ms"):
            index.entry_key(bad)
    for wrong in (1.5, True, "1"):
        with pytest.raises(TypeError, match="at_ms"):
            index.entry_key(wrong)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="suffix"):
        index.entry_key(1, "run")  # type: ignore[arg-type]


async def test_the_index_checks_its_construction(kv: KvNamespace) -> None:
    with pytest.raises(TypeError):
        ExpiryIndex(kv, "idx/")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="page_size"):
        ExpiryIndex(kv, P, page_size=0)
    with pytest.raises(ReservedKey):
        ExpiryIndex(kv, b"workflow/terminals/")
    internal = ExpiryIndex(kv.internal(), b"workflow/terminals/")
    await internal.add(1, b"r")
    assert await internal.sweep(RET_MS + 1, RETENTION, Recorder()) == 1
    assert repr(internal) == "ExpiryIndex(prefix=b'workflow/terminals/')"


# ------------------------------------------------------------------- sweep


async def test_due_means_at_plus_retention_at_most_now(
    index: ExpiryIndex, kv: KvNamespace, clock: MockClock
) -> None:
    t = clock.now_ms()
    await add_all(index, (t, b"a"), (t + 1, b"b"))
    clock.advance(RETENTION)  # now == t + retention: a is due, b is 1 ms short
    cb = Recorder()
    assert await index.sweep(clock.now_ms(), RETENTION, cb) == 1
    assert cb.suffixes == [b"a"]
    assert index_keys(kv) == [key_at(t + 1, b"b")]
    clock.advance(0.001)
    assert await index.sweep(clock.now_ms(), RETENTION, cb) == 1
    assert cb.suffixes == [b"a", b"b"]
    assert index_keys(kv) == []


async def test_sweep_offers_due_entries_oldest_first_and_stops_at_the_first_not_due(
    index: ExpiryIndex, kv: KvNamespace, clock: MockClock
) -> None:
    t = clock.now_ms()
    await add_all(index, (t + 30, b"d"), (t + 10, b"b"), (t, b"a"), (t + 20, b"c"), (t + 10, b"a"))
    cb = Recorder()
    removed = await index.sweep(t + 20 + RET_MS, RETENTION, cb)
    assert removed == 4
    assert [(e.at_ms - t, e.suffix) for e in cb.seen] == [
        (0, b"a"),
        (10, b"a"),
        (10, b"b"),
        (20, b"c"),
    ]
    assert cb.seen[0].key == key_at(t, b"a")
    assert index_keys(kv) == [key_at(t + 30, b"d")]


async def test_sweep_reads_in_pages(kv: KvNamespace, clock: MockClock) -> None:
    index = ExpiryIndex(kv, P, page_size=2)
    t = clock.now_ms()
    await add_all(index, *((t + i, str(i).encode()) for i in range(7)))
    cb = Recorder()
    assert await index.sweep(t + 100 + RET_MS, RETENTION, cb) == 7
    assert cb.suffixes == [str(i).encode() for i in range(7)]
    assert index_keys(kv) == []


async def test_a_not_due_bound_returns_zero_without_reading(
    index: ExpiryIndex, kv: KvNamespace, clock: MockClock, scans: list[bytes | None]
) -> None:
    t = clock.now_ms()
    await index.add(t + 1000, b"late")
    cb = Recorder()
    assert await index.sweep(t + RET_MS, RETENTION, cb) == 0  # reads, finds it not due
    assert len(scans) == 1
    # An entry written behind the index's back (not through entry_key) is
    # older than the bound: a sweep with the bound not due does not read.
    await kv.put(key_at(t, b"hidden"), b"")
    assert await index.sweep(t + 999 + RET_MS, RETENTION, cb) == 0
    assert len(scans) == 1
    assert cb.seen == []


async def test_entry_key_lowers_the_bound(
    index: ExpiryIndex, kv: KvNamespace, clock: MockClock, scans: list[bytes | None]
) -> None:
    t = clock.now_ms()
    await index.add(t + 1000, b"late")
    assert await index.sweep(t + RET_MS, RETENTION, Recorder()) == 0
    await index.add(t, b"early")  # lowers the bound to t: due now
    cb = Recorder()
    assert await index.sweep(t + RET_MS, RETENTION, cb) == 1
    assert cb.suffixes == [b"early"]
    assert len(scans) == 2


async def test_sweep_scans_from_the_bound(
    index: ExpiryIndex, kv: KvNamespace, clock: MockClock, scans: list[bytes | None]
) -> None:
    t = clock.now_ms()
    await add_all(index, (t, b"a"), (t + 500, b"b"))
    assert await index.sweep(t + RET_MS, RETENTION, Recorder()) == 1
    assert scans[-1] == USER + P  # the bound was unknown: from the prefix start
    assert await index.sweep(t + 500 + RET_MS, RETENTION, Recorder()) == 1
    assert scans[-1] == USER + key_at(t + 500)  # from the remembered bound


async def test_an_empty_index_is_not_read_again_until_an_entry_is_made(
    index: ExpiryIndex, clock: MockClock, scans: list[bytes | None]
) -> None:
    t = clock.now_ms()
    assert await index.sweep(t, RETENTION, Recorder()) == 0
    assert len(scans) == 1
    assert await index.sweep(t + 10**12, RETENTION, Recorder()) == 0
    assert len(scans) == 1
    await index.add(t, b"x")
    assert await index.sweep(t + RET_MS, RETENTION, Recorder()) == 1


async def test_a_new_index_finds_entries_written_before(
    make_objects: Factory, writer: LogWriter, clock: MockClock
) -> None:
    t = clock.now_ms()
    await add_all(ExpiryIndex(KvNamespace(writer), P), (t, b"a"), (t + 1, b"b"))
    await writer.close()
    w2 = await LogWriter.open(make_objects())  # another process, after a restart
    try:
        fresh = ExpiryIndex(KvNamespace(w2), P)
        cb = Recorder()
        assert await fresh.sweep(t + 1 + RET_MS, RETENTION, cb) == 2
        assert cb.suffixes == [b"a", b"b"]
    finally:
        await w2.close()


async def test_malformed_keys_are_deleted_without_a_callback(
    index: ExpiryIndex, kv: KvNamespace, clock: MockClock
) -> None:
    t = clock.now_ms()
    await kv.put(P, b"")
    await kv.put(P + b"\x00\x01", b"")
    await kv.put(P + bytes(7), b"")
    await index.add(t, b"ok")
    await kv.put(b"idx0", b"")  # outside the prefix: untouched
    cb = Recorder()
    assert await index.sweep(t + RET_MS, RETENTION, cb) == 1  # malformed keys are not counted
    assert cb.suffixes == [b"ok"]
    assert index_keys(kv) == []
    assert kv.get(b"idx0") == b""


async def test_delete_commits_its_effects_with_the_entry_delete(
    make_objects: Factory, index: ExpiryIndex, kv: KvNamespace, writer: LogWriter, clock: MockClock
) -> None:
    t = clock.now_ms()
    await kv.put(b"runs/r1", b"record")
    await index.add(t, b"r1")
    commits = writer.stats.commits
    effects = KvEffects().delete(b"runs/r1").put(b"archive/r1", b"gone")
    assert await index.sweep(t + RET_MS, RETENTION, Recorder(Delete(effects))) == 1
    assert writer.stats.commits == commits + 1  # one transaction
    assert kv.get(b"runs/r1") is None
    assert kv.get(b"archive/r1") == b"gone"
    assert index_keys(kv) == []
    await writer.flush()  # sweep commits are not awaited; flush makes them durable
    ro = KvNamespace(await LogReader.open(make_objects()))
    assert (ro.get(b"runs/r1"), ro.get(b"archive/r1")) == (None, b"gone")
    assert [k for k, _ in ro.scan(P, limit=10).entries] == []


async def test_delete_with_a_stager(index: ExpiryIndex, kv: KvNamespace, writer: LogWriter) -> None:
    await index.add(1, b"r")
    internal = PENDING + b"some-internal-key"

    def stage(batch: WriteBatch) -> None:
        batch.put(internal, b"written by another layer")

    assert await index.sweep(RET_MS + 1, RETENTION, Recorder(Delete(stage))) == 1
    assert writer.state.get(internal) == b"written by another layer"
    assert index_keys(kv) == []


async def test_delete_if_applies_effects_only_when_the_key_matches(
    index: ExpiryIndex, kv: KvNamespace
) -> None:
    await kv.put(b"runs/a", b"terminal")
    await kv.put(b"runs/b", b"running-again")
    await add_all(index, (1, b"a"), (2, b"b"), (3, b"c"))

    def decide(entry: ExpiryEntry) -> ExpiryAction:
        run = b"runs/" + entry.suffix
        if entry.suffix == b"c":  # expects absence
            return DeleteIf(run, None, KvEffects().put(b"note/c", b"absent"))
        return DeleteIf(run, b"terminal", KvEffects().delete(run))

    assert await index.sweep(RET_MS + 3, RETENTION, decide) == 3
    assert kv.get(b"runs/a") is None  # matched: effects applied
    assert kv.get(b"runs/b") == b"running-again"  # not matched: effects dropped
    assert kv.get(b"note/c") == b"absent"
    assert index_keys(kv) == []  # every entry removed either way


async def test_keep_leaves_the_entry_and_holds_the_bound(
    index: ExpiryIndex, kv: KvNamespace, scans: list[bytes | None]
) -> None:
    await add_all(index, (1, b"a"), (2, b"keep"), (3, b"c"), (10_000, b"late"))

    def decide(entry: ExpiryEntry) -> ExpiryAction:
        return Keep() if entry.suffix == b"keep" else Delete()

    cb = Recorder()
    assert await index.sweep(RET_MS + 3, RETENTION, decide) == 2
    assert index_keys(kv) == [key_at(2, b"keep"), key_at(10_000, b"late")]
    assert await index.sweep(RET_MS + 4, RETENTION, cb) == 1  # the kept entry is due again
    assert cb.suffixes == [b"keep"]
    assert scans[-1] == USER + key_at(2)


async def test_async_callbacks(index: ExpiryIndex, kv: KvNamespace) -> None:
    await add_all(index, (1, b"a"), (2, b"b"))
    seen: list[bytes] = []

    async def decide(entry: ExpiryEntry) -> ExpiryAction:
        await asyncio.sleep(0)
        seen.append(entry.suffix)
        return Delete()

    assert await index.sweep(RET_MS + 2, RETENTION, decide) == 2
    assert seen == [b"a", b"b"]


async def test_a_callback_error_ends_the_sweep_and_the_next_one_resumes(
    index: ExpiryIndex, kv: KvNamespace
) -> None:
    await add_all(index, (1, b"a"), (2, b"b"), (3, b"c"), (4, b"d"), (5, b"e"))
    seen: list[bytes] = []

    def failing(entry: ExpiryEntry) -> ExpiryAction:
        seen.append(entry.suffix)
        if entry.suffix == b"c":
            raise RuntimeError("memo store unavailable")
        return Delete()

    with pytest.raises(RuntimeError, match="memo store"):
        await index.sweep(RET_MS + 10, RETENTION, failing)
    assert seen == [b"a", b"b", b"c"]
    assert [index.parse(k) for k in index_keys(kv)] == [(3, b"c"), (4, b"d"), (5, b"e")]
    # The bound stayed at c: the next sweep reads it (even with now just at c).
    cb = Recorder()
    assert await index.sweep(RET_MS + 3, RETENTION, cb) == 1
    assert cb.suffixes == [b"c"]


async def test_a_store_error_ends_the_sweep(make_objects: Factory, clock: MockClock) -> None:
    w1 = await LogWriter.open(make_objects())
    index = ExpiryIndex(KvNamespace(w1), P)
    await add_all(index, (1, b"a"), (2, b"b"))
    w2 = await LogWriter.open(make_objects())  # fences w1
    try:
        with pytest.raises(Fenced):
            await KvNamespace(w1).put(b"x", b"1")
        cb = Recorder()
        with pytest.raises(Fenced):
            await index.sweep(RET_MS + 2, RETENTION, cb)
        assert cb.suffixes == [b"a"]
        # The new writer's index still finds both entries.
        cb2 = Recorder()
        assert await ExpiryIndex(KvNamespace(w2), P).sweep(RET_MS + 2, RETENTION, cb2) == 2
        assert cb2.suffixes == [b"a", b"b"]
    finally:
        await w1.close()
        await w2.close()


async def test_a_sweep_failing_before_any_entry_keeps_the_bound_unknown(
    make_objects: Factory,
) -> None:
    w1 = await LogWriter.open(make_objects())
    kv1 = KvNamespace(w1)
    await kv1.put(P + b"\x00", b"")  # malformed: its delete is the sweep's first write
    index = ExpiryIndex(kv1, P)
    await index.add(1, b"a")
    w2 = await LogWriter.open(make_objects())  # fences w1
    try:
        with pytest.raises(Fenced):
            await kv1.put(b"x", b"1")
        for _ in range(2):  # the failed sweep must not conclude the index is empty
            with pytest.raises(Fenced):
                await index.sweep(RET_MS + 1, RETENTION, Recorder())
    finally:
        await w1.close()
        await w2.close()


async def test_an_abandoned_sweep_leaves_the_bound_at_unprocessed_entries(
    index: ExpiryIndex, kv: KvNamespace
) -> None:
    await add_all(index, (1, b"a"), (2, b"b"), (3, b"c"))
    blocked = asyncio.Event()
    release = asyncio.Event()

    async def slow(entry: ExpiryEntry) -> ExpiryAction:
        if entry.suffix == b"b":
            blocked.set()
            await release.wait()
        return Delete()

    sweep = asyncio.create_task(index.sweep(RET_MS + 3, RETENTION, slow))
    await blocked.wait()
    sweep.cancel()
    with pytest.raises(asyncio.CancelledError):
        await sweep
    assert [index.parse(k) for k in index_keys(kv)] == [(2, b"b"), (3, b"c")]
    cb = Recorder()
    assert await index.sweep(RET_MS + 2, RETENTION, cb) == 1
    assert cb.suffixes == [b"b"]


async def test_an_entry_made_during_a_sweep_is_not_lost(
    index: ExpiryIndex, kv: KvNamespace
) -> None:
    await add_all(index, (100, b"a"), (200, b"b"))

    async def decide(entry: ExpiryEntry) -> ExpiryAction:
        if entry.suffix == b"a":
            await index.add(50, b"made-during")  # behind the sweep's position
        return Delete()

    assert await index.sweep(RET_MS + 200, RETENTION, decide) == 2
    cb = Recorder()
    assert await index.sweep(RET_MS + 200, RETENTION, cb) == 1
    assert cb.suffixes == [b"made-during"]


async def test_an_entry_staged_as_an_effect_lowers_the_bound(
    index: ExpiryIndex, kv: KvNamespace
) -> None:
    await index.add(5_000, b"late")
    assert await index.sweep(RET_MS, RETENTION, Recorder()) == 0  # bound: 5000
    await kv.commit(kv.stage_effects(WriteBatch(), KvEffects().expiry_entry(index, 7, b"x")))
    cb = Recorder()
    assert await index.sweep(RET_MS + 7, RETENTION, cb) == 1
    assert cb.suffixes == [b"x"]


async def test_a_bad_callback_result_ends_the_sweep(index: ExpiryIndex, kv: KvNamespace) -> None:
    await add_all(index, (1, b"a"), (2, b"b"))

    def wrong(entry: ExpiryEntry) -> ExpiryAction:
        return "delete"  # type: ignore[return-value]

    with pytest.raises(TypeError, match="Delete, DeleteIf or Keep"):
        await index.sweep(RET_MS + 2, RETENTION, wrong)
    assert len(index_keys(kv)) == 2
    assert await index.sweep(RET_MS + 2, RETENTION, Recorder()) == 2


async def test_effects_under_a_reserved_prefix_end_the_sweep(
    index: ExpiryIndex, kv: KvNamespace
) -> None:
    await kv.internal().put(b"workflow/r", b"x")
    await index.add(1, b"r")
    with pytest.raises(ReservedKey):
        await index.sweep(
            RET_MS + 1, RETENTION, Recorder(Delete(KvEffects().delete(b"workflow/r")))
        )
    assert kv.get(b"workflow/r") == b"x"
    assert len(index_keys(kv)) == 1


async def test_sweeps_of_one_index_run_one_at_a_time(index: ExpiryIndex, kv: KvNamespace) -> None:
    await add_all(index, (1, b"a"), (2, b"b"))
    release = asyncio.Event()
    seen: list[bytes] = []

    async def slow(entry: ExpiryEntry) -> ExpiryAction:
        seen.append(entry.suffix)
        await release.wait()
        return Delete()

    first = asyncio.create_task(index.sweep(RET_MS + 2, RETENTION, slow))
    second = asyncio.create_task(index.sweep(RET_MS + 2, RETENTION, slow))
    for _ in range(5):
        await asyncio.sleep(0)
    assert seen == [b"a"]  # the second sweep waits for the first
    release.set()
    assert await first == 2
    assert await second == 0  # the first left nothing due
    assert seen == [b"a", b"b"]


async def test_sweep_needs_a_writable_namespace(make_objects: Factory, index: ExpiryIndex) -> None:
    await index.add(1, b"a")
    ro_index = ExpiryIndex(KvNamespace(await LogReader.open(make_objects())), P)
    assert ro_index.parse(ro_index.entry_key(1, b"a")) == (1, b"a")
    with pytest.raises(ReadOnlyStore):
        await ro_index.sweep(RET_MS + 1, RETENTION, Recorder())
    with pytest.raises(ReadOnlyStore):
        await ro_index.add(2, b"b")


async def test_retention_must_not_be_negative(index: ExpiryIndex) -> None:
    with pytest.raises(ValueError, match="retention"):
        await index.sweep(0, -1.0, Recorder())


async def test_zero_retention(index: ExpiryIndex, clock: MockClock) -> None:
    t = clock.now_ms()
    await add_all(index, (t, b"now"), (t + 1, b"future"))
    cb = Recorder()
    assert await index.sweep(t, 0, cb) == 1
    assert cb.suffixes == [b"now"]


async def test_sweep_results_survive_reopen(
    make_objects: Factory, writer: LogWriter, clock: MockClock
) -> None:
    kv = KvNamespace(writer)
    index = ExpiryIndex(kv, P)
    t = clock.now_ms()
    await kv.put(b"runs/a", b"1")
    await add_all(index, (t, b"a"), (t + RET_MS * 10, b"b"))
    clock.advance(RETENTION)
    assert (
        await index.sweep(
            clock.now_ms(), RETENTION, Recorder(Delete(KvEffects().delete(b"runs/a")))
        )
        == 1
    )
    await writer.close()
    w2 = await LogWriter.open(make_objects())
    try:
        kv2 = KvNamespace(w2)
        assert kv2.get(b"runs/a") is None
        assert [ExpiryIndex(kv2, P).parse(k) for k, _ in kv2.scan(P, limit=10).entries] == [
            (t + RET_MS * 10, b"b")
        ]
    finally:
        await w2.close()
