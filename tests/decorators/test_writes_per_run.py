"""Issue 20, point 2: durable writes per run, counted.

A durable write is one log group commit (one log object). From ``start()``
to a durable result, an n-step sequential workflow on a fresh engine with no
other work takes ``1 + n``: the start, then one commit per step, the last
step's entry riding with the run's terminal record (and, for a run this
process started, the job's claim riding with the first entry). The rule
behind it, also tested here: a step's entry is durable before the next
step's body starts (and before gathered steps' dependants), a pending entry
nobody awaits is flushed within `FLUSH_WITHIN`, and a failed entry write
stops the run before anything builds on it. `docs/guarantees.md` has the
table.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

import pytest
from decorator_helpers import LIMIT, PARTITIONS, Factory, make_engine

import durable
from durable.decorators import archive, journal
from durable.decorators.journal import entry_key
from durable.engine.keys import outcome_key, run_key
from durable.errors import ObjectNotFound
from durable.store.clock import MockClock
from durable.store.keyspace import user_key
from durable.store.log.loader import fetch_logs, load
from durable.store.objects import FaultyObjectStore, MemoryObjectStore
from durable.store.objects.base import ObjectStore

pytestmark = pytest.mark.skipif(
    PARTITIONS is not None, reason="counts the writes of one unpartitioned store"
)

seen: list[str] = []
gate: dict[str, asyncio.Event] = {}
#: Called by `probe`'s body: checks what is durable while a step body runs.
probes: list[Callable[[], object]] = []


@pytest.fixture(autouse=True)
def _fresh() -> None:
    seen.clear()
    gate.clear()
    probes.clear()


@durable.step(name="writes.noop")
async def noop(i: int) -> int:
    return i


@durable.workflow(name="writes.chain")
async def chain(steps: int) -> int:
    total = 0
    for i in range(steps):
        total += await noop(i)
    return total


@pytest.fixture
def unhurried(monkeypatch: pytest.MonkeyPatch) -> None:
    """The counts without the backstop's timing: on a loaded host the time
    between a step's end and the run's terminal record may exceed
    `FLUSH_WITHIN`, and the backstop then adds a write (tested below). No
    journal archive either (a run over `ARCHIVE_MIN_BYTES` of journal is
    archived after its result)."""
    monkeypatch.setattr(journal, "FLUSH_WITHIN", 30.0)
    monkeypatch.setattr(archive, "ARCHIVE_MIN_BYTES", 1 << 30)


async def _writes_of_one_run(engine: durable.Engine, steps: int) -> list[list[bytes]]:
    """Start one run of ``steps`` steps and await its result: the keys
    written by each log object made from the start to the result. (After
    one warm-up run: the worker then waits for work, as in a process that
    has been up a while, and claims the run after its start is written.)"""
    warm = await chain.options(run_id="warm-up").start(1)
    assert await asyncio.wait_for(warm.result(), LIMIT) == 0
    writer = engine.queue.writer
    await writer.flush()
    before = writer.seq
    handle = await chain.options(run_id="w").start(steps)
    assert await asyncio.wait_for(handle.result(), LIMIT) == sum(range(steps))
    logs = await fetch_logs(writer.objects, list(range(before + 1, writer.seq + 1)))
    return [[op for op in log.ops[::2] if op is not None] for log in logs]


@pytest.mark.parametrize("steps", [1, 10, 100])
async def test_an_n_step_run_takes_1_plus_n_writes(
    make_objects: Factory, clock: MockClock, steps: int, unhurried: None
) -> None:
    async with make_engine(make_objects, clock) as engine:
        writes = await _writes_of_one_run(engine, steps)
    assert len(writes) == 1 + steps
    assert user_key(run_key("w")) in writes[0]  # the start
    claimed = [i for i, keys in enumerate(writes) if any(b"claimed" in k for k in keys)]
    assert claimed[0] == 1  # the claim rides the first entry's write
    for position in range(steps):  # one entry per write after it
        assert user_key(entry_key("w", position)) in writes[1 + position]
    # The last entry rides with the terminal record: its durability implies the entry's.
    assert user_key(outcome_key("w")) in writes[-1]


async def test_a_one_step_run_takes_two_writes_on_a_segment_log(
    tmp_path: Path, clock: MockClock, unhurried: None
) -> None:
    async with durable.Engine(f"segments://{tmp_path / 'store'}", clock=clock) as engine:
        writes = await _writes_of_one_run(engine, 1)
    assert len(writes) == 2
    assert {user_key(entry_key("w", 0)), user_key(outcome_key("w"))} <= set(writes[1])


# ------------------------------------------------ durable before it is built on


def _durable_keys(objects: ObjectStore) -> Callable[[], object]:
    """A probe recording which journal entries of run ``d`` a fresh load of
    the store finds (only what is durable)."""

    async def check() -> None:
        loaded = await load(objects)
        found = [p for p in range(4) if loaded.state.get(user_key(entry_key("d", p))) is not None]
        seen.append(f"durable {found}")

    return check


@durable.step(name="writes.probe")
async def probe(i: int) -> int:
    for check in probes:
        await check()  # type: ignore[misc]
    return i


@durable.workflow(name="writes.sequence")
async def sequence() -> int:
    a = await noop(1)
    b = await probe(2)  # entry 0 is durable before this body runs
    return a + b


@durable.workflow(name="writes.gathered")
async def gathered() -> int:
    a, b = await asyncio.gather(noop(1), noop(2))
    return a + b + await probe(3)  # both gathered entries are durable first


async def test_an_entry_is_durable_before_the_next_step_body_starts(
    make_objects: Factory, clock: MockClock, unhurried: None
) -> None:
    probes.append(_durable_keys(make_objects()))
    async with make_engine(make_objects, clock):
        handle = await sequence.options(run_id="d").start()
        assert await asyncio.wait_for(handle.result(), LIMIT) == 3
    assert seen == ["durable [0]"]


async def test_gathered_entries_are_durable_before_a_step_after_the_gather(
    make_objects: Factory, clock: MockClock, unhurried: None
) -> None:
    probes.append(_durable_keys(make_objects()))
    async with make_engine(make_objects, clock):
        handle = await gathered.options(run_id="d").start()
        assert await asyncio.wait_for(handle.result(), LIMIT) == 6
    assert seen == ["durable [0, 1]"]


@durable.workflow(name="writes.lingers")
async def lingers() -> int:
    await noop(1)
    value = await noop(2)
    await gate["go"].wait()  # no durable operation: nothing awaits entry 1
    return value


async def test_an_entry_nobody_awaits_is_flushed_within_the_backstop(
    make_objects: Factory, clock: MockClock
) -> None:
    gate["go"] = asyncio.Event()
    async with make_engine(make_objects, clock) as engine:
        kv = engine.queue.kv.internal()
        written = kv.watch(entry_key("b", 1))  # resolves once a commit of it is durable
        handle = await lingers.options(run_id="b").start()
        try:
            await asyncio.wait_for(written, LIMIT)
        finally:
            gate["go"].set()
        assert await asyncio.wait_for(handle.result(), LIMIT) == 2


@durable.step(name="writes.breaks_the_store")
async def breaks_the_store() -> int:
    for check in probes:  # the next log object create fails: the writer stops
        check()
    return 1


@durable.step(name="writes.after")
async def after() -> int:
    seen.append("step 2 ran")
    return 2


@durable.workflow(name="writes.broken")
async def broken() -> int:
    return await breaks_the_store() + await after()


async def test_a_failed_entry_write_stops_the_run_before_the_next_step(clock: MockClock) -> None:
    objects = FaultyObjectStore(MemoryObjectStore())
    probes.append(lambda: objects.fail_next("create", ObjectNotFound("log/")))
    probes.append(probes.clear)  # once
    engine = durable.Engine(objects, clock=clock)
    async with engine:
        stopped = asyncio.Event()
        engine.queue.writer.add_stop_callback(lambda _error: stopped.set())
        await broken.options(run_id="f").start()
        await asyncio.wait_for(stopped.wait(), LIMIT)
    assert seen == []  # step 2 never ran on a step-1 result that was not durable
    loaded = await load(objects.inner)
    assert loaded.state.get(user_key(entry_key("f", 0))) is None
    assert loaded.state.get(user_key(outcome_key("f"))) is None


@durable.workflow(name="writes.naps")
async def naps() -> int:
    await durable.sleep(0)  # an awaited journal write (the wait's entry)
    await durable.sleep(0)
    return await noop(3)


async def test_an_awaited_journal_write_starts_its_flush_at_once(
    make_objects: Factory, clock: MockClock, unhurried: None
) -> None:
    """Only the entries nobody awaits wait for the backstop (here 30 s,
    beyond `LIMIT`): a wait's entry, awaited, is written at once."""
    async with make_engine(make_objects, clock):
        handle = await naps.options(run_id="n").start()
        assert await asyncio.wait_for(handle.result(), LIMIT) == 3
