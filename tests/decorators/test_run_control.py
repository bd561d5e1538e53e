"""Attributes, ``engine.resume``, ``engine.forget`` and the bulk forms (issue 17 point 2)."""

from __future__ import annotations

from collections import Counter

import pytest
from decorator_helpers import Factory, make_engine, result, wait_parked

import durable
from durable.decorators.attributes import MAX_ATTRIBUTES
from durable.errors import InvalidArgument, WrongRunState
from durable.store.clock import MockClock

calls: Counter[str] = Counter()
broken_until: dict[str, int] = {}


@pytest.fixture(autouse=True)
def _fresh() -> None:
    calls.clear()
    broken_until.clear()


@durable.step(max_attempts=1)
async def effect(name: str) -> str:
    calls[name] += 1
    if calls[name] <= broken_until.get(name, 0):
        raise RuntimeError(f"{name} broke")
    return name


@durable.workflow(name="control.three")
async def three(tag: str) -> list[str]:
    await durable.set_attributes(stage="one")
    a = await effect(f"{tag}-a")
    await durable.set_attributes({"stage": "two"}, order="o-9")
    b = await effect(f"{tag}-b")
    await durable.publish("b", b)
    c = await effect(f"{tag}-c")
    return [a, b, c]


@durable.workflow(name="control.parked")
async def parked(key: str) -> str:
    await durable.set_attributes(stage="parked")
    return str(await durable.wait_for_signal(key))


@durable.workflow(name="control.too_many")
async def too_many() -> None:
    await durable.set_attributes({f"k{i}": "v" for i in range(MAX_ATTRIBUTES + 1)})


async def test_attributes_at_start_and_in_the_run(make_objects: Factory, clock: MockClock) -> None:
    async with make_engine(make_objects, clock) as engine:
        h = await three.options(attributes={"customer": "c-17"}).start("t")
        assert await result(h) == ["t-a", "t-b", "t-c"]
        status = await h.status()
        assert status is not None
        assert status.attributes == {"customer": "c-17", "stage": "two", "order": "o-9"}
        page = await engine.runs(attributes={"order": "o-9", "customer": "c-17"})
        assert [r.run_id for r in page.runs] == [h.run_id]
        # A replay does not take attributes back: the parked run replays its
        # set_attributes when the signal wakes it.
        p = await parked.options(attributes={"stage": "start"}).start("k")
        await wait_parked(engine, p.run_id)
        assert (await engine.runs(attributes={"stage": "parked"})).runs[0].run_id == p.run_id
        await engine.signal("k", "v")
        await result(p)
        assert (await p.status()).attributes == {"stage": "parked"}  # type: ignore[union-attr]


async def test_bad_attributes_are_refused_naming_run_and_key(
    make_objects: Factory, clock: MockClock
) -> None:
    with pytest.raises(InvalidArgument, match=r"run 'r-1'.*attribute 'k'"):
        three.options(run_id="r-1", attributes={"k": 5})  # type: ignore[dict-item]
    with pytest.raises(InvalidArgument, match="attribute key ''"):
        three.options(attributes={"": "v"})
    with pytest.raises(InvalidArgument, match="at most 16 attributes"):
        three.options(attributes={f"k{i}": "v" for i in range(17)})
    with pytest.raises(InvalidArgument, match="256 bytes"):
        three.options(attributes={"k": "x" * 257})
    async with make_engine(make_objects, clock) as engine:
        h = await too_many.start()
        with pytest.raises(Exception, match=rf"run '{h.run_id}': at most 16 attributes"):
            await result(h)
        assert (await engine.runs(state="failed")).runs[0].error_type == "InvalidArgument"


async def test_resume_does_not_rerun_finished_steps(
    make_objects: Factory, clock: MockClock
) -> None:
    async with make_engine(make_objects, clock) as engine:
        broken_until["r-b"] = 1  # the second step fails once
        h = await three.start("r")
        with pytest.raises(Exception, match="r-b broke"):
            await result(h)
        assert calls == {"r-a": 1, "r-b": 1}
        with pytest.raises(WrongRunState, match="only failed or cancelled"):
            await engine.resume((await quick_done(engine)).run_id)
        resumed = await engine.resume(h.run_id)
        assert resumed.run_id == h.run_id
        assert await result(resumed) == ["r-a", "r-b", "r-c"]
        ran = {k: v for k, v in calls.items() if k.startswith("r-")}
        assert ran == {"r-a": 1, "r-b": 2, "r-c": 1}  # a ran once; b again; c once
        status = await h.status()
        assert status is not None
        assert status.state == "succeeded"
        assert status.steps == 3
        assert (await engine.runs(state="succeeded", workflow="control.three")).runs[0].run_id == (
            h.run_id
        )


async def quick_done(engine: durable.Engine) -> durable.WorkflowHandle[object]:
    h = await three.start("ok")
    await result(h)
    return h


async def test_resume_a_cancelled_run(make_objects: Factory, clock: MockClock) -> None:
    async with make_engine(make_objects, clock) as engine:
        p = await parked.start("rc")
        await wait_parked(engine, p.run_id)
        with pytest.raises(WrongRunState, match="is active"):
            await engine.resume(p.run_id)
        assert await p.cancel()
        assert (await p.status()).state == "cancelled"  # type: ignore[union-attr]
        await engine.resume(p.run_id)
        await wait_parked(engine, p.run_id)
        await engine.signal("rc", "after")
        assert await result(p) == "after"


def _keys(engine: durable.Engine) -> set[bytes]:
    return {
        k
        for part in engine.every_partition()
        for k, _ in part.queue.kv.internal().snapshot(b"workflow/")
    }


async def _objects(engine: durable.Engine) -> set[str]:
    names: set[str] = set()
    for part in engine.every_partition():
        memos = part.workflows.default.memos
        names.update(await memos._objects.list(memos._prefix))
    return names


async def test_forget_removes_every_key_of_the_run(make_objects: Factory, clock: MockClock) -> None:
    async with make_engine(make_objects, clock) as engine:
        keep = await three.start("keep")
        await result(keep)
        before, objects_before = _keys(engine), await _objects(engine)
        h = await three.options(attributes={"customer": "gone"}).start("x" * 70_000)
        await result(h)
        assert _keys(engine) - before  # it stored records
        assert await _objects(engine) - objects_before  # and memo objects (a large invocation)
        p = await parked.start("fk")
        await wait_parked(engine, p.run_id)
        with pytest.raises(WrongRunState, match="is active"):
            await engine.forget(p.run_id)
        await p.cancel()
        assert {k for k in _keys(engine) if p.run_id.encode() in k}
        assert await engine.forget(h.run_id)
        assert await engine.forget(p.run_id)
        assert not await engine.forget(p.run_id)  # unknown now
        left = _keys(engine)
        assert not {k for k in left if h.run_id.encode() in k or p.run_id.encode() in k}
        assert before <= left  # the other run keeps everything
        assert await _objects(engine) == objects_before
        assert await h.status() is None
        assert [r.run_id for r in (await engine.runs()).runs] == [keep.run_id]


async def test_bulk_cancel_resume_forget_with_dry_run(
    make_objects: Factory, clock: MockClock
) -> None:
    async with make_engine(make_objects, clock) as engine:
        runs = [await parked.options(attributes={"batch": "b1"}).start(f"b{i}") for i in range(4)]
        other = await parked.start("other")
        for h in (*runs, other):
            await wait_parked(engine, h.run_id)
        assert await engine.cancel_runs(attributes={"batch": "b1"}, dry_run=True) == 4
        assert await engine.cancel_runs(attributes={"batch": "b1"}) == 4
        assert await engine.cancel_runs(attributes={"batch": "b1"}) == 0
        assert len((await engine.runs(state="cancelled")).runs) == 4
        assert (await other.status()).state == "waiting"  # type: ignore[union-attr]
        assert await engine.resume_runs(state="cancelled", dry_run=True) == 4
        assert await engine.resume_runs(workflow="control.parked", state="cancelled") == 4
        for h in runs:
            await wait_parked(engine, h.run_id)
        for i in range(4):
            await engine.signal(f"b{i}", i)
        for h in runs:
            await result(h)
        assert await engine.forget_runs(attributes={"batch": "b1"}, dry_run=True) == 4
        assert await engine.forget_runs(attributes={"batch": "b1"}) == 4
        assert [r.run_id for r in (await engine.runs()).runs] == [other.run_id]
        await engine.signal("other")
        await result(other)
