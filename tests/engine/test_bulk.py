"""Bulk runs at their public API: one pipeline over many inputs on a run group.

Counts and outputs, permanent and exhausted transient failures, the failure
threshold, resuming a batch (only failed items run again, memoized stages
are read back), cost rollup with cached costs, progress figures on a
`MockClock`, JSONL in and out, duplicate results, a shutdown and a restart
in the middle. Restarts close the queue and open the same store again.
"""

from __future__ import annotations

import asyncio
import base64
import json
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgpack
import pytest
from engine_helpers import HOUR, Factory

from durable.engine import (
    RunSpec,
    RunTermination,
    StepError,
    StepErrorKind,
    TerminalStatus,
    Terminated,
)
from durable.engine.bulk import (
    DEFAULT_BULK_MEMO_PREFIX,
    DEFAULT_BULK_QUEUE,
    Bulk,
    BulkContext,
    BulkOptions,
    BulkReport,
    CostReport,
    InvalidItem,
    JsonlSink,
    NullSink,
    OutputRecord,
    batch_group_id,
    read_jsonl,
)
from durable.engine.bulk.codec import decode_item, decode_result, encode_item, encode_result
from durable.engine.bulk.progress import NO_OUTPUT, BulkTally
from durable.engine.delivery import Step
from durable.engine.groups import GroupMember, MemberResult, RunGroup, member_run_id
from durable.engine.memo import MemoStore
from durable.errors import (
    BulkFailureThreshold,
    CorruptEngineRecord,
    DuplicateMemberKey,
    EngineError,
    GroupMismatch,
    InvalidArgument,
    InvalidId,
    ObjectStoreError,
    ReservedHeader,
    StoreClosed,
)
from durable.store.clock import MockClock
from durable.store.objects import MemoryObjectStore
from durable.store.objects.faults import FaultyObjectStore
from durable.store.queue import OpenOptions, Queue, QueueConfig

Opener = Callable[..., Awaitable[Queue]]
Pipe = Callable[[BulkContext], Awaitable[Any]]


@pytest.fixture
async def open_queue(make_objects: Factory, clock: MockClock) -> AsyncIterator[Opener]:
    """Open a `Queue` on the test's store with the bulk queue configured
    (``config``: `QueueConfig` fields; no retry backoff unless given).
    Every call is a new handle on the same store (a restart)."""
    opened: list[Queue] = []

    async def _open(**config: Any) -> Queue:
        config.setdefault("retry_backoff_base", 0.0)
        q = await Queue.open(
            make_objects(),
            OpenOptions(
                clock=clock,
                reaper_interval=HOUR,
                scheduler_interval=HOUR,
                queue_configs={DEFAULT_BULK_QUEUE: QueueConfig(**config)},
            ),
        )
        opened.append(q)
        return q

    yield _open
    for q in reversed(opened):
        await q.close()


class ListSink:
    """A sink keeping its records in memory; `wait_for` waits until n are written."""

    def __init__(self) -> None:
        self.records: list[OutputRecord] = []
        self.flushes = 0
        self._changed = asyncio.Condition()

    async def write(self, record: OutputRecord) -> None:
        async with self._changed:
            self.records.append(record)
            self._changed.notify_all()

    async def flush(self) -> None:
        self.flushes += 1

    async def wait_for(self, count: int) -> None:
        async with self._changed:
            await asyncio.wait_for(self._changed.wait_for(lambda: len(self.records) >= count), 30)

    def by_key(self) -> dict[str, OutputRecord]:
        return {r.key: r for r in self.records}


class Arrivals:
    """Counts pipeline entries per key; `all` is set once ``expected`` keys entered."""

    def __init__(self, expected: int) -> None:
        self.keys: Counter[str] = Counter()
        self.expected = expected
        self.all = asyncio.Event()

    def arrive(self, key: str) -> None:
        self.keys[key] += 1
        if len(self.keys) >= self.expected:
            self.all.set()

    async def wait(self) -> None:
        await asyncio.wait_for(self.all.wait(), 30)


async def run(bulk: Bulk, inputs: Any, **kwargs: Any) -> BulkReport:
    """`Bulk.run`, bounded in wall time in case of a bug."""
    return await asyncio.wait_for(bulk.run(inputs, **kwargs), 30)


def numbers(n: int) -> list[dict[str, int]]:
    return [{"n": i} for i in range(n)]


def default_group_id(inputs: list[Any]) -> str:
    """The group a `Bulk` with default options derives for ``inputs``."""
    members = [GroupMember(f"item-{i}", encode_item(f"item-{i}", x)) for i, x in enumerate(inputs)]
    return batch_group_id(DEFAULT_BULK_QUEUE, DEFAULT_BULK_MEMO_PREFIX, members)


@dataclass
class Doc:
    title: str
    words: int
    tags: tuple[str, ...] = ()


# ------------------------------------------------------------------ success


async def test_every_item_runs_once_and_its_output_reaches_the_sink(open_queue: Opener) -> None:
    """Default keys item-{i}; run ids are the group members'; dataclass inputs
    arrive as maps of their fields; headers reach the context; the report and
    the last progress agree."""
    q = await open_queue()
    seen: list[tuple[str, Any, dict[str, str], int]] = []

    async def pipe(ctx: BulkContext) -> dict[str, Any]:
        seen.append((ctx.key, ctx.input, dict(ctx.headers), ctx.attempt))
        assert ctx.run_id == ctx.memo.run_id
        assert not ctx.cancel_token.is_cancelled()
        return {"title": ctx.input["title"].upper(), "words": ctx.input["words"] * 2}

    docs = [Doc("a", 1, ("x",)), Doc("b", 2), Doc("c", 3)]
    sink = ListSink()
    bulk = Bulk(q, pipe, BulkOptions(headers={"batch": "b1"})).output(sink)
    assert bulk.progress().total == 0
    report = await run(bulk, docs)

    assert (report.total, report.completed, report.succeeded) == (3, 3, 3)
    assert (report.failed, report.cancelled, report.skipped) == (0, 0, 0)
    assert report.failed_run_ids == report.failed_keys == ()
    assert report.group_id.startswith("bulk-")
    assert sorted(seen) == [
        ("item-0", {"title": "a", "words": 1, "tags": ["x"]}, {"batch": "b1"}, 1),
        ("item-1", {"title": "b", "words": 2, "tags": []}, {"batch": "b1"}, 1),
        ("item-2", {"title": "c", "words": 3, "tags": []}, {"batch": "b1"}, 1),
    ]
    records = sink.by_key()
    assert set(records) == {"item-0", "item-1", "item-2"}
    for key, record in records.items():
        assert record.run_id == member_run_id(report.group_id, key)
        assert record.status == "succeeded"
        assert record.error is None
    assert records["item-1"].output == {"title": "B", "words": 4}
    assert sink.flushes == 1
    progress = bulk.progress()
    assert (progress.total, progress.completed, progress.succeeded) == (3, 3, 3)
    assert progress.time_remaining is None
    group = bulk.group(report.group_id)
    assert (await group.status()).succeeded == 3
    assert bulk.runtime.options.queue_name == DEFAULT_BULK_QUEUE
    assert bulk.runtime.memos.prefix == DEFAULT_BULK_MEMO_PREFIX


async def test_inputs_may_be_an_async_iterable_and_keys_come_from_key_fn(
    open_queue: Opener,
) -> None:
    q = await open_queue()

    async def pipe(ctx: BulkContext) -> str:
        return f"{ctx.key}={ctx.input['id']}"

    async def produce() -> AsyncIterator[dict[str, str]]:
        for name in ("x", "y"):
            yield {"id": name}

    sink = ListSink()
    options = BulkOptions(key_fn=lambda i, item: f"doc-{item['id']}-{i}")
    report = await run(Bulk(q, pipe, options).output(sink), produce())
    assert report.succeeded == 2
    assert {r.key: r.output for r in sink.records} == {
        "doc-x-0": "doc-x-0=x",
        "doc-y-1": "doc-y-1=y",
    }


async def test_the_derived_group_id_depends_on_the_batch_and_an_empty_batch_does_nothing(
    open_queue: Opener,
) -> None:
    q = await open_queue()
    ran: list[str] = []

    async def pipe(ctx: BulkContext) -> None:
        ran.append(ctx.key)

    bulk = Bulk(q, pipe)
    first = await run(bulk, numbers(2))
    other = await run(bulk, numbers(3))  # another batch: another group, nothing skipped
    assert first.group_id != other.group_id
    assert (other.total, other.skipped, other.succeeded) == (3, 0, 3)
    assert sorted(ran) == ["item-0", "item-0", "item-1", "item-1", "item-2"]
    assert first.group_id == default_group_id(numbers(2))
    members = [GroupMember("item-0", encode_item("item-0", {"n": 0}))]
    assert batch_group_id("q1", "m", members) != batch_group_id("q2", "m", members)
    assert batch_group_id("q", "m1", members) != batch_group_id("q", "m2", members)
    before = dict(q.writer.state.scan())
    empty = await run(bulk, [])
    assert (empty.total, empty.completed) == (0, 0)
    assert dict(q.writer.state.scan()) == before


# ----------------------------------------------------------------- failures


class Flaky:
    """A pipeline object: ``perm`` items fail permanently, ``boom`` items raise a
    plain exception every time (transient, until the attempts run out)."""

    def __init__(self) -> None:
        self.attempts: Counter[str] = Counter()

    async def run(self, ctx: BulkContext) -> int:
        self.attempts[ctx.key] += 1
        kind = ctx.input["kind"]
        if kind == "perm":
            raise StepError.permanent(f"{ctx.key} is unprocessable")
        if kind == "boom":
            raise RuntimeError("upstream down")
        if kind == "durable":
            raise InvalidArgument("a permanent DurableError")
        return int(ctx.input["n"])


def kinds(*kinds: str) -> list[dict[str, Any]]:
    return [{"n": i, "kind": kind} for i, kind in enumerate(kinds)]


async def test_permanent_and_exhausted_transient_errors_fail_their_items(
    open_queue: Opener,
) -> None:
    q = await open_queue(max_attempts=3)
    flaky = Flaky()
    sink = ListSink()
    report = await run(
        Bulk(q, flaky).output(sink), kinds("ok", "boom", "ok", "perm", "durable", "ok")
    )
    assert (report.total, report.succeeded, report.failed) == (6, 3, 3)
    assert report.failed_keys == ("item-1", "item-3", "item-4")  # input order
    assert report.failed_run_ids == tuple(
        member_run_id(report.group_id, key) for key in report.failed_keys
    )
    # Transient: retried up to the queue's attempt limit; permanent: once.
    assert flaky.attempts == {
        "item-0": 1,
        "item-1": 3,
        "item-2": 1,
        "item-3": 1,
        "item-4": 1,
        "item-5": 1,
    }
    records = sink.by_key()
    assert records["item-1"].status == "failed"
    assert records["item-1"].error == "RuntimeError: upstream down"
    assert records["item-3"].error == "item-3 is unprocessable"
    assert records["item-3"].output is None
    assert "a permanent DurableError" in (records["item-4"].error or "")
    assert records["item-5"].output == 5
    group = bulk_group(q, report)
    kinds_of = {}
    for key in report.failed_keys:
        record = group.member_record(key)
        assert record is not None
        assert record.termination is not None
        kinds_of[key] = record.termination.error_kind
    assert kinds_of == {
        "item-1": StepErrorKind.TRANSIENT,
        "item-3": StepErrorKind.PERMANENT,
        "item-4": StepErrorKind.PERMANENT,
    }


def bulk_group(q: Queue, report: BulkReport) -> RunGroup:
    async def pipe(ctx: BulkContext) -> None:
        return None

    return Bulk(q, pipe).group(report.group_id)


@pytest.mark.parametrize(
    ("threshold", "raises"), [(None, False), (40.0, False), (39.9, True), (0, True)]
)
async def test_the_failure_threshold_is_checked_after_the_sink_is_flushed(
    open_queue: Opener, tmp_path: Path, threshold: float | None, raises: bool
) -> None:
    """2 of 5 failed = 40%: over the threshold only when it is below 40."""
    q = await open_queue(max_attempts=1)
    out = tmp_path / "out.jsonl"
    bulk = Bulk(q, Flaky(), BulkOptions(fail_threshold=threshold)).output(JsonlSink(out))
    inputs = kinds("ok", "perm", "ok", "boom", "ok")
    if not raises:
        report = await run(bulk, inputs)
    else:
        with pytest.raises(BulkFailureThreshold, match=r"2 of 5 items failed \(40\.0%\)") as exc:
            await run(bulk, inputs)
        assert isinstance(exc.value, EngineError)
        assert (exc.value.failed, exc.value.total, exc.value.threshold) == (2, 5, threshold)
        assert isinstance(exc.value.report, BulkReport)
        report = exc.value.report
    assert (report.failed, report.succeeded) == (2, 3)
    assert len(out.read_text().splitlines()) == 5  # flushed before the check


async def test_no_failure_passes_a_zero_threshold(open_queue: Opener) -> None:
    q = await open_queue()
    report = await run(Bulk(q, Flaky(), BulkOptions(fail_threshold=0)), kinds("ok", "ok"))
    assert report.succeeded == 2


# ------------------------------------------------------------------- resume


class Stages:
    """Two stages: ``extract`` memoized (counted), ``publish`` fails for the
    items in ``broken`` until they are removed from it."""

    def __init__(self, broken: set[int]) -> None:
        self.broken = broken
        self.extracted: Counter[str] = Counter()
        self.published: Counter[str] = Counter()

    async def run(self, ctx: BulkContext) -> dict[str, Any]:
        async def extract() -> int:
            self.extracted[ctx.key] += 1
            return int(ctx.input["n"]) * 10

        value = await ctx.memoized("extract", extract)
        if ctx.input["n"] in self.broken:
            raise StepError.permanent("publisher rejected it")
        self.published[ctx.key] += 1
        return {"value": value}


async def test_running_the_batch_again_reruns_only_failed_items_from_their_memos(
    open_queue: Opener,
) -> None:
    """After a restart: succeeded items are skipped (their records written
    again), failed ones run again and read their memoized stage back."""
    stages = Stages(broken={1, 3})
    q = await open_queue()
    first = await run(Bulk(q, stages), numbers(5))
    assert (first.succeeded, first.failed) == (3, 2)
    assert stages.extracted == dict.fromkeys(("item-0", "item-1", "item-2", "item-3", "item-4"), 1)
    await q.close()

    stages.broken.clear()  # fixed
    q = await open_queue()
    sink = ListSink()
    again = await run(Bulk(q, stages).output(sink), numbers(5))
    assert again.group_id == first.group_id
    assert (again.total, again.succeeded, again.failed, again.skipped) == (2, 2, 0, 3)
    assert stages.extracted == dict.fromkeys(stages.extracted, 1)  # nothing extracted twice
    assert stages.published == dict.fromkeys(stages.published, 1)  # nothing published twice
    assert set(stages.published) == {f"item-{i}" for i in range(5)}
    assert {r.key: r.output for r in sink.records} == {
        f"item-{i}": {"value": i * 10} for i in range(5)
    }

    third = await run(Bulk(q, stages), numbers(5))  # all done: nothing runs
    assert (third.total, third.completed, third.skipped) == (0, 0, 5)


async def test_an_explicit_group_id_refuses_another_batch(open_queue: Opener) -> None:
    q = await open_queue()
    bulk = Bulk(q, Stages(set()), BulkOptions(group_id="nightly"))
    report = await run(bulk, numbers(2))
    assert report.group_id == "nightly"
    with pytest.raises(GroupMismatch):
        await run(bulk, numbers(3))
    assert (await bulk.group("nightly").status()).total == 2


# --------------------------------------------------------------------- cost


async def test_cost_rolls_up_and_cached_costs_are_merged_on_hits(open_queue: Opener) -> None:
    """Every item fails its first attempt after its stages ran. The retry hits
    both memos: the cached cost is merged again, a cost recorded inside the
    plain memoized stage is not (it did not run); a failed attempt's cost is
    never reported."""
    q = await open_queue(max_attempts=2)
    calls: Counter[str] = Counter()

    async def pipe(ctx: BulkContext) -> int:
        async def llm() -> tuple[str, CostReport]:
            calls["llm"] += 1
            return f"summary of {ctx.key}", CostReport({"tokens": 100, "usd": 0.25})

        def lookup() -> tuple[int, CostReport]:  # sync compute functions are fine
            calls["lookup"] += 1
            return 7, CostReport({"lookups": 1})

        async def cheap() -> int:
            calls["cheap"] += 1
            ctx.record_cost("cheap_calls", 1)
            return 1

        summary = await ctx.memoized_with_cached_cost("summarize", llm)
        found = await ctx.memoized_by_content_with_cached_cost({"q": ctx.input["n"]}, lookup)
        await ctx.memoized("cheap", cheap)
        ctx.record_cost("attempts_reported", 1)
        if ctx.attempt == 1:
            raise StepError.transient("flaky network")
        assert summary == f"summary of {ctx.key}"
        return int(found)

    report = await run(Bulk(q, pipe), numbers(4))
    assert report.succeeded == 4
    assert calls == {"llm": 4, "lookup": 4, "cheap": 4}  # each computed once per item
    assert report.cost.entries() == [
        ("attempts_reported", 4.0),
        ("lookups", 4.0),
        ("tokens", 400.0),
        ("usd", 1.0),
    ]
    assert report.cost.get("cheap_calls") == 0.0  # recorded on the failed attempts only


def test_a_cost_report_is_named_counters_in_name_order() -> None:
    cost = CostReport()
    assert cost.get("x") == 0.0
    assert not cost
    cost.record("zeta", 1)
    cost.record("alpha", 2.5)
    cost.record("zeta", 0.5)
    assert cost.entries() == [("alpha", 2.5), ("zeta", 1.5)]
    other = CostReport({"beta": 1, "zeta": -1})
    cost.merge(other)
    assert cost.to_map() == {"alpha": 2.5, "beta": 1.0, "zeta": 0.5}
    assert list(cost.to_map()) == ["alpha", "beta", "zeta"]
    assert CostReport.from_map(cost.to_map()) == cost
    assert cost.copy() == cost
    assert cost.copy() is not cost
    assert repr(CostReport({"b": 1, "a": 2})) == "CostReport({'a': 2.0, 'b': 1.0})"
    for bad in (float("nan"), float("inf"), True, "1"):
        with pytest.raises(InvalidArgument):
            cost.record("x", bad)  # type: ignore[arg-type]
    for name in ("", 3):
        with pytest.raises(InvalidArgument):
            cost.record(name, 1)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgument):
        CostReport.from_map([("a", 1)])
    with pytest.raises(InvalidArgument):
        cost.merge({"a": 1})  # type: ignore[arg-type]


# ---------------------------------------------------------------- the memo


def detached_ctx(store: FaultyObjectStore, attempt: int = 1) -> BulkContext:
    step = Step.detached(memos=MemoStore(store, "m"), attempts=attempt)
    return BulkContext(step, "item-0", {"n": 1})


async def test_memo_failures_map_to_step_errors_by_kind() -> None:
    """A store failure is transient; a value that cannot be stored is permanent;
    a compute error propagates as itself and is not cached; an undecodable
    cached-cost entry is computed again."""
    store = FaultyObjectStore(MemoryObjectStore())
    ctx = detached_ctx(store)
    store.fail_next("get")
    with pytest.raises(StepError) as exc:
        await ctx.memoized("k", lambda: 1)
    assert exc.value.kind is StepErrorKind.TRANSIENT
    assert isinstance(exc.value.__cause__, ObjectStoreError)
    store.fail_next("put")
    with pytest.raises(StepError) as exc:
        await ctx.memoized("k", lambda: 1)
    assert exc.value.kind is StepErrorKind.TRANSIENT

    with pytest.raises(StepError) as exc:
        await ctx.memoized("k", lambda: object())
    assert exc.value.kind is StepErrorKind.PERMANENT
    assert "cannot be encoded" in exc.value.message
    with pytest.raises(StepError) as exc:
        await ctx.memoized_by_content(object(), lambda: 1)
    assert exc.value.kind is StepErrorKind.PERMANENT

    async def coro() -> int:
        return 1

    with pytest.raises(StepError, match="pass the function itself") as exc:
        await ctx.memoized("k", coro())  # type: ignore[arg-type]
    assert exc.value.kind is StepErrorKind.PERMANENT

    calls = 0

    async def failing() -> int:
        nonlocal calls
        calls += 1
        raise KeyError("missing")

    for _ in range(2):
        with pytest.raises(KeyError):
            await ctx.memoized("fails", failing)
    assert calls == 2  # not cached

    async def bad_shape() -> int:
        return 5

    with pytest.raises(StepError, match=r"must return \(value, CostReport\)") as exc:
        await ctx.memoized_with_cached_cost("shape", bad_shape)
    assert exc.value.kind is StepErrorKind.PERMANENT

    await ctx.memo.put("mixed", [1, 2])  # another kind of entry under the key
    value = await ctx.memoized_with_cached_cost("mixed", lambda: ((1, 2), CostReport({"c": 1})))
    assert value == [1, 2]  # decoded form, as a hit reads it
    again = detached_ctx(FaultyObjectStore(store.inner))
    assert await again.memoized_with_cached_cost("mixed", lambda: (0, CostReport())) == [1, 2]
    assert ctx.cost.to_map() == again.cost.to_map() == {"c": 1.0}


# ----------------------------------------------------------------- progress


async def test_progress_figures_follow_the_clock(open_queue: Opener, clock: MockClock) -> None:
    q = await open_queue()
    gates = {f"item-{i}": asyncio.Event() for i in range(4)}
    entered = Arrivals(4)

    async def pipe(ctx: BulkContext) -> int:
        entered.arrive(ctx.key)
        await gates[ctx.key].wait()
        return 1

    sink = ListSink()
    bulk = Bulk(q, pipe).output(sink)
    task = asyncio.ensure_future(run(bulk, numbers(4)))
    await entered.wait()
    start = bulk.progress()
    assert (start.completed, start.rate_per_sec, start.time_remaining) == (0, 0.0, None)

    gates["item-0"].set()
    gates["item-1"].set()
    await sink.wait_for(2)
    assert bulk.progress().rate_per_sec == 0.0  # no time has passed: rate unknown
    assert bulk.progress().time_remaining is None
    clock.advance(10)
    mid = bulk.progress()
    assert (mid.total, mid.completed, mid.succeeded) == (4, 2, 2)
    assert mid.elapsed == 10.0
    assert mid.rate_per_sec == 0.2
    assert mid.time_remaining == 10.0

    for gate in gates.values():
        gate.set()
    report = await task
    assert (report.completed, report.elapsed, report.rate_per_sec) == (4, 10.0, 0.4)
    assert report.time_remaining is None  # nothing remains


# ---------------------------------------------------------------------- IO


async def test_jsonl_in_and_out_with_a_bad_line_as_a_failed_item(
    open_queue: Opener, tmp_path: Path
) -> None:
    source = tmp_path / "in.jsonl"
    source.write_bytes(
        b'{"n": 1}\n'
        b"\n"
        b"   \n"
        b'{"n": 2, "blob": true}\n'
        b"{not json\n"
        b'{"n": "\xff"}\n'
        b'{"n": 3}'  # no final newline
    )
    items = [item async for item in read_jsonl(source)]
    assert items[0] == {"n": 1}
    assert items[1] == {"n": 2, "blob": True}
    assert isinstance(items[2], InvalidItem)
    assert items[2].line == 5
    assert items[2].reason.startswith("line 5: invalid JSON")
    assert isinstance(items[3], InvalidItem)
    assert items[3].line == 6
    assert "UTF-8" in items[3].reason
    assert items[4] == {"n": 3}

    q = await open_queue()
    ran: list[str] = []

    async def pipe(ctx: BulkContext) -> Any:
        ran.append(ctx.key)
        if ctx.input.get("blob"):
            return {b"raw": b"\x00\x01", "t": (1, 2)}
        return ctx.input["n"] * 2

    out = tmp_path / "out.jsonl"
    out.write_text("stale line from an earlier run\n")
    report = await run(Bulk(q, pipe).output(JsonlSink(out)), read_jsonl(source))
    assert (report.total, report.succeeded, report.failed) == (5, 3, 2)
    assert report.failed_keys == ("item-2", "item-3")
    assert sorted(ran) == ["item-0", "item-1", "item-4"]  # the pipeline never saw a bad line
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    by_key = {obj["key"]: obj for obj in lines}
    assert len(lines) == 5  # the stale line is gone: the first flush truncates
    assert by_key["item-0"] == {
        "run_id": member_run_id(report.group_id, "item-0"),
        "key": "item-0",
        "status": "succeeded",
        "output": 2,
    }
    raw = base64.b64encode(b"raw").decode()
    assert by_key["item-1"]["output"] == {raw: base64.b64encode(b"\x00\x01").decode(), "t": [1, 2]}
    assert by_key["item-2"]["status"] == "failed"
    assert by_key["item-2"]["error"].endswith(
        "line 5: invalid JSON: Expecting property name enclosed in double quotes (column 2)"
    )
    assert "output" not in by_key["item-2"]


async def test_a_jsonl_sink_appends_when_asked_and_buffers_until_flush(tmp_path: Path) -> None:
    out = tmp_path / "out.jsonl"
    out.write_text('{"old": 1}\n')
    sink = JsonlSink(out, append=True, buffer_records=2)
    await sink.write(OutputRecord("r1", "k1", "failed", error="x"))
    assert out.read_text() == '{"old": 1}\n'  # buffered
    await sink.write(OutputRecord("r2", "k2", "succeeded", output=None))  # buffer full
    await sink.write(OutputRecord("r3", "k3", "cancelled", error="stop"))
    lines = out.read_text().splitlines()
    assert len(lines) == 3
    await sink.flush()
    objs = [json.loads(line) for line in out.read_text().splitlines()]
    assert objs[1:] == [
        {"run_id": "r1", "key": "k1", "status": "failed", "error": "x"},
        {"run_id": "r2", "key": "k2", "status": "succeeded", "output": None},
        {"run_id": "r3", "key": "k3", "status": "cancelled", "error": "stop"},
    ]
    await NullSink().write(OutputRecord("r", "k", "succeeded"))
    await NullSink().flush()


async def test_read_jsonl_of_a_missing_file_raises(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        [item async for item in read_jsonl(tmp_path / "missing.jsonl")]


# ------------------------------------------------------ duplicates, stopping


async def test_a_result_seen_twice_is_counted_and_written_once(open_queue: Opener) -> None:
    """At least once: feeding every result of the finished batch to a tally
    twice counts each once, like the report; a second pass yields nothing."""
    q = await open_queue(max_attempts=1)
    report = await run(Bulk(q, Flaky()), kinds("ok", "perm", "ok"))
    group = bulk_group(q, report)
    tally = BulkTally(MockClock())
    members = await group.members()
    tally.begin(report.group_id, [(m.key, group.run_id(m.key)) for m in members], set())
    records = []
    for _ in range(2):
        async for result in group.results():
            records.append(tally.observe(result))
            assert tally.observe(result) is None
    written = [r for r in records if r is not None]
    assert len(written) == 3
    again = tally.report()
    assert (again.succeeded, again.failed, again.completed) == (2, 1, 3)
    assert again.failed_run_ids == report.failed_run_ids


async def test_a_succeeded_item_without_a_stored_result_is_reported_as_such() -> None:
    tally = BulkTally(MockClock())
    tally.begin("g", [("k", "r")], set())
    done = RunTermination(TerminalStatus.SUCCEEDED, 0, 1)
    record = tally.observe(MemberResult("k", "r", done, None))
    assert record == OutputRecord("r", "k", "succeeded", None, NO_OUTPUT)
    assert tally.progress().succeeded == 1


async def test_a_shutdown_stops_the_run_and_the_next_run_finishes_the_batch(
    open_queue: Opener,
) -> None:
    q = await open_queue()
    release = asyncio.Event()
    done: Counter[str] = Counter()

    async def pipe(ctx: BulkContext) -> int:
        if ctx.input["n"] >= 2:
            await release.wait()
        done[ctx.key] += 1
        return 0

    sink = ListSink()
    stop = asyncio.Event()
    bulk = Bulk(q, pipe, BulkOptions(max_concurrent=3)).output(sink)
    task = asyncio.ensure_future(run(bulk, numbers(5), shutdown=stop))
    await sink.wait_for(2)
    stop.set()
    await asyncio.sleep(0)
    release.set()  # the items in flight finish while the worker drains
    partial = await task
    assert (partial.total, partial.succeeded) == (5, 2)
    assert sink.flushes == 1
    rest = await run(bulk, numbers(5))
    assert rest.succeeded + rest.skipped == 5
    assert rest.total == 5 - rest.skipped
    assert done == dict.fromkeys(done, 1)
    assert len(done) == 5


async def test_a_restart_in_the_middle_completes_and_runs_no_succeeded_item_twice(
    open_queue: Opener,
) -> None:
    """The process dies (the run is cancelled, the queue closed) while slow
    items run. Reopened, the same batch completes: the items that succeeded
    before never run again, the interrupted ones run to the end."""
    q = await open_queue()
    never = asyncio.Event()
    succeeded: Counter[str] = Counter()
    started = Arrivals(8)

    def pipeline(block: bool) -> Pipe:
        async def pipe(ctx: BulkContext) -> int:
            started.arrive(ctx.key)
            if block and ctx.input["n"] >= 4:
                await never.wait()
            succeeded[ctx.key] += 1
            return int(ctx.input["n"])

        return pipe

    sink = ListSink()
    task = asyncio.ensure_future(run(Bulk(q, pipeline(True)).output(sink), numbers(8)))
    await sink.wait_for(4)
    await started.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await q.close()

    q = await open_queue()
    sink = ListSink()
    report = await run(Bulk(q, pipeline(False)).output(sink), numbers(8))
    assert (report.total, report.succeeded, report.skipped) == (4, 4, 4)
    assert succeeded == {f"item-{i}": 1 for i in range(8)}
    assert all(started.keys[f"item-{i}"] == 1 for i in range(4))
    assert {r.key: r.output for r in sink.records} == {f"item-{i}": i for i in range(8)}


async def test_a_queue_closed_under_a_run_fails_it_and_a_reopened_run_completes(
    open_queue: Opener,
) -> None:
    q = await open_queue()
    never = asyncio.Event()
    ran: Counter[str] = Counter()
    entered = Arrivals(3)

    def pipeline(block: bool) -> Pipe:
        async def pipe(ctx: BulkContext) -> None:
            entered.arrive(ctx.key)
            if block and ctx.key == "item-2":
                await never.wait()
            ran[ctx.key] += 1

        return pipe

    sink = ListSink()
    task = asyncio.ensure_future(run(Bulk(q, pipeline(True)).output(sink), numbers(3)))
    await sink.wait_for(2)
    await entered.wait()
    await q.close()
    with pytest.raises(StoreClosed):
        await task

    q = await open_queue()
    report = await run(Bulk(q, pipeline(False)), numbers(3))
    assert (report.total, report.succeeded, report.skipped) == (1, 1, 2)
    assert ran == {"item-0": 1, "item-1": 1, "item-2": 1}


async def test_a_cancelled_item_is_counted_as_cancelled(open_queue: Opener) -> None:
    q = await open_queue()

    async def pipe(ctx: BulkContext) -> int:
        if ctx.input["n"] == 1:
            await ctx.cancel_token.wait()
        return 0

    sink = ListSink()
    bulk = Bulk(q, pipe).output(sink)
    task = asyncio.ensure_future(run(bulk, numbers(3)))
    await sink.wait_for(2)
    assert await bulk.runtime.cancel(member_run_id(default_group_id(numbers(3)), "item-1"))
    report = await task
    assert (report.succeeded, report.cancelled, report.failed) == (2, 1, 0)
    assert report.completed == 3
    assert sink.by_key()["item-1"].status == "cancelled"


# ----------------------------------------------------------- stored formats


async def test_a_payload_that_is_not_a_bulk_item_fails_permanently(open_queue: Opener) -> None:
    q = await open_queue(max_attempts=3)
    ran: list[str] = []

    async def pipe(ctx: BulkContext) -> None:
        ran.append(ctx.key)

    bulk = Bulk(q, pipe)
    worker = bulk.runtime.spawn()
    try:
        for payload in (b"\xc1", msgpack.packb([1, 2]), msgpack.packb({"key": "k"})):
            out = await bulk.runtime.submit(RunSpec(payload))
            end = await asyncio.wait_for(bulk.runtime.wait(out.run_id), 30)
            assert end is not None
            assert end.termination.status is TerminalStatus.FAILED
            assert end.termination.error_kind is StepErrorKind.PERMANENT
            assert "cannot be decoded" in (end.termination.error or "")
    finally:
        await worker.shutdown()
    assert ran == []


async def test_an_output_that_cannot_be_stored_fails_its_item_permanently(
    open_queue: Opener,
) -> None:
    q = await open_queue(max_attempts=3)
    attempts = Counter[str]()

    class Sloppy:
        async def run(self, ctx: BulkContext) -> Any:
            attempts[ctx.key] += 1
            return {"value": object()}

    sink = ListSink()
    report = await run(Bulk(q, Sloppy()).output(sink), numbers(1))
    assert report.failed == 1
    assert attempts == {"item-0": 1}
    assert "cannot be stored" in (sink.records[0].error or "")


def test_items_and_results_are_msgpack_maps_with_sorted_keys() -> None:
    a = encode_item("k", {"b": 1, "a": Doc("t", 2)})
    b = encode_item("k", {"a": {"words": 2, "title": "t", "tags": []}, "b": 1})
    assert a == b  # equal inputs are equal bytes (what the group compares)
    assert msgpack.unpackb(a) == {
        "input": {"a": {"tags": [], "title": "t", "words": 2}, "b": 1},
        "key": "k",
    }
    item = decode_item(a, "r")
    assert (item.key, item.invalid) == ("k", None)
    bad = decode_item(encode_item("k", InvalidItem("broken", 3)), "r")
    assert bad.invalid == "broken"
    with pytest.raises(InvalidArgument, match="bulk item 'k'"):
        encode_item("k", {"x": object()})
    data = encode_result([1, (2, 3)], CostReport({"b": 1, "a": 2}))
    assert msgpack.unpackb(data) == {"output": [1, [2, 3]], "cost": {"a": 2.0, "b": 1.0}}
    assert decode_result(data, "r") == ([1, [2, 3]], CostReport({"a": 2, "b": 1}))
    for garbage in (b"\xc1", msgpack.packb({"cost": {}}), msgpack.packb({"output": 1, "cost": 3})):
        with pytest.raises(CorruptEngineRecord):
            decode_result(garbage, "r")
    with pytest.raises(TypeError):
        encode_result(object(), CostReport())


# --------------------------------------------------------------- bad input


async def test_bad_options_pipelines_and_inputs_are_rejected_before_anything_is_written(
    open_queue: Opener,
) -> None:
    for bad in (
        {"fail_threshold": 101},
        {"fail_threshold": -1},
        {"fail_threshold": True},
        {"fail_threshold": float("nan")},
        {"max_concurrent": 0},
        {"poll_interval": 0},
        {"key_fn": "item"},
        {"memo_prefix": "a//b"},
    ):
        with pytest.raises(InvalidArgument):
            BulkOptions(**bad)
    with pytest.raises(InvalidId):
        BulkOptions(group_id="has space")
    with pytest.raises(ReservedHeader):
        BulkOptions(headers={"workflow.x": "1"})

    q = await open_queue()

    def sync_pipe(ctx: BulkContext) -> int:
        return 1

    with pytest.raises(InvalidArgument, match="not async"):
        Bulk(q, sync_pipe)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgument, match="pass an instance"):
        Bulk(q, Flaky)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgument):
        Bulk(q, 42)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgument):
        Bulk(q, Flaky(), options={})  # type: ignore[arg-type]

    bulk = Bulk(q, Flaky())
    with pytest.raises(InvalidArgument):
        bulk.output(object())  # type: ignore[arg-type]
    before = dict(q.writer.state.scan())
    with pytest.raises(InvalidArgument, match="item-1"):
        await run(bulk, [{"kind": "ok", "n": 0}, {"x": {1, 2}}])
    with pytest.raises(InvalidArgument, match="iterable"):
        await run(bulk, "not a list of inputs")
    dup = Bulk(q, Flaky(), BulkOptions(key_fn=lambda i, item: "same"))
    with pytest.raises(DuplicateMemberKey):
        await run(dup, kinds("ok", "ok"))
    empty_key = Bulk(q, Flaky(), BulkOptions(key_fn=lambda i, item: ""))
    with pytest.raises(InvalidArgument, match="non-empty"):
        await run(empty_key, kinds("ok"))
    assert dict(q.writer.state.scan()) == before


async def test_one_run_at_a_time_and_a_sync_callable_object_fails_its_items(
    open_queue: Opener,
) -> None:
    q = await open_queue(max_attempts=3)
    release = asyncio.Event()
    entered = Arrivals(1)

    async def slow(ctx: BulkContext) -> None:
        entered.arrive(ctx.key)
        await release.wait()

    bulk = Bulk(q, slow)
    task = asyncio.ensure_future(run(bulk, numbers(1)))
    await entered.wait()
    with pytest.raises(InvalidArgument, match="already running"):
        await bulk.run(numbers(1))
    release.set()
    assert (await task).succeeded == 1

    async def process(ctx: BulkContext, factor: int) -> int:
        return int(ctx.input["n"]) * factor

    lambda_report = await run(Bulk(q, lambda ctx: process(ctx, 3)), [{"n": 5}])
    assert lambda_report.succeeded == 1

    class SyncCall:
        def __call__(self, ctx: BulkContext) -> int:
            return 1

    sink = ListSink()
    report = await run(Bulk(q, SyncCall()).output(sink), [{"n": 99}])  # type: ignore[arg-type]
    assert report.failed == 1
    assert "instead of an awaitable" in (sink.records[0].error or "")


async def test_cancelling_the_run_stops_the_worker_at_once(open_queue: Opener) -> None:
    q = await open_queue()
    entered = asyncio.Event()
    interrupted = asyncio.Event()

    async def stuck(ctx: BulkContext) -> None:
        entered.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            interrupted.set()
            raise

    bulk = Bulk(q, stuck)
    task = asyncio.ensure_future(bulk.run(numbers(1)))
    await asyncio.wait_for(entered.wait(), 30)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert interrupted.is_set()  # the step in flight was stopped, not waited for
    status = bulk.runtime.status(member_run_id(default_group_id(numbers(1)), "item-0"))
    assert status is not None
    assert not isinstance(status.state, Terminated)  # given up, as a crash would
