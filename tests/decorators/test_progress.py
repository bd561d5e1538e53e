"""Crashes of a progressing run never fail it; a poison run ends (issue 13, point 2).

Every delivery of a workflow run is a claim of a queue job, and a claim
that dies with its process counts as an attempt. Here a "crash" is
`WorkflowQueues.abort` (the deliveries in flight keep their claims, as a
killed process leaves them; the next `Engine` requeues them at open). The
same with real processes and SIGKILL: tests/crash/test_progress_kill9.py.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest
from decorator_helpers import (
    LIMIT,
    Factory,
    abort_workflows,
    after_deferral,
    journal_of,
    make_engine,
    promote_due,
    result,
)

import durable
from durable.decorators.engine import Engine
from durable.decorators.journal import INLINE_MAX, STEP
from durable.decorators.progress import (
    DEFERRED,
    MAX_ATTEMPTS_WITHOUT_PROGRESS,
    MAX_DEFERRAL,
    Verdict,
    decode_mark,
    deferral,
    encode_mark,
    judge,
    progress_key,
)
from durable.errors import CorruptEngineRecord, InvalidArgument, RunStalled
from durable.store.clock import MockClock
from durable.store.queue import AttemptOutcome, HistoryEntry
from durable.testing import FaultyObjectStore

runs: Counter[str] = Counter()
arrived: dict[str, asyncio.Event] = {}


@pytest.fixture(autouse=True)
def _fresh() -> None:
    runs.clear()
    arrived.clear()


def arrival(key: str) -> asyncio.Event:
    return arrived.setdefault(key, asyncio.Event())


@durable.step(name="progress.tick")
async def tick(i: int) -> int:
    """Blocks on its first execution (a crash lands in it), returns on its second."""
    runs[f"tick {i}"] += 1
    if runs[f"tick {i}"] == 1:
        arrival(f"tick {i}").set()
        await asyncio.Event().wait()
    return i


@durable.workflow(name="progress.long")
async def long(n: int) -> int:
    return sum([await tick(i) for i in range(n)])


@durable.step(name="progress.prepare")
async def prepare() -> str:
    runs["prepare"] += 1
    return "ready"


@durable.step(name="progress.poison")
async def poison(ready: str) -> str:
    """Never finishes: each execution ends with a crash of its process."""
    runs["poison"] += 1
    arrival(f"poison {runs['poison']}").set()
    await asyncio.Event().wait()
    return ready


@durable.workflow(name="progress.poisoned")
async def poisoned() -> str:
    return await poison(await prepare())


@durable.step(name="progress.huge")
async def huge() -> bytes:
    """Its result goes to the run memo (one object put) before it is journaled."""
    runs["huge"] += 1
    arrival(f"huge {runs['huge']}").set()
    return b"x" * (INLINE_MAX + 1)


@durable.workflow(name="progress.unjournaled")
async def unjournaled() -> int:
    await prepare()
    return len(await huge())


@asynccontextmanager
async def crashing(
    make_objects: Factory, clock: MockClock, **options: int
) -> AsyncIterator[Engine]:
    """An engine whose process "dies" when the block ends: deliveries in
    flight keep their claims, requeued by the next engine at open."""
    async with make_engine(make_objects, clock, **options) as engine:
        yield engine
        await abort_workflows(engine)


async def arrive(key: str) -> None:
    await asyncio.wait_for(arrival(key).wait(), LIMIT)


def _ended(*how: tuple[int, AttemptOutcome, str | None]) -> list[HistoryEntry]:
    return [HistoryEntry(attempt, 0, outcome, error=error) for attempt, outcome, error in how]


CUT = AttemptOutcome.INTERRUPTED
RETRIED = AttemptOutcome.RETRIED


def test_attempts_without_progress_count_from_the_mark_of_this_step() -> None:
    assert judge(None, 0, 1, []) == Verdict(0, None)  # the first attempt
    # Attempt 1 was killed before it journaled anything: wait 1 s first.
    assert judge(None, 0, 2, _ended((1, CUT, None))) == Verdict(1, 1.0)
    # ... unless it journaled something (the mark names it).
    assert judge((0, 1), 0, 2, _ended((1, CUT, None))) == Verdict(0, None)
    # After the deferral it runs; a deferral is no attempt without progress.
    deferred = (2, RETRIED, f"{DEFERRED} run 'r' waits 1 s")
    assert judge(None, 0, 3, _ended((1, CUT, None), deferred)) == Verdict(1, None)
    history = _ended((1, CUT, None), deferred, (3, AttemptOutcome.LEASE_EXPIRED, None))
    assert judge(None, 0, 4, history) == Verdict(2, 2.0)
    # A transient error waited the queue's backoff already: it counts, no deferral.
    assert judge(None, 0, 2, _ended((1, RETRIED, "journal write failed"))) == Verdict(1, None)
    # A mark of another step (an earlier job of the run): this job counts afresh.
    assert judge((2, 7), 3, 3, _ended((1, CUT, None), (2, CUT, None))) == Verdict(2, 2.0)
    assert judge((0, 4), 0, 9, _ended(*((a, CUT, None) for a in range(1, 9)))) == Verdict(4, 8.0)
    assert [deferral(n) for n in (1, 2, 3, 9, 10, 1000)] == [1, 2, 4, 256, 300, 300]
    assert MAX_DEFERRAL == 300
    assert decode_mark(encode_mark(3, 41), "r") == (3, 41)
    for corrupt in (b"", b"\xc1", encode_mark(1, 2)[:-1], b"\x92\x01\xc3"):
        with pytest.raises(CorruptEngineRecord, match="the progress mark of run 'r'"):
            decode_mark(corrupt, "r")


async def test_a_run_that_progresses_survives_more_crashes_than_any_attempt_limit(
    make_objects: Factory, clock: MockClock
) -> None:
    """30 crashes (the queue's old limit was 25 claims; the bound without
    progress is 20), each after one more step was journaled: the run
    finishes, every step journaled once, each run once more only because it
    was in flight at a crash."""
    n = 30
    async with crashing(make_objects, clock) as engine:
        handle = await long.options(run_id="long").start(n)
        await arrive("tick 0")
    for i in range(1, n):
        async with crashing(make_objects, clock) as engine:
            if i == 1:  # the first attempt journaled nothing: the run waits 1 s
                await after_deferral(engine, handle.run_id, 1)
            await arrive(f"tick {i}")  # step i - 1 is journaled: progress
    async with make_engine(make_objects, clock) as engine:
        assert await result(engine.handle(handle.run_id)) == sum(range(n))
        journal = await journal_of(engine, handle.run_id)
    assert [(p, e.kind, e.name) for p, e in journal.entries()] == [
        (i, STEP, "progress.tick") for i in range(n)
    ]
    assert runs == {f"tick {i}": 2 for i in range(n)}


async def test_a_poison_run_fails_after_the_bound_without_progress(
    make_objects: Factory, clock: MockClock
) -> None:
    """Each delivery crashes the process at the same position: after the
    first (which journaled `prepare`), `MAX_ATTEMPTS_WITHOUT_PROGRESS` more
    crash there; the next delivery fails the run without running it again."""
    bound = MAX_ATTEMPTS_WITHOUT_PROGRESS
    for attempt in range(1, bound + 2):
        async with crashing(make_objects, clock) as engine:
            if attempt == 1:
                handle = await poisoned.options(run_id="poison").start()
            elif attempt > 2:  # the run waits before each attempt after the second
                await after_deferral(engine, "poison", attempt - 2)
            await arrive(f"poison {attempt}")
    async with make_engine(make_objects, clock) as engine:
        with pytest.raises(RunStalled) as e:
            await result(engine.handle(handle.run_id))
        kv = engine.for_run("poison").queue.kv.internal()
        assert kv.get(progress_key("poison")) is not None
    assert runs == {"prepare": 1, "poison": bound + 1}  # not a run more
    error = e.value
    assert (error.run_id, error.workflow, error.position, error.attempts) == (
        "poison",
        "progress.poisoned",
        1,
        bound,
    )
    assert "at journal position 1 (after progress.prepare)" in str(error)
    assert f"made no progress in {bound} attempts in a row" in str(error)


async def test_the_bound_is_an_engine_option(make_objects: Factory, clock: MockClock) -> None:
    for attempt in (1, 2, 3):
        async with crashing(make_objects, clock, max_attempts_without_progress=2) as engine:
            if attempt == 1:
                handle = await poisoned.options(run_id="poison").start()
            elif attempt == 3:
                await after_deferral(engine, "poison", 1)
            await arrive(f"poison {attempt}")
    async with make_engine(make_objects, clock, max_attempts_without_progress=2) as engine:
        with pytest.raises(RunStalled, match="no progress in 2 attempts"):
            await result(engine.handle(handle.run_id))
    for bad in (0, -1, 1.5, True, "3"):
        with pytest.raises(InvalidArgument, match="max_attempts_without_progress"):
            durable.Engine("memory://x", max_attempts_without_progress=bad)  # type: ignore[arg-type]


async def test_transient_delivery_errors_count_against_the_same_bound(
    make_objects: Factory, clock: MockClock
) -> None:
    """The journal write of `huge` fails (its memo object cannot be put): each
    attempt fails transiently and waits the queue's backoff; after the bound,
    the run fails with the last error, instead of retrying for ever."""

    def engine() -> tuple[Engine, FaultyObjectStore]:
        store = FaultyObjectStore(make_objects())
        return durable.Engine(store, clock=clock, max_attempts_without_progress=2), store

    first, store = engine()
    async with first:
        store.fail_next("put")
        handle = await unjournaled.start()
        await arrive("huge 1")
    for attempt in (2, 3):
        again, store = engine()
        async with again:
            store.fail_next("put")
            clock.advance(300)  # the queue's backoff (1 s, doubling) has passed
            promote_due(again)
            await arrive(f"huge {attempt}")
    last, store = engine()
    async with last:
        clock.advance(300)
        promote_due(last)
        with pytest.raises(RunStalled) as error:
            await result(last.handle(handle.run_id))
    assert runs == {"prepare": 1, "huge": 3}
    assert error.value.attempts == 2
    assert "could not be written" in (error.value.last_error or "")
