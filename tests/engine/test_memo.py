"""The memo store (semantics 2.15): scopes, values, corruption, clearing."""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import msgpack
import pytest

from durable._logging import capture_logs
from durable.engine import Memo, MemoStore
from durable.engine.memo import OUTCOME_KEY
from durable.engine.memo_codec import content_key, decode_entry, encode_entry, key_hash
from durable.errors import (
    CorruptObject,
    DurableError,
    EngineError,
    InvalidArgument,
    InvalidId,
    ObjectStoreError,
    ReservedMemoKey,
    UnsupportedFormat,
)
from durable.store.framing import FORMAT_VERSION, Kind, frame
from durable.store.objects import FaultyObjectStore, MemoryObjectStore, open_object_store
from durable.store.objects.base import ObjectStore
from durable.testing.cloud import StoreLocation

Factory = Callable[[], ObjectStore]
PREFIX = "q-memo"


@pytest.fixture
def objects(make_objects: Factory) -> ObjectStore:
    return make_objects()


@pytest.fixture
def store(objects: ObjectStore) -> MemoStore:
    return MemoStore(objects, PREFIX)


class Counter:
    """A compute function (sync or async) that counts its calls."""

    def __init__(self, value: Any) -> None:
        self.value = value
        self.calls = 0

    def __call__(self) -> Any:
        self.calls += 1
        return self.value

    async def run_async(self) -> Any:
        self.calls += 1
        await asyncio.sleep(0)
        return self.value


@dataclass(frozen=True)
class Draft:
    operation: str
    payload: bytes
    tags: tuple[str, ...] = ()


def entry_name(run_id: str, step: int | None, key: str) -> str:
    scope = "run" if step is None else f"steps/{step:020d}"
    return f"{PREFIX}/memos/{run_id}/{scope}/{key_hash(key)}"


# ------------------------------------------------------------------ get / put


VALUES = [
    None,
    True,
    0,
    -(2**63),
    2**64 - 1,
    1.5,
    "",
    "text é 🎉",
    b"",
    b"\x00\xff bytes",
    [],
    [1, "two", b"3", None, [4.0]],
    {"a": 1, "nested": {"b": [b"x"], "c": None}},
    {1: "int key", b"k": "bytes key", None: 0},
]


@pytest.mark.parametrize("value", VALUES)
async def test_put_then_get_round_trips(store: MemoStore, value: Any) -> None:
    memo = store.step_memo("run-1", 0)
    await memo.put("k", value)
    assert await memo.get("k") == value


async def test_get_missing_is_none(store: MemoStore) -> None:
    assert await store.step_memo("run-1", 0).get("absent") is None
    assert await store.run_memo("run-1").get("absent") is None


async def test_put_overwrites(store: MemoStore) -> None:
    memo = store.step_memo("run-1", 3)
    await memo.put("k", "first")
    await memo.put("k", {"second": 2})
    assert await memo.get("k") == {"second": 2}


async def test_values_read_back_decoded(store: MemoStore) -> None:
    memo = store.step_memo("run-1", 0)
    await memo.put("t", (1, (2, 3)))
    await memo.put("d", Draft("draft", b"p", ("x",)))
    await memo.put("b", bytearray(b"ba"))
    await memo.put("m", memoryview(b"mv"))
    assert await memo.get("t") == [1, [2, 3]]
    assert await memo.get("d") == {"operation": "draft", "payload": b"p", "tags": ["x"]}
    assert await memo.get("b") == b"ba"
    assert await memo.get("m") == b"mv"


@pytest.mark.parametrize(
    "key", ["", "x" * 10_000, "workflow.outcome", "a/b/../c", "é🎉", "\ud800 lone surrogate"]
)
async def test_any_string_is_a_key(store: MemoStore, key: str) -> None:
    memo = store.step_memo("run-1", 0)
    await memo.put(key, len(key))
    assert await memo.get(key) == len(key)
    assert await memo.get(key + "?") is None
    assert await memo.memoized(key, Counter("other")) == len(key)


async def test_empty_and_long_keys_are_distinct_entries(
    store: MemoStore, objects: ObjectStore
) -> None:
    memo = store.step_memo("run-1", 0)
    long = "k" * 10_000
    await memo.put("", "empty")
    await memo.put(long, "long")
    assert await memo.get("") == "empty"
    assert await memo.get(long) == "long"
    assert sorted(await objects.list(f"{PREFIX}/")) == sorted(
        [entry_name("run-1", 0, ""), entry_name("run-1", 0, long)]
    )


async def test_non_str_key_is_a_type_error(store: MemoStore) -> None:
    memo = store.step_memo("run-1", 0)
    with pytest.raises(TypeError, match="memo key must be a str"):
        await memo.put(b"k", 1)  # type: ignore[arg-type]


# -------------------------------------------------------- unencodable values


UNENCODABLE = [
    {1, 2},
    object(),
    2**64,
    {"nested": [complex(1, 2)]},
    {(1, 2): "tuple key does not read back"},
    "\ud800",
]


@pytest.mark.parametrize("value", UNENCODABLE)
async def test_unencodable_value_stores_nothing(
    store: MemoStore, objects: ObjectStore, value: Any
) -> None:
    memo = store.step_memo("run-1", 0)
    await memo.put("k", "old")
    with pytest.raises(TypeError, match="memo value for key 'k' cannot be encoded"):
        await memo.put("k", value)
    assert await memo.get("k") == "old"
    with pytest.raises(TypeError, match="key 'fresh'"):
        await memo.memoized("fresh", Counter(value))
    assert await memo.get("fresh") is None
    assert await objects.list(f"{PREFIX}/") == [entry_name("run-1", 0, "k")]


# ------------------------------------------------------------------ memoized


async def test_memoized_sync_computes_once(store: MemoStore) -> None:
    memo = store.step_memo("run-1", 1)
    compute = Counter({"answer": 42})
    assert await memo.memoized("k", compute) == {"answer": 42}
    assert await memo.memoized("k", compute) == {"answer": 42}
    assert compute.calls == 1
    assert await memo.get("k") == {"answer": 42}


async def test_memoized_async_computes_once(store: MemoStore) -> None:
    memo = store.step_memo("run-1", 1)
    compute = Counter(b"draft")
    assert await memo.memoized("k", compute.run_async) == b"draft"
    assert await memo.memoized("k", compute.run_async) == b"draft"
    assert compute.calls == 1


async def test_memoized_lambda_returning_a_coroutine(store: MemoStore) -> None:
    compute = Counter("v")
    memo = store.step_memo("run-1", 1)
    assert await memo.memoized("k", lambda: compute.run_async()) == "v"
    assert compute.calls == 1


async def test_memoized_returns_the_stored_form_on_first_call(store: MemoStore) -> None:
    memo = store.step_memo("run-1", 1)
    first = await memo.memoized("k", Counter(Draft("d", b"p", ("a", "b"))))
    again = await memo.memoized("k", Counter(None))
    assert first == again == {"operation": "d", "payload": b"p", "tags": ["a", "b"]}


async def test_memoized_stored_none_is_a_hit(store: MemoStore) -> None:
    memo = store.step_memo("run-1", 1)
    compute = Counter(None)
    assert await memo.memoized("k", compute) is None
    assert await memo.memoized("k", compute) is None
    assert compute.calls == 1


async def test_memoized_existing_put_is_returned(store: MemoStore) -> None:
    memo = store.step_memo("run-1", 1)
    await memo.put("k", [1, 2])
    compute = Counter("never")
    assert await memo.memoized("k", compute) == [1, 2]
    assert compute.calls == 0


class Boom(Exception):
    pass


async def test_memoized_compute_error_stores_nothing(
    store: MemoStore, objects: ObjectStore
) -> None:
    memo = store.step_memo("run-1", 1)

    def sync_fail() -> Any:
        raise Boom("sync")

    async def async_fail() -> Any:
        raise Boom("async")

    with pytest.raises(Boom, match="sync"):
        await memo.memoized("k", sync_fail)
    with pytest.raises(Boom, match="async"):
        await memo.memoized("k", async_fail)
    assert await objects.list(f"{PREFIX}/") == []
    assert await memo.memoized("k", Counter("later")) == "later"


async def test_memoized_rejects_an_awaitable(store: MemoStore) -> None:
    memo = store.step_memo("run-1", 1)
    coro = Counter("v").run_async()
    with pytest.raises(TypeError, match="not an awaitable"):
        await memo.memoized("k", coro)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="function taking no arguments"):
        await memo.memoized("k", "not callable")  # type: ignore[arg-type]
    assert await memo.get("k") is None


# ---------------------------------------------------------- corrupt entries


def _corruptions(key: str) -> dict[str, bytes]:
    good, _ = encode_entry(key, "good")
    flipped = bytearray(good)
    flipped[-1] ^= 0xFF
    return {
        "garbage": b"not a frame at all",
        "empty": b"",
        "truncated": good[:-3],
        "checksum": bytes(flipped),
        "bad msgpack": frame(Kind.MEMO, b"\xc1\xc1"),
        "not a map": frame(Kind.MEMO, msgpack.packb([1, 2])),
        "no value": frame(Kind.MEMO, msgpack.packb({"k": key.encode()})),
        "other key": encode_entry(key + "-other", "good")[0],
        "wrong kind": frame(Kind.BLOB, good[20:]),
        "newer version": frame(Kind.MEMO, good[20:], version=FORMAT_VERSION + 1),
    }


@pytest.mark.parametrize("case", list(_corruptions("k")))
async def test_corrupt_entry_is_absent_and_recomputed(
    store: MemoStore, objects: ObjectStore, case: str
) -> None:
    memo = store.step_memo("run-1", 2)
    name = entry_name("run-1", 2, "k")
    await objects.put(name, _corruptions("k")[case])
    with capture_logs() as logs:
        assert await memo.get("k") is None
    warnings = [e for e in logs if e["log_level"] == "warning"]
    assert len(warnings) == 1
    assert warnings[0]["object"] == name
    assert warnings[0]["run_id"] == "run-1"
    assert warnings[0]["step"] == 2

    compute = Counter("recomputed")
    with capture_logs():
        assert await memo.memoized("k", compute) == "recomputed"
    assert compute.calls == 1
    with capture_logs() as logs:
        assert await memo.get("k") == "recomputed"
        assert await memo.memoized("k", compute) == "recomputed"
    assert compute.calls == 1
    assert logs == []


async def test_corrupt_entry_overwritten_by_put(store: MemoStore, objects: ObjectStore) -> None:
    memo = store.run_memo("run-1")
    await objects.put(entry_name("run-1", None, "k"), b"junk")
    await memo.put("k", "fresh")
    assert await memo.get("k") == "fresh"


def test_decode_entry_errors_name_the_object() -> None:
    corrupt = _corruptions("k")
    with pytest.raises(CorruptObject, match="'obj'"):
        decode_entry("obj", corrupt["checksum"], "k")
    with pytest.raises(UnsupportedFormat, match="'obj'"):
        decode_entry("obj", corrupt["newer version"], "k")
    good, decoded = encode_entry("k", ("v",))
    assert decoded == ["v"]
    assert decode_entry("obj", good, "k") == ["v"]


# ------------------------------------------------------------ content keys


def test_content_key_is_sha256_of_msgpack() -> None:
    data = {"operation": "draft", "payload": b"\x01\x02"}
    expected = hashlib.sha256(msgpack.packb(data, use_bin_type=True)).hexdigest()
    assert content_key(data) == "content:" + expected
    assert content_key("plain") == ("content:" + hashlib.sha256(msgpack.packb("plain")).hexdigest())


def test_content_key_is_deterministic_and_order_insensitive() -> None:
    a = {"operation": "draft", "payload": b"p", "tags": ("x",)}
    b = {"tags": ["x"], "payload": b"p", "operation": "draft"}
    assert content_key(a) == content_key(b)
    assert content_key(Draft("draft", b"p", ("x",))) == content_key(a)
    assert content_key({"n": {"b": 1, "a": 2}}) == content_key({"n": {"a": 2, "b": 1}})
    assert content_key({"operation": "other", "payload": b"p", "tags": ["x"]}) != content_key(a)
    mixed = {"b": 1, None: 2, b"c": 3, 4: 4, True: 5, (1, 2): 6, "a": 7}
    assert content_key(mixed) == content_key(dict(reversed(mixed.items())))
    assert content_key(1) != content_key(True)
    assert content_key(b"x") != content_key("x")


@pytest.mark.parametrize("value", [{1, 2}, object(), 2**64, {"k": object()}])
def test_content_key_of_unencodable_input_is_a_type_error(value: Any) -> None:
    with pytest.raises(TypeError, match="content input cannot be encoded"):
        content_key(value)


async def test_content_get_put_and_memoized(store: MemoStore) -> None:
    memo = store.step_memo("run-1", 4)
    data = Draft("draft", b"payload")
    assert memo.content_key(data) == content_key(data)
    assert await memo.content_get(data) is None
    await memo.content_put(data, "drafted")
    assert await memo.content_get(data) == "drafted"
    assert await memo.get(memo.content_key(data)) == "drafted"
    assert await memo.content_get(Draft("draft", b"other")) is None

    compute = Counter("computed")
    assert await memo.memoized_by_content({"op": "x"}, compute) == "computed"
    assert await memo.memoized_by_content({"op": "x"}, compute.run_async) == "computed"
    assert compute.calls == 1
    with pytest.raises(TypeError):
        await memo.content_put({1, 2}, "v")


async def test_content_entries_stay_in_their_scope(store: MemoStore) -> None:
    await store.step_memo("run-1", 1).content_put("input", "step 1")
    assert await store.step_memo("run-1", 2).content_get("input") is None
    assert await store.run_memo("run-1").content_get("input") is None
    assert await store.step_memo("run-2", 1).content_get("input") is None
    compute = Counter("step 2")
    assert await store.step_memo("run-1", 2).memoized_by_content("input", compute) == "step 2"
    assert await store.step_memo("run-1", 1).content_get("input") == "step 1"


# ------------------------------------------------------------------- scopes


async def test_scopes_are_isolated(store: MemoStore, objects: ObjectStore) -> None:
    memos: list[Memo] = [
        store.step_memo("run-1", 0),
        store.step_memo("run-1", 1),
        store.run_memo("run-1"),
        store.step_memo("run-10", 0),
        store.run_memo("run-10"),
        MemoStore(objects, "other-memo").step_memo("run-1", 0),
    ]
    for i, memo in enumerate(memos):
        await memo.put("k", i)
    for i, memo in enumerate(memos):
        assert await memo.get("k") == i


async def test_object_layout(store: MemoStore, objects: ObjectStore) -> None:
    await store.step_memo("run-1", 7).put("a", 1)
    await store.run_memo("run-1").put("b", 2)
    assert await objects.list("") == sorted(
        [
            f"{PREFIX}/memos/run-1/run/{hashlib.sha256(b'b').hexdigest()}",
            f"{PREFIX}/memos/run-1/steps/00000000000000000007/{hashlib.sha256(b'a').hexdigest()}",
        ]
    )
    assert store.step_outputs_prefix("run-1") == f"{PREFIX}/step-outputs/run-1/"


@pytest.mark.parametrize("prefix", ["/q-memo/", "q-memo/"])
async def test_prefix_is_normalized(objects: ObjectStore, prefix: str) -> None:
    await MemoStore(objects, prefix).run_memo("r").put("k", 1)
    assert MemoStore(objects, prefix).prefix == PREFIX
    assert await MemoStore(objects, PREFIX).run_memo("r").get("k") == 1


async def test_empty_prefix(objects: ObjectStore) -> None:
    store = MemoStore(objects, "")
    await store.step_memo("r", 0).put("k", 1)
    assert await objects.list("") == [f"memos/r/steps/00000000000000000000/{key_hash('k')}"]
    assert await store.clear_run("r") == 1


@pytest.mark.parametrize("prefix", ["a//b", "a/./b", "..", 3])
def test_invalid_prefix(prefix: Any) -> None:
    with pytest.raises(InvalidArgument, match="memo prefix"):
        MemoStore(MemoryObjectStore(), prefix)


@pytest.mark.parametrize("run_id", ["", "has/slash", "dots.", "x" * 129, 7])
async def test_run_ids_are_validated(store: MemoStore, run_id: Any) -> None:
    with pytest.raises(InvalidId, match="run id"):
        store.step_memo(run_id, 0)
    with pytest.raises(InvalidId, match="run id"):
        store.run_memo(run_id)
    with pytest.raises(InvalidId, match="run id"):
        await store.clear_run(run_id)
    with pytest.raises(InvalidId, match="run id"):
        store.step_outputs_prefix(run_id)


@pytest.mark.parametrize("step", [-1, 2**64, True, 1.0, "1"])
def test_step_numbers_are_validated(store: MemoStore, step: Any) -> None:
    with pytest.raises(InvalidArgument, match="step number"):
        store.step_memo("run-1", step)


def test_step_number_bounds(store: MemoStore) -> None:
    assert store.step_memo("run-1", 2**64 - 1).step_number == 2**64 - 1
    assert store.step_memo("run-1", 0).step_number == 0
    assert store.run_memo("run-1").step_number is None
    assert store.run_memo("run-1").run_id == "run-1"


# ------------------------------------------------------------ reserved key


async def test_outcome_key_is_reserved_in_the_run_memo(store: MemoStore) -> None:
    memo = store.run_memo("run-1")
    compute = Counter("v")
    with pytest.raises(ReservedMemoKey, match=r"'workflow\.outcome' of run 'run-1'") as info:
        await memo.put(OUTCOME_KEY, "v")
    assert isinstance(info.value, ValueError)
    assert isinstance(info.value, EngineError)
    assert isinstance(info.value, DurableError)
    assert (info.value.key, info.value.run_id) == (OUTCOME_KEY, "run-1")
    with pytest.raises(ReservedMemoKey):
        await memo.memoized(OUTCOME_KEY, compute)
    assert compute.calls == 0
    assert await memo.get(OUTCOME_KEY) is None
    assert await store.get_outcome("run-1") is None


async def test_runtime_writes_and_reads_the_outcome(store: MemoStore) -> None:
    record = {"status": "Succeeded", "result": b"out", "final_step": 3}
    await store.put_outcome("run-1", record)
    assert await store.get_outcome("run-1") == record
    assert await store.run_memo("run-1").get(OUTCOME_KEY) == record
    assert await store.get_outcome("run-2") is None
    await store.put_outcome("run-1", {"status": "Failed"})
    assert await store.get_outcome("run-1") == {"status": "Failed"}
    with pytest.raises(TypeError):
        await store.put_outcome("run-1", {1, 2})


async def test_outcome_key_is_free_in_step_memos(store: MemoStore) -> None:
    await store.step_memo("run-1", 0).put(OUTCOME_KEY, "step value")
    assert await store.get_outcome("run-1") is None


async def test_corrupt_outcome_reads_as_absent(store: MemoStore, objects: ObjectStore) -> None:
    await objects.put(entry_name("run-1", None, OUTCOME_KEY), b"junk")
    with capture_logs() as logs:
        assert await store.get_outcome("run-1") is None
    assert [e["log_level"] for e in logs] == ["warning"]


# ---------------------------------------------------------------- clear_run


async def _populate(store: MemoStore, objects: ObjectStore, run_id: str) -> int:
    await store.step_memo(run_id, 0).put("a", 1)
    await store.step_memo(run_id, 1).put("a", 1)
    await store.step_memo(run_id, 1).content_put("in", 2)
    await store.run_memo(run_id).put("journal", [1])
    await store.put_outcome(run_id, {"status": "Succeeded"})
    await objects.put(store.step_outputs_prefix(run_id) + "00000000000000000001/abc", b"replay")
    return 6


async def test_clear_run_removes_both_scopes_and_replay_records(
    store: MemoStore, objects: ObjectStore
) -> None:
    n = await _populate(store, objects, "run-1")
    assert await store.clear_run("run-1") == n
    assert await objects.list(f"{PREFIX}/") == []
    assert await store.step_memo("run-1", 0).get("a") is None
    assert await store.get_outcome("run-1") is None
    assert await store.clear_run("run-1") == 0


async def test_clear_run_spares_runs_sharing_a_prefix(
    store: MemoStore, objects: ObjectStore
) -> None:
    for run_id in ("run-10", "run-1_x", "run-"):
        await _populate(store, objects, run_id)
    other = MemoStore(objects, "other")
    await _populate(other, objects, "run-1")
    before = await objects.list("")
    n = await _populate(store, objects, "run-1")

    assert await store.clear_run("run-1") == n
    assert await objects.list("") == before
    assert await store.step_memo("run-10", 0).get("a") == 1
    assert await store.get_outcome("run-10") == {"status": "Succeeded"}
    assert await other.get_outcome("run-1") == {"status": "Succeeded"}


async def test_clear_run_of_unknown_run(store: MemoStore) -> None:
    assert await store.clear_run("never-ran") == 0


async def test_clear_run_list_failure_propagates() -> None:
    faulty = FaultyObjectStore(MemoryObjectStore())
    store = MemoStore(faulty, PREFIX)
    await store.run_memo("run-1").put("k", 1)
    faulty.fail_next("list")
    with pytest.raises(ObjectStoreError):
        await store.clear_run("run-1")
    assert await store.run_memo("run-1").get("k") == 1


async def test_clear_run_delete_failures_are_logged_and_not_counted() -> None:
    faulty = FaultyObjectStore(MemoryObjectStore())
    store = MemoStore(faulty, PREFIX)
    await _populate(store, faulty, "run-1")
    faulty.fail_next("delete", count=2)  # the batch, then the first single delete
    with capture_logs() as logs:
        assert await store.clear_run("run-1") == 5
    assert [e["event"] for e in logs] == ["memo batch delete failed", "memo delete failed"]
    assert all(e["run_id"] == "run-1" for e in logs)
    assert len(await faulty.list(f"{PREFIX}/")) == 1
    assert await store.clear_run("run-1") == 1


# ------------------------------------------------------------------ restart


async def test_values_survive_a_new_store(make_objects: Factory) -> None:
    first = MemoStore(make_objects(), PREFIX)
    await first.step_memo("run-1", 5).put("k", {"v": b"1"})
    await first.run_memo("run-1").put("journal", ["a"])
    await first.step_memo("run-1", 5).content_put(Draft("d", b""), "by content")
    await first.put_outcome("run-1", {"status": "Succeeded"})

    again = MemoStore(make_objects(), PREFIX)  # as after a restart
    compute = Counter("never")
    assert await again.step_memo("run-1", 5).memoized("k", compute) == {"v": b"1"}
    assert await again.run_memo("run-1").get("journal") == ["a"]
    assert await again.step_memo("run-1", 5).content_get(Draft("d", b"")) == "by content"
    assert await again.get_outcome("run-1") == {"status": "Succeeded"}
    assert compute.calls == 0
    assert await again.clear_run("run-1") == 4


async def test_every_backend(location: StoreLocation) -> None:
    objects = await open_object_store(location.url, location.options)
    try:
        store = MemoStore(objects, PREFIX)
        memo = store.step_memo("run-1", 1)
        compute = Counter({"draft": b"text"})
        assert await memo.memoized("k" * 10_000, compute.run_async) == {"draft": b"text"}
        await memo.put("", None)
        await store.run_memo("run-1").put("journal", [1, 2])
        await store.step_memo("run-10", 1).put("k", "other run")
        await objects.put(entry_name("run-1", 1, "corrupt"), b"junk")
        with capture_logs():
            assert await memo.memoized("corrupt", Counter("fixed")) == "fixed"

        reopened = await open_object_store(location.url, location.options)
        try:
            memo2 = MemoStore(reopened, PREFIX).step_memo("run-1", 1)
            assert await memo2.memoized("k" * 10_000, compute) == {"draft": b"text"}
            assert compute.calls == 1
            assert await memo2.get("corrupt") == "fixed"
        finally:
            await reopened.close()

        assert await store.clear_run("run-1") == 4
        assert await store.step_memo("run-1", 1).get("corrupt") is None
        assert await store.step_memo("run-10", 1).get("k") == "other run"
    finally:
        await objects.close()


def test_public_names() -> None:
    import durable.engine

    assert durable.engine.Memo is Memo
    assert durable.engine.MemoStore is MemoStore
    assert {"Memo", "MemoStore"} <= set(durable.engine.__all__)
