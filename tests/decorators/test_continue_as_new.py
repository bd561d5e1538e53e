"""``durable.continue_as_new`` (issue 19 point 3): a run that starts over
under its own id with new arguments, atomically; handles and buffered
signals carry over; the journal of an endless loop stays bounded.

On a `MockClock`, memory and local stores (``DURABLE_TEST_PARTITIONS=8``:
on 8 partitions)."""

from __future__ import annotations

import asyncio
import itertools
from collections import Counter
from typing import Any

import pytest
from decorator_helpers import LIMIT, Factory, journal_names, make_engine, result, wait_parked

import durable
from durable.decorators import continuation
from durable.decorators.archive import load_invocation
from durable.decorators.children import child_run_id
from durable.decorators.context import RunContext
from durable.decorators.continuation import ContinueAsNew
from durable.decorators.invocation import decode_invocation
from durable.decorators.journal import Journal, journal_prefix
from durable.engine.outcomes import Continue, Immediate
from durable.engine.replay import ReplayRecord, decode_replay, encode_replay
from durable.errors import ArgumentMismatch, CodecError, InvalidArgument, NotInWorkflow
from durable.store.clock import MockClock
from durable.store.kv import KvNamespace
from durable.store.log.writer import LogWriter
from durable.store.objects import MemoryObjectStore

calls: Counter[str] = Counter()
gates: dict[str, asyncio.Event] = {}
seen: dict[str, list[Any]] = {}


@pytest.fixture(autouse=True)
def _fresh() -> None:
    calls.clear()
    gates.clear()
    seen.clear()


@durable.step
async def add(total: int, n: int) -> int:
    calls[f"add {n}"] += 1
    return total + n


@durable.workflow
async def countdown(n: int, total: int = 0) -> int:
    total = await add(total, n)
    if n > 0:
        durable.continue_as_new(n - 1, total=total)
    return total


async def test_the_run_starts_over_and_its_handle_gets_the_last_result(
    make_objects: Factory, clock: MockClock
) -> None:
    async with make_engine(make_objects, clock) as engine:
        handle = await countdown.options(run_id="cd-1").start(5)
        assert await result(handle) == 5 + 4 + 3 + 2 + 1 + 0
        # Each incarnation ran its step once; the last journal holds its own only.
        assert calls == Counter({f"add {n}": 1 for n in range(6)})
        assert await journal_names(engine, "cd-1") == [(0, "step", add.name)]
        status = await handle.status()
        assert status is not None
        assert status.state == "succeeded"
        assert status.incarnation == 5
        [summary] = (await engine.runs()).runs
        assert (summary.run_id, summary.incarnation) == ("cd-1", 5)
        # The invocation record names the last incarnation's arguments.
        payload = await load_invocation(engine, "cd-1")
        assert payload is not None
        invocation = decode_invocation(payload, "cd-1")
        assert invocation.incarnation == 5
        assert invocation.decode_args(engine.codec, "cd-1") == ([0], {"total": 15})


async def test_starting_the_id_again_with_the_first_arguments_returns_the_run(
    make_objects: Factory, clock: MockClock
) -> None:
    async with make_engine(make_objects, clock):
        handle = await countdown.options(run_id="cd-2").start(3)
        assert await result(handle) == 6
        again = await countdown.options(run_id="cd-2").start(3)
        assert await result(again) == 6
        assert calls["add 3"] == 1


@durable.step
async def hold(name: str, i: int) -> int:
    """Let the test act while incarnation ``i`` runs this step."""
    calls[f"hold {i}"] += 1
    if i == 0:
        gates.setdefault(f"{name}:entered", asyncio.Event()).set()
        await gates.setdefault(name, asyncio.Event()).wait()
    return i


@durable.workflow
async def chat(name: str, i: int = 0) -> list[Any]:
    await hold(name, i)
    if i == 0:
        durable.continue_as_new(name, 1)
    message = await durable.wait_for_signal(f"{name}:msg", timeout=3600)
    return [i, message]


async def test_a_signal_sent_between_incarnations_is_taken_by_the_next(
    make_objects: Factory, clock: MockClock
) -> None:
    async with make_engine(make_objects, clock) as engine:
        gates["s1"] = asyncio.Event()
        handle = await chat.options(run_id="chat-1").start("s1")
        entered = gates.setdefault("s1:entered", asyncio.Event())
        await asyncio.wait_for(entered.wait(), LIMIT)  # the step body runs, held by its gate
        # Nobody waits on the key now: the signal is buffered...
        await engine.signal("s1:msg", "hello")
        gates["s1"].set()  # ...incarnation 0 continues as new, 1 waits on the key
        assert await result(handle) == [1, "hello"]
        status = await handle.status()
        assert status is not None
        assert status.incarnation == 1


@durable.step
async def continues_inside() -> str:
    durable.continue_as_new()
    return "unreachable"


@durable.workflow
async def in_a_step() -> str:
    try:
        return await continues_inside()
    except NotInWorkflow as e:
        return str(e)


@durable.workflow
async def bad_arguments(kind: str, n: int = 0) -> str:
    if n:
        return "continued"
    try:
        if kind == "signature":
            durable.continue_as_new(kind, 1, 2, 3)
        else:
            durable.continue_as_new(kind, n=1, extra=lambda: None)
    except (ArgumentMismatch, CodecError) as e:
        return f"{type(e).__name__}: {e}"
    return "not raised"


async def test_bad_calls_raise_typed_errors_and_change_nothing(
    make_objects: Factory, clock: MockClock
) -> None:
    with pytest.raises(NotInWorkflow, match="continue_as_new"):
        durable.continue_as_new(1)
    async with make_engine(make_objects, clock) as engine:
        message = await result(await in_a_step.options(run_id="step-1").start())
        assert "durable.continue_as_new()" in message
        assert "'step-1'" in message
        assert continues_inside.name in message
        mismatch = await result(await bad_arguments.options(run_id="bad-1").start("signature"))
        assert mismatch.startswith("ArgumentMismatch")
        assert "bad-1" in mismatch
        unexpected = await result(await bad_arguments.options(run_id="bad-2").start("keyword"))
        assert unexpected.startswith("ArgumentMismatch")
        for run_id in ("step-1", "bad-1", "bad-2"):
            status = await engine.handle(run_id).status()
            assert status is not None
            assert status.incarnation == 0


@durable.workflow
async def unencodable(n: int = 0, value: Any = None) -> str:
    if n:
        return "continued"
    try:
        durable.continue_as_new(1, value=object())
    except CodecError as e:
        return f"CodecError: {e}"
    return "not raised"


async def test_arguments_the_codec_cannot_encode_raise_codec_error(
    make_objects: Factory, clock: MockClock
) -> None:
    async with make_engine(make_objects, clock, codec="msgpack") as engine:
        message = await result(await unencodable.options(run_id="codec-1").start())
        assert message.startswith("CodecError")
        status = await engine.handle("codec-1").status()
        assert status is not None
        assert status.incarnation == 0


@durable.workflow
async def stubborn(n: int = 0) -> int:
    if n < 2:
        try:
            durable.continue_as_new(n + 1)
        except BaseException as e:  # swallowed: the first call still decides
            seen.setdefault("caught", []).append(type(e))
        return -1
    return n


async def test_a_caught_continue_as_new_still_starts_the_next_incarnation(
    make_objects: Factory, clock: MockClock
) -> None:
    async with make_engine(make_objects, clock):
        assert await result(await stubborn.options(run_id="stub-1").start()) == 2
    assert seen["caught"] == [ContinueAsNew, ContinueAsNew]


@durable.workflow
async def double(n: int) -> int:
    return 2 * n


@durable.workflow
async def parent(n: int, total: int = 0) -> int:
    total += await double(n)
    if n > 0:
        durable.continue_as_new(n - 1, total)
    return total


async def test_each_incarnation_starts_children_of_its_own(
    make_objects: Factory, clock: MockClock
) -> None:
    async with make_engine(make_objects, clock) as engine:
        handle = await parent.options(run_id="par-1").start(2)
        assert await result(handle) == 2 * (2 + 1 + 0)
        ids = [child_run_id("par-1", 0, engine.partition_count, incarnation=i) for i in range(3)]
        assert len(set(ids)) == 3
        for i, child in enumerate(ids):
            assert await result(engine.handle(child)) == 2 * (2 - i)


async def test_a_waiting_incarnation_is_shown_with_its_count(
    make_objects: Factory, clock: MockClock
) -> None:
    async with make_engine(make_objects, clock) as engine:
        gates["w1"] = asyncio.Event()
        gates["w1"].set()
        handle = await chat.options(run_id="chat-w1").start("w1")
        status = await wait_parked(engine, handle.run_id)
        assert status.state == "waiting"
        assert status.incarnation == 1
        assert status.steps == 2  # the new incarnation's own step and wait
        [summary] = (await engine.runs()).runs
        assert summary.incarnation == 1
        assert summary.as_dict()["incarnation"] == 1
        await engine.signal("w1:msg", "x")
        assert await result(handle) == [1, "x"]


@durable.workflow
async def session(user: str, turns: int = 0) -> int:
    message = await durable.wait_for_signal(f"chat:{user}", timeout=3600)
    if message is None or message == "bye":
        return turns
    await durable.publish("last", f"{turns}: {message}")
    await durable.set_attributes(turn=str(turns))
    durable.continue_as_new(user, turns=turns + 1)


async def test_a_client_follows_the_run_across_incarnations(
    make_objects: Factory, clock: MockClock
) -> None:
    """A ``role="client"`` engine (another handle on the store, like a web
    server's) starts the run, signals each incarnation, reads the incarnation
    count and gets the last incarnation's result."""
    async with (
        make_engine(make_objects, clock) as owner,
        make_engine(make_objects, clock, role="client") as client,
    ):
        assert owner.owner
        assert not client.owner
        handle = await session.options(run_id="client-1").start("c1")
        parked = await asyncio.wait_for(handle.waiting(), LIMIT)
        for turn, text in enumerate(("hello", "again", "more")):
            await client.signal("chat:c1", text)
            parked = await asyncio.wait_for(handle.waiting(after=parked), LIMIT)
            status = await handle.status()
            assert status is not None
            assert (status.state, status.incarnation) == ("waiting", turn + 1)
            # Published values and attributes carry over, and each incarnation's land.
            assert await handle.get("last") == f"{turn}: {text}"
            assert status.attributes == {"turn": str(turn)}
        [summary] = (await client.runs()).runs
        assert summary.incarnation == 3
        await client.signal("chat:c1", "bye")
        assert await result(handle) == 3
        again = await session.options(run_id="client-1").start("c1")
        assert await result(again) == 3  # the id names the run: nothing starts


# ------------------------------------------------------------ bounded loop

ITERATIONS = 10_000
BLOCK = 1_000
#: Iteration -> (journal keys, store keys, operations so far) seen by its step.
samples: dict[int, tuple[int, int, Counter[str]]] = {}
ops: Counter[str] = Counter()


def count_operations(monkeypatch: pytest.MonkeyPatch) -> None:
    """Count the store's commits, the KV rows read by snapshots and scans, and
    the journal entries deliveries load, into `ops`."""
    for owner, name in ((LogWriter, "commit"), (KvNamespace, "snapshot"), (KvNamespace, "scan")):
        original = getattr(owner, name)

        def counted(*args: Any, _original: Any = original, _label: str = name, **kw: Any) -> Any:
            ops[_label] += 1
            value = _original(*args, **kw)
            rows = getattr(value, "entries", value)
            if isinstance(rows, list):
                ops["rows read"] += len(rows)
            return value

        monkeypatch.setattr(owner, name, counted)
    decode = Journal.decode.__func__  # type: ignore[attr-defined]

    def counted_decode(cls: type[Journal], *args: Any) -> Journal:
        journal: Journal = decode(cls, *args)
        ops["journal entries loaded"] += len(journal)
        return journal

    monkeypatch.setattr(Journal, "decode", classmethod(counted_decode))


@durable.step
async def tick(i: int) -> int:
    if i % BLOCK == 0:
        run = durable.run_id()
        kv = durable.decorators.current_engine().for_run(run).queue.kv
        samples[i] = (kv.count(journal_prefix(run)), kv.count(b""), Counter(ops))
    return i + 1


@durable.workflow
async def forever(i: int = 0) -> int:
    i = await tick(i)
    if i < ITERATIONS:
        durable.continue_as_new(i)
    return i


async def test_an_endless_loop_keeps_a_bounded_journal_and_step_cost(
    clock: MockClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    samples.clear()
    ops.clear()
    count_operations(monkeypatch)
    store = MemoryObjectStore()
    async with make_engine(lambda: store, clock):
        handle = await forever.options(run_id="loop-1").start()
        assert await asyncio.wait_for(handle.result(), 120) == ITERATIONS
        status = await handle.status()
        assert status is not None
        assert status.incarnation == ITERATIONS - 1
    assert sorted(samples) == list(range(0, ITERATIONS, BLOCK))
    ordered = [samples[i] for i in sorted(samples)]
    # Bounded journal: each incarnation's step sees no entry of an earlier one.
    assert {journal for journal, _, _ in ordered} == {0}
    # Bounded state: the store holds as many keys at the last sample as at the second.
    keys = [count for _, count, _ in ordered]
    assert max(keys[1:]) - min(keys[1:]) <= 2, keys
    # Bounded cost (counted, not timed): the last 1,000 iterations cost the
    # store what the second 1,000 did; no delivery loads an earlier entry.
    blocks = [later - earlier for (_, _, earlier), (_, _, later) in itertools.pairwise(ordered)]
    for name in ("commit", "rows read"):
        first, last = blocks[1][name], blocks[-1][name]
        assert first >= BLOCK, (name, blocks)
        assert abs(last - first) <= first // 20, (name, blocks)
    assert ops["journal entries loaded"] == 0


def test_a_stored_outcome_keeps_the_reset_it_commits() -> None:
    """``step_output_replay``: a redelivery settles the stored outcome, and the
    journal reset of a continue-as-new rides it."""
    internal = ((b"workflow/journal/r/0000000000", None), (b"workflow/invocations/r", b"x"))
    record = ReplayRecord(5, Continue(b"payload", Immediate(), internal), {}, frozenset())
    again = decode_replay("replay", encode_replay(record))
    assert again.adjusted(10) == Continue(b"payload", Immediate(), internal)


async def test_a_carry_over_hook_commits_with_the_reset(
    make_objects: Factory, clock: MockClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The hook the streams and requests layers use: its writes join the
    transaction that starts each incarnation."""
    monkeypatch.setattr(continuation, "_CARRY_OVER", [])
    seen_by_hook: list[tuple[str, int]] = []

    def hook(run: RunContext, incarnation: int) -> dict[bytes, bytes | None]:
        seen_by_hook.append((run.run_id, incarnation))
        return {b"workflow/test-carry/" + run.run_id.encode(): b"%d" % incarnation}

    continuation.register_carry_over(hook)
    continuation.register_carry_over(hook)  # once
    async with make_engine(make_objects, clock) as engine:
        assert await result(await countdown.options(run_id="hook-1").start(3)) == 6
        kv = engine.for_run("hook-1").queue.kv.internal()
        assert kv.get(b"workflow/test-carry/hook-1") == b"3"
    assert seen_by_hook == [("hook-1", 1), ("hook-1", 2), ("hook-1", 3)]


def test_continue_internal_writes_are_checked() -> None:
    """`Continue.internal` holds (bytes key, bytes or None) pairs, as a tuple."""
    ok = Continue(b"", Immediate(), [(b"workflow/a", b"1"), (b"workflow/b", None)])  # type: ignore[arg-type]
    assert ok.internal == ((b"workflow/a", b"1"), (b"workflow/b", None))
    assert Continue(b"").internal == ()
    for bad in (((b"k", 1),), (("k", b"v"),), ((b"k",),)):
        with pytest.raises(InvalidArgument, match=r"Continue\.internal"):
            Continue(b"", Immediate(), bad)  # type: ignore[arg-type]
