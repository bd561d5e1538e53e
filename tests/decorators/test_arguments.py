"""Arguments are checked against the signature (issue 13, point 3).

Where a run starts (``start``, ``options(...).start``, ``await wf(...)``, a
child workflow call) or a job is submitted (``submit``, ``map``), arguments
that do not fit the function's signature raise `ArgumentMismatch` (a
`TypeError` and a `WorkflowError`) naming the function and the argument,
and nothing is written. A run (or job) whose stored arguments no longer fit
(the code changed while it was queued) fails at once with that error: the
clock never moves in these tests, so a retry after a backoff would hang
them instead.
"""

from __future__ import annotations

from collections import Counter

import pytest
from decorator_helpers import Factory, journal_names, make_engine, result

import durable
from durable.decorators.engine import Engine
from durable.decorators.invocation import encode_invocation
from durable.decorators.jobs.service import runner_for
from durable.decorators.journal import STEP
from durable.decorators.submit import submit_run
from durable.errors import ArgumentMismatch, WorkflowError
from durable.store.clock import MockClock

calls: Counter[str] = Counter()


@pytest.fixture(autouse=True)
def _fresh() -> None:
    calls.clear()


@durable.step(name="args.double")
async def double(x: int) -> int:
    calls["double"] += 1
    return 2 * x


@durable.workflow(name="args.checkout")
async def checkout(order: str, quantity: int = 1) -> str:
    calls["checkout"] += 1
    return f"{order} x{await double(quantity)}"


@durable.workflow(name="args.parent")
async def parent(bad: bool) -> str:
    try:
        if bad:
            return await checkout("o-1", bogus=2)  # type: ignore[call-arg]
        return await checkout("o-1")
    except TypeError as e:  # the workflow's own code is wrong: it may handle it
        return f"caught {type(e).__name__}: {e}; then {await double(5)}"


@durable.job(name="args.send")
async def send(to: str, subject: str = "hi") -> str:
    calls["send"] += 1
    return f"{subject} -> {to}"


def runs_in(engine: Engine) -> int:
    """How many jobs the store's workflow queue has seen (a started run adds one)."""
    seen = 0
    for part in engine.every_partition():
        stats = part.queue.stats("workflows")
        seen += stats.pending + stats.scheduled + stats.claimed + stats.done + stats.dead
    return seen


def check(error: ArgumentMismatch, name: str, detail: str) -> None:
    assert isinstance(error, TypeError)
    assert isinstance(error, WorkflowError)
    assert error.name == name
    assert detail in str(error)
    assert f"its signature is {name}(" in str(error)


async def test_start_with_arguments_that_do_not_fit_raises_and_starts_nothing(
    make_objects: Factory, clock: MockClock
) -> None:
    async with make_engine(make_objects, clock, concurrency={"workflows": 0}) as engine:
        with pytest.raises(ArgumentMismatch) as e:
            await checkout.start("o-1", bogus=2)  # type: ignore[call-arg]
        check(e.value, "args.checkout", "unexpected keyword argument 'bogus'")
        with pytest.raises(ArgumentMismatch) as e:
            await checkout.start()  # type: ignore[call-arg]
        check(e.value, "args.checkout", "missing a required argument: 'order'")
        with pytest.raises(ArgumentMismatch) as e:
            await checkout.options(run_id="r-1").start("o-1", 2, 3)  # type: ignore[call-arg]
        check(e.value, "args.checkout", "too many positional arguments")
        with pytest.raises(ArgumentMismatch) as e:
            await checkout(quantity=3)  # type: ignore[call-arg]
        check(e.value, "args.checkout", "missing a required argument: 'order'")
        assert runs_in(engine) == 0
        assert await engine.handle("r-1").status() is None
        await checkout.start("o-1", quantity=2)  # arguments that fit start a run
        assert runs_in(engine) == 1


async def test_the_call_fails_before_it_needs_an_engine() -> None:
    with pytest.raises(ArgumentMismatch, match=r"args\.checkout"):
        await checkout.start(order="o", extra=1)  # type: ignore[call-arg]


async def test_a_child_call_that_does_not_fit_raises_in_the_parent(
    make_objects: Factory, clock: MockClock
) -> None:
    async with make_engine(make_objects, clock) as engine:
        handle = await parent.start(True)
        out = await result(handle)
        assert out.startswith("caught ArgumentMismatch: workflow 'args.checkout' cannot be")
        assert "unexpected keyword argument 'bogus'" in out
        assert out.endswith("then 10")
        # No child started, and the failed call took no journal position.
        assert await journal_names(engine, handle.run_id) == [(0, STEP, "args.double")]
        assert calls == {"double": 1}
        assert await engine.handle(f"{handle.run_id}-c0").status() is None
        assert await result(await parent.start(False)) == "o-1 x2"


async def test_a_run_whose_stored_arguments_no_longer_fit_fails_at_once(
    make_objects: Factory, clock: MockClock
) -> None:
    async with make_engine(make_objects, clock) as engine:
        # Submitted as an older version of the code would have: its call
        # had another keyword argument.
        payload = encode_invocation(engine.codec, checkout.name, ["o-7"], {"coupon": "X"})
        run_id = await submit_run(engine, checkout.definition, payload)
        with pytest.raises(ArgumentMismatch) as e:
            await result(engine.handle(run_id))
    assert e.value.run_id == run_id
    message = str(e.value)
    assert f"run {run_id!r}: its stored arguments no longer fit workflow 'args.checkout'" in (
        message
    )
    assert "unexpected keyword argument 'coupon'" in message
    assert "the code changed after the run was started" in message
    assert calls == {}  # the workflow never ran


async def test_job_submissions_that_do_not_fit_raise_argument_mismatch(
    make_objects: Factory, clock: MockClock
) -> None:
    async with make_engine(make_objects, clock):
        with pytest.raises(ArgumentMismatch) as e:
            send.submit("a@b.c", body="x")  # type: ignore[call-arg,unused-coroutine]
        assert e.value.kind == "job"
        check(e.value, "args.send", "unexpected keyword argument 'body'")
        with pytest.raises(ArgumentMismatch, match="too many positional arguments"):
            await send.map([("a", "b", "c")])
    assert calls == {}


async def test_a_job_whose_stored_arguments_no_longer_fit_fails_at_once(
    make_objects: Factory, clock: MockClock
) -> None:
    async with make_engine(make_objects, clock) as engine:
        job_id = engine.new_run_id()  # routes it (the engine's id, as a submit mints it)
        runner = runner_for(engine.for_run(job_id), send.job_type)
        call = encode_invocation(engine.codec, send.name, [], {"address": "a@b.c"}, kind="job")
        submitted = await runner.submit(send.job_type(call), job_id=job_id)
        with pytest.raises(ArgumentMismatch) as e:
            await result(send.handle(submitted.id))
    assert e.value.run_id == submitted.id
    assert "its stored arguments no longer fit job 'args.send'" in str(e.value)
    assert "missing a required argument: 'to'" in str(e.value)
    assert calls == {}
