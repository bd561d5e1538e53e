"""The journal (issue point 3): numbering at call time, replay without
re-running, recorded errors, non-determinism, unknown workflow names."""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

import msgpack
import pytest
from decorator_helpers import (
    Factory,
    failure_type,
    journal_names,
    journal_of,
    make_engine,
    result,
    wait_parked,
)

import durable
from durable.decorators.invocation import encode_invocation
from durable.decorators.journal import (
    CHILD,
    INLINE_MAX,
    STEP,
    Entry,
    decode_entry,
    encode_entry,
    entry_key,
)
from durable.decorators.registry import WorkflowDefinition
from durable.decorators.submit import submit_run
from durable.errors import CorruptEngineRecord
from durable.store.clock import MockClock

calls: Counter[str] = Counter()
events: dict[str, asyncio.Event] = {}
flags: dict[str, Any] = {}


@pytest.fixture(autouse=True)
def _fresh() -> None:
    calls.clear()
    events.clear()
    flags.clear()


def event(name: str) -> asyncio.Event:
    return events.setdefault(name, asyncio.Event())


# ------------------------------------------------------------------ workflows


@durable.step
async def slow(text: str) -> str:
    calls["slow"] += 1
    await event("fast-done").wait()  # finishes after `fast`, though called first
    return text + "-slow"


@durable.step
async def fast(text: str) -> str:
    calls["fast"] += 1
    event("fast-done").set()
    return text + "-fast"


@durable.workflow
async def gathered(text: str) -> list[str]:
    a, b = await asyncio.gather(slow(text), fast(text))
    return [a, b]


@durable.workflow
async def awaited_backwards(text: str) -> list[str]:
    first_called = slow(text)
    second_called = fast(text)
    b = await second_called  # awaited first: still position 1
    a = await first_called
    return [a, b]


@durable.step
async def count(name: str) -> str:
    calls[name] += 1
    return f"{name}#{calls[name]}"


class Refused(Exception):
    pass


@durable.step
async def refuse(why: str) -> str:
    calls["refuse"] += 1
    raise Refused(why)


@durable.workflow
async def replayed(key: str) -> dict[str, Any]:
    first = await count("a")
    try:
        await refuse("no stock")
    except Refused as e:
        error = (type(e).__name__, str(e))
    value = await durable.wait_for_signal(key)
    last = await count("c")
    return {"first": first, "error": error, "signal": value, "last": last}


@durable.step
async def step_a() -> str:
    calls["step_a"] += 1
    return "a"


@durable.step
async def step_b() -> str:
    calls["step_b"] += 1
    return "b"


@durable.workflow
async def changing(key: str) -> str:
    if flags.get("changed"):
        return await step_b()
    first = await step_a()
    await durable.wait_for_signal(key)
    return first


@durable.workflow
async def swallowing(key: str) -> str:
    try:
        return await changing_inner(key)
    except durable.NonDeterminismError:
        return "swallowed"


async def changing_inner(key: str) -> str:
    if flags.get("changed"):
        await step_b()
        return "b"
    await step_a()
    await durable.wait_for_signal(key)
    return "a"


@durable.step
async def big() -> bytes:
    calls["big"] += 1
    return b"x" * (INLINE_MAX * 3)


@durable.workflow
async def big_result(key: str) -> int:
    data = await big()
    await durable.wait_for_signal(key)
    return len(data)


# ---------------------------------------------------------------------- tests


async def test_gather_numbers_at_call_time_not_completion(
    make_objects: Factory, clock: MockClock
) -> None:
    async with make_engine(make_objects, clock) as engine:
        handle = await gathered.start("t")
        assert await result(handle) == ["t-slow", "t-fast"]
        # `fast` finished first, but `slow` was called first: position 0.
        assert await journal_names(engine, handle.run_id) == [
            (0, STEP, slow.name),
            (1, STEP, fast.name),
        ]


async def test_positions_follow_the_calls_not_the_awaits(
    make_objects: Factory, clock: MockClock
) -> None:
    async with make_engine(make_objects, clock) as engine:
        handle = await awaited_backwards.start("u")
        assert await result(handle) == ["u-slow", "u-fast"]
        assert await journal_names(engine, handle.run_id) == [
            (0, STEP, slow.name),
            (1, STEP, fast.name),
        ]


async def test_replay_returns_recorded_results_and_errors_without_running(
    make_objects: Factory, clock: MockClock
) -> None:
    async with make_engine(make_objects, clock) as engine:
        handle = await replayed.start("approve:1")
        await wait_parked(engine, handle.run_id)
        assert calls == {"a": 1, "refuse": 1}
        await engine.signal("approve:1", {"ok": True})
        out = await result(handle)
    # The second delivery replayed positions 0 and 1 from the journal.
    assert calls == {"a": 1, "refuse": 1, "c": 1}
    assert out == {
        "first": "a#1",
        "error": ("Refused", "no stock"),
        "signal": {"ok": True},
        "last": "c#1",
    }


async def test_a_different_step_at_a_journaled_position_fails_the_run(
    make_objects: Factory, clock: MockClock
) -> None:
    async with make_engine(make_objects, clock) as engine:
        handle = await changing.start("k1")
        await wait_parked(engine, handle.run_id)
        flags["changed"] = True  # "deploy" other code
        await engine.signal("k1", None)
        with pytest.raises(Exception) as caught:  # noqa: PT011 (type checked below)
            await result(handle)
    assert failure_type(caught.value) == "NonDeterminismError"
    message = str(caught.value)
    assert "position 0" in message
    assert repr(step_a.name) in message
    assert repr(step_b.name) in message
    assert calls == {"step_a": 1}  # step_b never ran


async def test_a_swallowed_non_determinism_still_fails_the_run(
    make_objects: Factory, clock: MockClock
) -> None:
    async with make_engine(make_objects, clock) as engine:
        handle = await swallowing.start("k2")
        await wait_parked(engine, handle.run_id)
        flags["changed"] = True
        await engine.signal("k2", None)
        with pytest.raises(Exception) as caught:  # noqa: PT011 (type checked below)
            await result(handle)
    assert failure_type(caught.value) == "NonDeterminismError"


async def test_a_run_of_an_unknown_workflow_fails_naming_the_module(
    make_objects: Factory, clock: MockClock
) -> None:
    async def nowhere() -> None:
        pass

    ghost = WorkflowDefinition("billing.tasks.invoice", nowhere, "workflows")
    async with make_engine(make_objects, clock) as engine:
        payload = encode_invocation(engine.codec, ghost.name, [], {})
        run_id = await submit_run(engine, ghost, payload, run_id="ghost-1")
        with pytest.raises(Exception) as caught:  # noqa: PT011 (type checked below)
            await result(engine.handle(run_id))
    assert failure_type(caught.value) == "UnknownWorkflow"
    assert "'billing.tasks'" in str(caught.value)
    assert "import the module" in str(caught.value)


async def test_large_results_go_to_the_run_memo_and_replay(
    make_objects: Factory, clock: MockClock
) -> None:
    async with make_engine(make_objects, clock) as engine:
        handle = await big_result.start("k3")
        await wait_parked(engine, handle.run_id)
        entry = (await journal_of(engine, handle.run_id)).get(0)
        assert entry is not None
        assert entry.ref
        assert entry.ok == b""
        await engine.signal("k3", None)
        assert await result(handle) == INLINE_MAX * 3
    assert calls == {"big": 1}


# --------------------------------------------------------------- the records


def test_entries_round_trip_with_named_fields() -> None:
    entry = Entry("shop.charge", STEP, ok=b"\x01", time=123, suspended=4)
    data = encode_entry(entry)
    assert decode_entry(data, "r1", 7) == entry
    fields = msgpack.unpackb(data)
    assert fields == {
        "v": 1,
        "name": "shop.charge",
        "kind": "step",
        "ok": b"\x01",
        "time": 123,
        "suspended": 4,
    }
    child = Entry("shop.ship", CHILD, key="r1-c2")
    assert decode_entry(encode_entry(child), "r1", 2) == child
    assert entry_key("r1", 7) == b"workflow/journal/r1/0000000007"


@pytest.mark.parametrize(
    "data",
    [
        b"\xc1",  # not msgpack
        msgpack.packb([1, 2]),
        msgpack.packb({"v": 1, "name": "x"}),  # no kind
        msgpack.packb({"v": 1, "name": "x", "kind": "dance"}),
        msgpack.packb({"v": 1, "name": "x", "kind": "step", "ok": "text"}),
        msgpack.packb({"v": 99, "name": "x", "kind": "step"}),
    ],
)
def test_an_undecodable_entry_names_the_run_and_position(data: bytes) -> None:
    with pytest.raises(CorruptEngineRecord) as caught:
        decode_entry(data, "order-42", 3)
    assert "journal entry 3 of run 'order-42'" in str(caught.value)
