"""``@job`` on a real `Engine` (memory and local stores, a `MockClock`):
submission and results, failures re-raised with their type, retries and
timeouts, idempotency before and after completion and across a restart,
input mismatches, ``map`` and ``map_as_completed``, cancellation, the
rules inside a workflow, and the errors of decoration and of a missing
engine.

The job functions are defined once, at module level, as an application
would; they report to `BOARD` (reset for every test), and the tests hold
them on its gates to decide when each one ends."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

import pytest
from decorator_helpers import LIMIT, make_engine, promote_due, result, wait_parked

import durable.decorators.waits as waits
from durable.decorators.engine import Engine
from durable.decorators.jobs import JobHandle, job
from durable.decorators.jobs.registry import JOBS
from durable.decorators.workflow import workflow
from durable.engine.runs import TerminalStatus, Terminated
from durable.errors import (
    CodecError,
    DecoratorError,
    GroupMismatch,
    InputMismatch,
    InvalidArgument,
    JobNotFound,
    JobTypeError,
    NoEngine,
    RunCancelled,
)
from durable.store.clock import MockClock
from durable.store.objects.base import ObjectStore

Factory = Callable[[], ObjectStore]

# ------------------------------------------------------------------ the board


class Board:
    """What the jobs of one test did, and the gates that hold them."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, Any]] = []
        self._gates: dict[str, asyncio.Event] = {}
        self._started: dict[str, asyncio.Event] = {}

    def gate(self, key: str) -> asyncio.Event:
        """The event job ``wait_for(key)`` waits for."""
        return self._gates.setdefault(key, asyncio.Event())

    def started(self, key: str) -> asyncio.Event:
        """Set when ``wait_for(key)`` (or another job keyed ``key``) starts."""
        return self._started.setdefault(key, asyncio.Event())

    def open_gates(self) -> None:
        """Let every held job end."""
        for gate in self._gates.values():
            gate.set()

    def ran(self, name: str) -> list[Any]:
        """The arguments job ``name`` ran with, in order."""
        return [args for job_name, args in self.calls if job_name == name]


BOARD = Board()


@pytest.fixture(autouse=True)
def board() -> Board:
    """A fresh board for each test."""
    global BOARD
    BOARD = Board()
    return BOARD


@contextlib.asynccontextmanager
async def running(make_objects: Factory, clock: MockClock) -> AsyncIterator[Engine]:
    """An engine on the test's store; on the way out every gate opens, so a
    failed test leaves no job holding the engine's shutdown."""
    async with make_engine(make_objects, clock) as engine:
        try:
            yield engine
        finally:
            BOARD.open_gates()


async def started(key: str) -> None:
    await asyncio.wait_for(BOARD.started(key).wait(), LIMIT)


# ------------------------------------------------------------------- the jobs


@dataclass
class Receipt:
    order: str
    cents: int


class PaymentDeclined(Exception):
    """An application error with fields (rebuilt by the codec)."""

    def __init__(self, order: str, cents: int) -> None:
        super().__init__(order, cents)
        self.order = order
        self.cents = cents

    def __str__(self) -> str:
        return f"order {self.order}: {self.cents} cents declined"


@job
async def greet(name: str, punctuation: str = "!") -> str:
    BOARD.calls.append(("greet", name))
    return f"hello, {name}{punctuation}"


@job(name="tests.jobs.receipt")
async def receipt(order: str, cents: int) -> Receipt:
    BOARD.calls.append(("receipt", order))
    return Receipt(order, cents)


@job(max_attempts=1)
async def charge(order: str, cents: int) -> str:
    BOARD.calls.append(("charge", order))
    raise PaymentDeclined(order, cents)


@job(max_attempts=3)
async def flaky(key: str) -> str:
    BOARD.calls.append(("flaky", key))
    attempt = len(BOARD.ran("flaky"))
    if attempt == 1:
        BOARD.started(key).set()
        raise ConnectionError("connection reset")
    return f"{key}: ok at attempt {attempt}"


@job(max_attempts=3, retry_on=ConnectionError)
async def picky(kind: str) -> str:
    BOARD.calls.append(("picky", kind))
    raise ConnectionError(kind) if kind == "transient" else LookupError(kind)


@job
async def wait_for(key: str) -> str:
    BOARD.calls.append(("wait_for", key))
    BOARD.started(key).set()
    try:
        await BOARD.gate(key).wait()
    except asyncio.CancelledError:
        BOARD.calls.append(("cancelled", key))
        raise
    return key.upper()


@job(max_attempts=1, timeout=5.0)
async def slow(key: str) -> str:
    BOARD.calls.append(("slow", key))
    BOARD.started(key).set()
    await BOARD.gate(key).wait()
    return "too late"


@job
async def square(x: int) -> int:
    BOARD.calls.append(("square", x))
    return x * x


@job
async def echo(item: Any) -> Any:
    """One parameter: each map item is its argument, whatever it is."""
    return item


@job(max_attempts=1)
async def fail_on(x: int, bad: int) -> int:
    if x == bad:
        raise ValueError(f"{x} is bad")
    return x


@workflow(name="tests.jobs.notifier")
async def notifier(name: str) -> str:
    handle = await greet.submit(name)
    BOARD.calls.append(("submitted", handle.newly_submitted))
    await waits.sleep(60)
    return handle.job_id


@workflow(name="tests.jobs.waits_inline")
async def waits_inline(name: str) -> str:
    return await greet(name)


# -------------------------------------------------------------- submit/result


async def test_submit_returns_a_handle_on_the_result(
    make_objects: Factory, clock: MockClock
) -> None:
    """The result comes back decoded: plain data as is, a dataclass rebuilt."""
    async with running(make_objects, clock):
        handle = await greet.submit("ada")
        assert isinstance(handle, JobHandle)
        assert handle.newly_submitted
        assert handle.name == "test_jobs_decorator.greet"
        assert await result(handle) == "hello, ada!"
        status = await handle.status()
        assert status is not None
        assert isinstance(status.state, Terminated)
        assert status.state.termination.status is TerminalStatus.SUCCEEDED
        assert await result(await receipt.submit("o-1", cents=250)) == Receipt("o-1", 250)
        assert await asyncio.wait_for(greet("bob", punctuation="?"), LIMIT) == "hello, bob?"
        assert BOARD.ran("greet") == ["ada", "bob"]


async def test_a_handle_is_rebuilt_after_a_restart(make_objects: Factory, clock: MockClock) -> None:
    async with running(make_objects, clock):
        handle = await receipt.submit("o-2", 5)
        await result(handle)
    async with running(make_objects, clock):
        again = receipt.handle(handle.job_id)
        assert await result(again) == Receipt("o-2", 5)
        assert await again.status() is not None
        with pytest.raises(JobNotFound):
            await result(receipt.handle("no-such-job"))
    assert BOARD.ran("receipt") == ["o-2"]


async def test_a_failure_is_raised_again_with_its_type(
    make_objects: Factory, clock: MockClock
) -> None:
    async with running(make_objects, clock):
        handle = await charge.submit("o-3", 999)
        with pytest.raises(PaymentDeclined) as caught:
            await result(handle)
        assert (caught.value.order, caught.value.cents) == ("o-3", 999)
        assert str(caught.value) == "order o-3: 999 cents declined"
        status = await handle.status()
        assert status is not None
        assert isinstance(status.state, Terminated)
        assert status.state.termination.status is TerminalStatus.FAILED
    assert BOARD.ran("charge") == ["o-3"]  # max_attempts=1: no retry


async def test_only_errors_of_retry_on_are_retried(make_objects: Factory, clock: MockClock) -> None:
    """A LookupError is not in ``retry_on``: the job fails at its first attempt."""
    async with running(make_objects, clock):
        with pytest.raises(LookupError, match="permanent"):
            await result(await picky.submit("permanent"))
    assert BOARD.ran("picky") == ["permanent"]


async def test_retries_wait_the_queues_backoff_and_survive_a_restart(
    make_objects: Factory, clock: MockClock
) -> None:
    """The first attempt fails; the engine stops (the retry is scheduled, 1 s
    of backoff); a new engine on the same store runs the second attempt."""
    async with running(make_objects, clock):
        handle = await flaky.submit("k")
        await started("k")
    assert BOARD.ran("flaky") == ["k"]
    async with running(make_objects, clock) as engine:
        assert promote_due(engine) == 0  # not before the backoff
        clock.advance(1.0)
        promote_due(engine)
        assert await result(flaky.handle(handle.job_id)) == "k: ok at attempt 2"
    assert BOARD.ran("flaky") == ["k", "k"]


async def test_the_last_attempts_error_stands(make_objects: Factory, clock: MockClock) -> None:
    """``options(max_attempts=1)`` overrides the decorator's 3: the transient
    error of the only attempt is the job's."""
    async with running(make_objects, clock):
        handle = await flaky.options(max_attempts=1).submit("once")
        with pytest.raises(ConnectionError, match="connection reset"):
            await result(handle)
    assert BOARD.ran("flaky") == ["once"]


async def test_an_attempt_longer_than_the_timeout_fails(
    make_objects: Factory, clock: MockClock
) -> None:
    async with running(make_objects, clock):
        handle = await slow.submit("nap")
        await started("nap")  # the attempt's timer is set before the job's body runs on
        clock.advance(5.0)
        with pytest.raises(TimeoutError, match=r"did not finish within 5\.0 s"):
            await result(handle)


async def test_a_long_job_keeps_its_lease(make_objects: Factory, clock: MockClock) -> None:
    """Two minutes of the clock (the lease is 30 s) and the reaper never
    takes the job back: it runs once."""
    async with running(make_objects, clock):
        handle = await wait_for.submit("long")
        await started("long")
        idle = clock.sleepers
        for _ in range(12):
            clock.advance(10.0)
            await asyncio.wait_for(clock.wait_for_sleepers(idle), LIMIT)
        BOARD.gate("long").set()
        assert await result(handle) == "LONG"
    assert BOARD.ran("wait_for") == ["long"]


# ---------------------------------------------------------------- idempotency


async def test_a_key_collapses_duplicates_while_running_and_after(
    make_objects: Factory, clock: MockClock
) -> None:
    async with running(make_objects, clock):
        first = await wait_for.options(idempotency_key="welcome-42").submit("w")
        await started("w")
        during = await wait_for.options(idempotency_key="welcome-42").submit("w")
        assert (during.job_id, during.newly_submitted) == (first.job_id, False)
        assert first.job_id == hashlib.sha256(b"welcome-42").hexdigest()
        BOARD.gate("w").set()
        assert await result(first) == "W"
        done = await wait_for.options(idempotency_key="welcome-42").submit(key="w")
        assert (done.job_id, done.newly_submitted) == (first.job_id, False)
        assert await result(done) == "W"
    assert BOARD.ran("wait_for") == ["w"]


async def test_equal_calls_are_one_input_however_they_are_spelled(
    make_objects: Factory, clock: MockClock
) -> None:
    """Arguments are bound to the signature: positional, keyword or mixed is one job."""
    async with running(make_objects, clock):
        a = await greet.options(idempotency_key="g").submit("eve", "?")
        b = await greet.options(idempotency_key="g").submit(name="eve", punctuation="?")
        c = await greet.options(idempotency_key="g").submit("eve", punctuation="?")
        assert {a.job_id, b.job_id, c.job_id} == {a.job_id}
        assert [a.newly_submitted, b.newly_submitted, c.newly_submitted] == [True, False, False]
        assert await result(c) == "hello, eve?"
    assert BOARD.ran("greet") == ["eve"]


async def test_a_key_survives_an_engine_restart(make_objects: Factory, clock: MockClock) -> None:
    async with running(make_objects, clock):
        first = await greet.options(idempotency_key="once").submit("zed")
        assert await result(first) == "hello, zed!"
    async with running(make_objects, clock):
        again = await greet.options(idempotency_key="once").submit("zed")
        assert (again.job_id, again.newly_submitted) == (first.job_id, False)
        assert await result(again) == "hello, zed!"
    assert BOARD.ran("greet") == ["zed"]


async def test_a_key_with_other_arguments_is_an_input_mismatch(
    make_objects: Factory, clock: MockClock
) -> None:
    async with running(make_objects, clock):
        await wait_for.options(idempotency_key="k1").submit("one")
        await started("one")
        with pytest.raises(InputMismatch):  # while it runs
            await wait_for.options(idempotency_key="k1").submit("two")
        BOARD.gate("one").set()
        await result(await greet.options(idempotency_key="k2").submit("ann"))
        with pytest.raises(InputMismatch):  # after it ended
            await greet.options(idempotency_key="k2").submit("ann", "?")
        with pytest.raises(InputMismatch):  # another job under the key
            await square.options(idempotency_key="k2").submit(3)
    assert BOARD.ran("wait_for") == ["one"]


# ------------------------------------------------------------------------ map


async def test_map_returns_results_in_item_order(make_objects: Factory, clock: MockClock) -> None:
    """The jobs end in reverse order; the results are in item order."""
    async with running(make_objects, clock):
        mapped = asyncio.create_task(wait_for.map(["a", "b", "c"]))
        for key in "abc":
            await started(key)
        for key in "cba":
            BOARD.gate(key).set()
        assert await asyncio.wait_for(mapped, LIMIT) == ["A", "B", "C"]
        assert await asyncio.wait_for(square.map([]), LIMIT) == []


async def test_map_as_completed_yields_each_result_as_it_ends(
    make_objects: Factory, clock: MockClock
) -> None:
    async with running(make_objects, clock):
        stream = wait_for.map_as_completed(["a", "b", "c"])
        seen = []
        for key in "cab":
            BOARD.gate(key).set()
            seen.append(await asyncio.wait_for(anext(stream), LIMIT))
        assert seen == [(2, "C"), (0, "A"), (1, "B")]
        with pytest.raises(StopAsyncIteration):
            await asyncio.wait_for(anext(stream), LIMIT)


async def test_map_raises_a_failure_or_returns_it_in_place(
    make_objects: Factory, clock: MockClock
) -> None:
    async with running(make_objects, clock):
        with pytest.raises(ValueError, match="1 is bad"):
            await asyncio.wait_for(fail_on.map([(0, 1), (1, 1), (2, 1)]), LIMIT)
        results = await asyncio.wait_for(
            fail_on.map([(0, 1), (1, 1), (2, 1)], return_exceptions=True), LIMIT
        )
        assert [r if isinstance(r, int) else type(r).__name__ for r in results] == [
            0,
            "ValueError",
            2,
        ]
        pairs = [p async for p in fail_on.map_as_completed([(5, 5)], return_exceptions=True)]
        assert [(i, type(e)) for i, e in pairs] == [(0, ValueError)]


async def test_map_items_follow_the_documented_rule(
    make_objects: Factory, clock: MockClock
) -> None:
    """One parameter: the item itself (a tuple or a dict too); several: a
    tuple is positional, a dict keyword arguments; anything else is refused."""
    async with running(make_objects, clock):
        items = [(1, 2), {"k": "v"}, "plain"]
        assert await asyncio.wait_for(echo.map(items), LIMIT) == items
        greetings = await asyncio.wait_for(
            greet.map([("ann",), {"name": "bo", "punctuation": "?"}, ("cy", ".")]), LIMIT
        )
        assert greetings == ["hello, ann!", "hello, bo?", "hello, cy."]
        with pytest.raises(TypeError, match="map item 1 is a str"):
            await greet.map([("ok",), "not a tuple"])
        with pytest.raises(TypeError, match=r"job 'test_jobs_decorator\.greet'"):
            await greet.map([("too", "many", "args")])


async def test_a_keyed_map_runs_each_item_once(make_objects: Factory, clock: MockClock) -> None:
    """A map under an idempotency key finds its group again, after a restart
    too; other items under the key are refused."""
    async with running(make_objects, clock):
        batch = square.options(idempotency_key="batch-1")
        assert await asyncio.wait_for(batch.map([1, 2, 3]), LIMIT) == [1, 4, 9]
    async with running(make_objects, clock):
        assert await asyncio.wait_for(batch.map([1, 2, 3]), LIMIT) == [1, 4, 9]
        with pytest.raises(GroupMismatch):
            await batch.map([1, 2, 4])
        named = await asyncio.wait_for(square.map([5, 6], keys=["five", "six"]), LIMIT)
        assert named == [25, 36]
        with pytest.raises(InvalidArgument, match="2 items but 1 keys"):
            await square.map([5, 6], keys=["five"])
    assert sorted(BOARD.ran("square")) == [1, 2, 3, 5, 6]


# --------------------------------------------------------------- cancellation


async def test_cancelling_a_running_job_cancels_its_task(
    make_objects: Factory, clock: MockClock
) -> None:
    async with running(make_objects, clock):
        handle = await wait_for.submit("c")
        await started("c")
        assert await handle.cancel()
        with pytest.raises(RunCancelled):
            await result(handle)
        assert not await handle.cancel()  # already over
    assert BOARD.calls == [("wait_for", "c"), ("cancelled", "c")]


async def test_cancelling_a_waiting_job_ends_it_unrun(
    make_objects: Factory, clock: MockClock
) -> None:
    async with running(make_objects, clock):
        handle = await wait_for.options(run_at=clock.now_ms() + 3_600_000).submit("later")
        assert await handle.cancel()
        with pytest.raises(RunCancelled):
            await result(handle)
    assert BOARD.calls == []


# ----------------------------------------------------------- inside workflows


async def test_a_workflow_submits_a_job_once_across_its_replays(
    make_objects: Factory, clock: MockClock
) -> None:
    """The submission replays after the durable sleep and finds the same job."""
    async with running(make_objects, clock) as engine:
        run = await notifier.start("wf")
        await wait_parked(engine, run.run_id)
        clock.advance(60)
        job_id = await result(run)
        assert await result(greet.handle(job_id)) == "hello, wf!"
    assert BOARD.ran("submitted") == [True, False]
    assert BOARD.ran("greet") == ["wf"]


async def test_waiting_for_a_job_inside_a_workflow_is_refused(
    make_objects: Factory, clock: MockClock
) -> None:
    async with running(make_objects, clock):
        with pytest.raises(DecoratorError, match="call the work as a @step"):
            await result(await waits_inline.start("x"))
    assert BOARD.ran("greet") == []


# --------------------------------------------------------------------- errors


async def test_decoration_errors_say_the_fix() -> None:
    with pytest.raises(DecoratorError, match="decorates a function, got 42"):
        job(42)  # type: ignore[call-overload]
    with pytest.raises(DecoratorError, match=r"write @job\(name='x'\)"):
        job("x")  # type: ignore[call-overload]
    with pytest.raises(DecoratorError, match="max_attempts"):
        job(max_attempts=0)
    with pytest.raises(DecoratorError, match="retry_on"):
        job(retry_on=(KeyboardInterrupt,))  # type: ignore[arg-type]
    with pytest.raises(DecoratorError, match="timeout"):
        job(timeout=-1)
    with pytest.raises(DecoratorError, match="where workflows run"):
        job(queue="workflows")(greet.fn)

    async def first() -> None: ...
    async def second() -> None: ...

    job(name="tests.jobs.taken")(first)
    job(name="tests.jobs.taken")(first)  # the same function again: replaced
    with pytest.raises(DecoratorError, match=r"already used by .*first"):
        job(name="tests.jobs.taken")(second)
    assert JOBS.get("tests.jobs.taken") is not None


async def test_no_engine_no_jobs() -> None:
    with pytest.raises(NoEngine, match=r"submitting job 'test_jobs_decorator\.greet'"):
        await greet.submit("x")
    with pytest.raises(NoEngine):
        await greet("x")
    with pytest.raises(NoEngine):
        await square.map([1])
    with pytest.raises(NoEngine):
        square.handle("some-job")
    with pytest.raises(TypeError, match="missing a required argument"):
        greet.submit()  # type: ignore[call-arg,unused-coroutine]


async def test_a_job_decorated_after_the_engine_started_is_refused(
    make_objects: Factory, clock: MockClock
) -> None:
    async with running(make_objects, clock):

        @job(name="tests.jobs.late")
        async def late() -> None: ...

        try:
            with pytest.raises(JobTypeError, match="import the module that defines it"):
                await late.submit()
        finally:
            JOBS.unregister(late.name)


# ----------------------------------------------------------------- concurrency


async def test_a_job_queues_concurrency_sizes_its_job_workers(
    make_objects: Factory, clock: MockClock
) -> None:
    """``concurrency={"jobs": 1}`` caps the job workers (and starts no workflow
    worker on the job queue, which would fail the job runs as unknown workflows)."""
    async with make_engine(make_objects, clock, concurrency={"jobs": 1}):
        first, second = await wait_for.submit("one"), await wait_for.submit("two")
        await asyncio.wait_for(BOARD.started("one").wait(), LIMIT)
        for _ in range(20):  # give a second worker every chance to start "two"
            await asyncio.sleep(0)
        assert not BOARD.started("two").is_set()
        BOARD.gate("one").set()
        assert await result(first) == "ONE"
        await asyncio.wait_for(BOARD.started("two").wait(), LIMIT)
        BOARD.gate("two").set()
        assert await result(second) == "TWO"


async def test_a_job_queue_with_concurrency_0_is_only_submitted_to(
    make_objects: Factory, clock: MockClock
) -> None:
    async with make_engine(make_objects, clock, concurrency={"jobs": 0}):
        handle = await greet.submit("eve")
        for _ in range(20):
            await asyncio.sleep(0)
        assert BOARD.ran("greet") == []  # this process runs no job of that queue
    async with make_engine(make_objects, clock):  # a process that runs them
        assert await result(greet.handle(handle.job_id)) == "hello, eve!"


async def test_a_strict_codec_names_the_jobs_argument(
    make_objects: Callable[[], ObjectStore], clock: MockClock
) -> None:
    async with make_engine(make_objects, clock, codec="msgpack"):
        with pytest.raises(CodecError, match=r"argument 0 of job tests\.jobs\.receipt"):
            await receipt.submit({"o-1"}, 5)  # type: ignore[arg-type]
