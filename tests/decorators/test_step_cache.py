"""Step results cached across runs (issue 18 point 6):
``@step(cache_key=fn, cache_ttl=seconds)`` (``DURABLE_TEST_PARTITIONS=8``
runs these on 8 partitions: one engine owns them all, so hits are
store-wide)."""

from __future__ import annotations

import asyncio
from collections import Counter

import msgpack
import pytest
from decorator_helpers import (
    LIMIT,
    Factory,
    kv_count,
    make_engine,
    result,
    wait_parked,
)

import durable
from durable.decorators.journal import INLINE_MAX
from durable.decorators.step_cache import (
    CACHE_INDEX_PREFIX,
    CACHE_PREFIX,
    MEMO_RUN,
    SWEEP_MAX,
    record_key,
    sweep,
)
from durable.errors import DecoratorError
from durable.store.clock import MockClock

TTL = 60.0
ran: Counter[str] = Counter()
keyed: Counter[str] = Counter()
#: Set per test (an event belongs to the loop that first waits on it).
sync: dict[str, asyncio.Event] = {}


def price_key(sku: str, *, region: str = "eu") -> str:
    keyed[sku] += 1
    return f"{sku}@{region}"


@durable.step(name="cache.price", cache_key=price_key, cache_ttl=TTL)
async def price(sku: str, *, region: str = "eu") -> int:
    ran[sku] += 1
    if sku.startswith("fail"):
        raise ValueError(f"no price for {sku}")
    return len(sku) * 100 + ran[sku]  # tells runs of the body apart


@durable.workflow(name="cache.quote")
async def quote(sku: str) -> int:
    return await price(sku) + 1


@durable.workflow(name="cache.quote_then_wait")
async def quote_then_wait(sku: str) -> int:
    value = await price(sku)
    await durable.wait_for_signal(f"go-{sku}")
    return value


@durable.step(name="cache.blob", cache_key=lambda n: f"blob-{n}", cache_ttl=TTL)
def blob(n: int) -> bytes:  # a `def` body: runs in the engine's thread pool
    ran[f"blob-{n}"] += 1
    return bytes([ran[f"blob-{n}"]]) * (INLINE_MAX + n)


@durable.workflow(name="cache.blobs")
async def blobs(n: int) -> int:
    data = await blob(n)
    return data[0] * 1000 + len(data) - INLINE_MAX


@durable.step(name="cache.gated", cache_key=lambda k: k)
async def gated(k: str) -> str:
    ran[k] += 1
    if ran[k] == 2:
        sync["both_in"].set()
    await sync["gate"].wait()
    return f"{k}-{ran[k]}"


@durable.workflow(name="cache.gated_wf")
async def gated_wf(k: str) -> str:
    return await gated(k)


@durable.step(name="cache.bad_key", cache_key=lambda x: x, max_attempts=3)
async def bad_key(x: object) -> str:
    ran["bad"] += 1
    return "never"


@durable.workflow(name="cache.bad_key_wf")
async def bad_key_wf(x: int) -> str:
    return await bad_key(x)


def _raising(x: str) -> str:
    raise RuntimeError("no key today")


@durable.step(name="cache.raising_key", cache_key=_raising)
async def raising_key(x: str) -> str:
    ran["raising"] += 1
    return x


@durable.workflow(name="cache.raising_key_wf")
async def raising_key_wf(x: str) -> str:
    return await raising_key(x)


@pytest.fixture(autouse=True)
def _fresh() -> None:
    ran.clear()
    keyed.clear()
    sync.update(gate=asyncio.Event(), both_in=asyncio.Event())


async def test_a_later_run_reuses_the_result_and_journals_it(
    make_objects: Factory, clock: MockClock
) -> None:
    async with make_engine(make_objects, clock) as engine:
        first = await quote.start("apple")
        assert await result(first) == 502
        for _ in range(3):  # every later run: same key, no body
            assert await result(await quote.start("apple")) == 502
        assert ran["apple"] == 1
        assert keyed["apple"] == 4
        # A different key misses.
        assert await result(await quote.start("pear")) == 402
        assert ran["pear"] == 1
        # The reuse is journaled like a result: the run's status counts the step.
        later = await quote.start("apple")
        assert await result(later) == 502
        status = await later.status()
        assert status is not None
        assert status.steps == 1
        assert kv_count(engine, CACHE_PREFIX) == 2  # one record per key


async def test_expiry_on_the_engine_clock_runs_the_body_again(
    make_objects: Factory, clock: MockClock
) -> None:
    async with make_engine(make_objects, clock) as engine:
        first = await quote.start("kiwi")
        assert await result(first) == 402
        clock.advance(TTL - 1)
        assert await result(await quote.start("kiwi")) == 402
        assert ran["kiwi"] == 1
        clock.advance(1)  # exactly TTL after it was stored: expired
        again = await quote.start("kiwi")
        assert await result(again) == 403
        assert ran["kiwi"] == 2
        # The miss swept its partition's expired records: in one partition,
        # one record is left (the new one); partitioned, the old one waits for
        # a miss in its own partition when the runs landed apart.
        apart = engine.for_run(first.run_id) is not engine.for_run(again.run_id)
        assert kv_count(engine, CACHE_INDEX_PREFIX) == 1 + apart
        assert await result(await quote.start("kiwi")) == 403


async def test_errors_are_never_cached(make_objects: Factory, clock: MockClock) -> None:
    async with make_engine(make_objects, clock) as engine:
        for attempt in (1, 2):
            handle = await quote.start("fail-x")
            with pytest.raises(ValueError, match="no price for fail-x"):
                await result(handle)
            assert ran["fail-x"] == attempt
        assert kv_count(engine, CACHE_PREFIX) == 0


async def test_a_replay_answers_from_the_journal_after_the_entry_expired(
    make_objects: Factory, clock: MockClock
) -> None:
    async with make_engine(make_objects, clock) as engine:
        handle = await quote_then_wait.start("plum")
        await wait_parked(engine, handle.run_id)
        assert (ran["plum"], keyed["plum"]) == (1, 1)
        clock.advance(TTL * 2)  # the record expired, and a miss elsewhere sweeps it
        assert await result(await quote.start("plum")) == 403
        assert ran["plum"] == 2
        # The next delivery replays position 0: the journal answers (the
        # first body's value), the cache (now 402) and the key fn are not asked.
        await engine.signal("go-plum", "now")
        assert await result(handle) == 401
        assert (ran["plum"], keyed["plum"]) == (2, 2)


async def test_large_results_go_to_memo_objects_and_expire_with_their_record(
    make_objects: Factory, clock: MockClock
) -> None:
    async with make_engine(make_objects, clock) as engine:
        assert await result(await blobs.start(7)) == 1007
        assert await result(await blobs.start(7)) == 1007  # read back from the memo
        assert ran["blob-7"] == 1
        name = record_key("cache.blob", "blob-7")
        (holder,) = [p for p in engine.every_partition() if p.queue.kv.get(name) is not None]
        kv = holder.queue.kv
        raw = kv.get(name)
        assert raw is not None
        record = msgpack.unpackb(raw)
        assert "ok" not in record
        assert isinstance(record["ref"], str)
        memo = holder.workflows.default.memos.run_memo(MEMO_RUN)
        assert await memo.get(record["ref"]) is not None
        clock.advance(TTL)
        assert await sweep(holder, clock.now_ms()) == 1
        assert await memo.get(record["ref"]) is None  # the object went with it
        assert kv.get(record_key("cache.blob", "blob-7")) is None
        assert await result(await blobs.start(7)) == 2007  # a miss: the body again


async def test_two_runs_at_once_with_one_key_both_run_the_body(
    make_objects: Factory, clock: MockClock
) -> None:
    async with make_engine(make_objects, clock) as engine:
        a = await gated_wf.start("same")
        b = await gated_wf.start("same")
        await asyncio.wait_for(sync["both_in"].wait(), LIMIT)  # neither found a record
        sync["gate"].set()
        assert sorted([await result(a), await result(b)]) == ["same-2", "same-2"]
        assert ran["same"] == 2
        # The later commit's record (one per partition the runs landed in).
        apart = engine.for_run(a.run_id) is not engine.for_run(b.run_id)
        assert kv_count(engine, CACHE_PREFIX) == 1 + apart
        assert await result(await gated_wf.start("same")) == "same-2"
        assert ran["same"] == 2


async def test_a_bad_key_fails_the_step_permanently_naming_it(
    make_objects: Factory, clock: MockClock
) -> None:
    async with make_engine(make_objects, clock) as engine:
        handle = await bad_key_wf.start(5)
        with pytest.raises(durable.CacheKeyError, match=r"'cache.bad_key'.* not a str"):
            await result(handle)
        handle = await raising_key_wf.start("x")
        with pytest.raises(durable.CacheKeyError, match=r"'cache.raising_key'.*no key today"):
            await result(handle)
        assert ran["bad"] == ran["raising"] == 0  # no body, no retry
        assert kv_count(engine, CACHE_PREFIX) == 0


def test_bad_options_are_refused_at_decoration_naming_the_step() -> None:
    with pytest.raises(DecoratorError, match=r"'cache.t'.*cache_ttl=5 needs cache_key"):

        @durable.step(name="cache.t", cache_ttl=5)
        async def no_key() -> None: ...

    for ttl in (0, -1, float("inf"), True, "5"):
        with pytest.raises(DecoratorError, match=r"'cache.t'.*cache_ttl"):

            @durable.step(name="cache.t", cache_key=str, cache_ttl=ttl)  # type: ignore[arg-type]
            async def bad_ttl() -> None: ...

    with pytest.raises(DecoratorError, match="cache_key must be a function"):

        @durable.step(name="cache.t", cache_key="k")  # type: ignore[arg-type]
        async def not_callable() -> None: ...


async def test_a_client_engine_writes_no_cache(make_objects: Factory, clock: MockClock) -> None:
    async with (
        make_engine(make_objects, clock) as owner,
        make_engine(make_objects, clock, role="client") as client,
    ):
        assert not client.owner
        # Outside a workflow (a client runs no workflow) a step is a plain call.
        assert await price("fig") == 301
        assert await price("fig") == 302
        assert kv_count(owner, CACHE_PREFIX) == 0
        # Runs a client starts are run, and cached, by the owner.
        assert await asyncio.wait_for((await quote.start("fig")).result(), LIMIT) == 304
        assert await asyncio.wait_for((await quote.start("fig")).result(), LIMIT) == 304
        assert ran["fig"] == 3
        assert kv_count(owner, CACHE_PREFIX) == 1
        assert all(p.queue.kv.read_only for p in client.every_partition())


async def test_the_sweep_is_bounded(make_objects: Factory, clock: MockClock) -> None:
    async with make_engine(make_objects, clock) as engine:
        count = SWEEP_MAX + 5
        for i in range(count):
            assert await result(await quote.start(f"s{i}")) > 0
        clock.advance(TTL)
        removed = [await sweep(p, clock.now_ms()) for p in engine.every_partition()]
        # One partition: one bounded pass, then the rest; partitioned: each
        # partition holds fewer than the bound.
        more = [await sweep(p, clock.now_ms()) for p in engine.every_partition()]
        assert sum(removed) + sum(more) == count
        assert max(removed) <= SWEEP_MAX
        assert kv_count(engine, CACHE_PREFIX) == kv_count(engine, CACHE_INDEX_PREFIX) == 0
