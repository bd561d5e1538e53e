"""Changing code under running runs (issue 18 point 5): ``durable.patched()``
on replay, the markers it journals, and workflow versions.

The workflow ``evolving`` stands for three deploys of the same code, chosen
by ``code["v"]`` (each test "deploys" by setting it between deliveries):

- ``v1``: ``common``, a signal wait, ``old_step``, a signal wait, ``common``;
- ``v2``: ``old_step`` replaced by ``new_step`` behind ``patched("new-check")``;
- ``v3``: the patch removed, ``new_step`` only (once no v1 run is left);
- ``bad``: ``new_step`` with no patch (the change the patch exists for).
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from typing import Any

import pytest
from decorator_helpers import (
    Factory,
    failure_type,
    journal_names,
    make_engine,
    result,
    wait_parked,
)

import durable
from durable.decorators.journal import PATCH, SIGNAL, STEP, Entry, decode_entry, encode_entry
from durable.decorators.versions import code_version
from durable.errors import CorruptEngineRecord, DecoratorError, InvalidArgument, NotInWorkflow
from durable.store.clock import MockClock

calls: Counter[str] = Counter()
code: dict[str, Any] = {}


@pytest.fixture(autouse=True)
def _fresh() -> None:
    calls.clear()
    code.clear()
    code["v"] = "v1"


@durable.step
async def common() -> str:
    calls["common"] += 1
    return "common"


@durable.step
async def old_step() -> str:
    calls["old"] += 1
    return "old"


@durable.step
async def new_step() -> str:
    calls["new"] += 1
    return "new"


async def _middle() -> str:
    v = code["v"]
    if v == "v2":
        answers = [durable.patched("new-check"), durable.patched("new-check")]
        code.setdefault("answers", []).append(answers)
        return await (new_step() if answers[0] else old_step())
    if v in ("v3", "bad"):
        return await new_step()
    return await old_step()


@durable.workflow(name="patching.evolving")
async def evolving(key: str) -> list[str]:
    out = [await common()]
    await durable.wait_for_signal(key)
    out.append(await _middle())
    await durable.wait_for_signal(key + "-2")
    out.append(await common())
    return out


@durable.step
async def inside_step() -> str:
    try:
        durable.patched("in-step")
    except NotInWorkflow as e:
        return str(e)
    return "no error"


@durable.workflow(name="patching.misuse")
async def misuse() -> list[str]:
    seen = [await inside_step()]
    try:
        durable.patched("")
    except InvalidArgument as e:
        seen.append(type(e).__name__)
    return seen


@durable.workflow(name="patching.pinned", version="2024-06-v2")
async def pinned() -> str:
    return "pinned"


def names(journal: list[tuple[int, str, str]]) -> list[tuple[str, str]]:
    """``(kind, name)`` of each position, the wait's names shortened."""
    return [(kind, name.rpartition(".")[2]) for _, kind, name in journal]


V1_JOURNAL = [
    (STEP, "common"),
    (SIGNAL, "wait_for_signal"),
    (STEP, "old_step"),
    (SIGNAL, "wait_for_signal"),
    (STEP, "common"),
]
V2_JOURNAL = [
    (STEP, "common"),
    (SIGNAL, "wait_for_signal"),
    (PATCH, "new-check"),
    (STEP, "new_step"),
    (SIGNAL, "wait_for_signal"),
    (STEP, "common"),
]


async def test_a_run_past_the_patch_under_old_code_keeps_the_old_branch(
    make_objects: Factory, clock: MockClock
) -> None:
    async with make_engine(make_objects, clock) as engine:
        handle = await evolving.start("old")
        await wait_parked(engine, handle.run_id)
        await engine.signal("old", None)
        await wait_parked(engine, handle.run_id, step=2)  # past old_step, on v1
        code["v"] = "v2"  # deploy the patched code
        await engine.signal("old-2", None)
        assert await result(handle) == ["common", "old", "common"]
        journal = await journal_names(engine, handle.run_id)
    assert code["answers"] == [[False, False]]  # asked twice: the first answer holds
    assert calls == {"common": 2, "old": 1}  # old_step replayed, new_step never ran
    assert names(journal) == V1_JOURNAL  # no marker


async def test_a_run_reaching_the_patch_under_new_code_takes_the_new_branch(
    make_objects: Factory, clock: MockClock
) -> None:
    """Started on v1, parked before the patch point; v2 reaches it live: True,
    a marker journaled, and the replay of the next delivery answers True again."""
    async with make_engine(make_objects, clock) as engine:
        handle = await evolving.start("new")
        await wait_parked(engine, handle.run_id)
        code["v"] = "v2"
        await engine.signal("new", None)
        await wait_parked(engine, handle.run_id, step=2)
        journal = await journal_names(engine, handle.run_id)
        assert names(journal) == V2_JOURNAL[:5]
        await engine.signal("new-2", None)
        assert await result(handle) == ["common", "new", "common"]
        assert names(await journal_names(engine, handle.run_id)) == V2_JOURNAL
    # live, then replayed from the marker
    assert code["answers"] == [[True, True], [True, True]]
    assert calls == {"common": 2, "new": 1}


async def test_removing_the_patch_later_keeps_runs_that_recorded_its_marker(
    make_objects: Factory, clock: MockClock
) -> None:
    """v3 drops the ``patched()`` call and the old branch: a run with the
    marker replays (its marker is stepped over, nothing shifts); a v1 run
    past the old branch fails with non-determinism (as any unpatched change)."""
    async with make_engine(make_objects, clock) as engine:
        patched_run = await evolving.start("p")
        old_run = await evolving.start("o")
        for h in (patched_run, old_run):
            await wait_parked(engine, h.run_id)
        await engine.signal("o", None)
        await wait_parked(engine, old_run.run_id, step=2)  # old_step journaled on v1
        code["v"] = "v2"
        await engine.signal("p", None)
        await wait_parked(engine, patched_run.run_id, step=2)  # marker journaled on v2
        code["v"] = "v3"
        await engine.signal("p-2", None)
        await engine.signal("o-2", None)
        assert await result(patched_run) == ["common", "new", "common"]
        with pytest.raises(Exception) as caught:  # noqa: PT011 (type checked below)
            await result(old_run)
        assert names(await journal_names(engine, patched_run.run_id)) == V2_JOURNAL
    assert failure_type(caught.value) == "NonDeterminismError"
    assert "position 2" in str(caught.value)
    assert "old_step" in str(caught.value)
    assert "new_step" in str(caught.value)


async def test_an_unpatched_change_still_fails_with_non_determinism(
    make_objects: Factory, clock: MockClock
) -> None:
    async with make_engine(make_objects, clock) as engine:
        handle = await evolving.start("u")
        await wait_parked(engine, handle.run_id)
        await engine.signal("u", None)
        await wait_parked(engine, handle.run_id, step=2)
        code["v"] = "bad"
        await engine.signal("u-2", None)
        with pytest.raises(Exception) as caught:  # noqa: PT011 (type checked below)
            await result(handle)
    assert failure_type(caught.value) == "NonDeterminismError"
    assert calls["new"] == 0


async def test_patched_outside_a_workflow_or_inside_a_step_is_refused(
    make_objects: Factory, clock: MockClock
) -> None:
    with pytest.raises(NotInWorkflow, match=r"durable\.patched\('new-check'\)"):
        durable.patched("new-check")
    async with make_engine(make_objects, clock):
        in_step, bad_id = await result(await misuse.start())
    assert "durable.patched('in-step')" in in_step
    assert "inside the body of step" in in_step
    assert bad_id == "InvalidArgument"


def test_a_patch_marker_round_trips_and_older_readers_refuse_it_by_version() -> None:
    marker = Entry("new-check", PATCH, time=1234)
    data = encode_entry(marker)
    assert decode_entry(data, "r", 3) == marker
    assert marker.describe() == "durable.patched('new-check')"
    # Every other kind keeps format version 1, readable by older durables.
    import msgpack

    assert msgpack.unpackb(encode_entry(Entry("s", STEP, ok=b"x")))["v"] == 1
    assert msgpack.unpackb(data)["v"] == 2
    newer = msgpack.packb({**msgpack.unpackb(data), "v": 3})
    with pytest.raises(CorruptEngineRecord, match="format version 3"):
        decode_entry(newer, "r", 3)


# ------------------------------------------------------------------ versions


async def test_the_version_is_recorded_at_start_and_listed(
    make_objects: Factory, clock: MockClock
) -> None:
    async with make_engine(make_objects, clock) as engine:
        handle = await evolving.start("ver")
        await wait_parked(engine, handle.run_id)
        done = await pinned.start()
        assert await result(done) == "pinned"
        status = await handle.status()
        assert status is not None
        assert status.version == evolving.version == code_version(evolving.fn)
        assert (await done.status()).version == "2024-06-v2"  # type: ignore[union-attr]
        page = await engine.runs(version="2024-06-v2")
        assert [r.run_id for r in page.runs] == [done.run_id]
        assert page.runs[0].version == "2024-06-v2"
        assert page.runs[0].as_dict()["version"] == "2024-06-v2"
        page = await engine.runs(version=[evolving.version, "other"])
        assert [(r.run_id, r.version) for r in page.runs] == [(handle.run_id, evolving.version)]
        assert (await engine.runs(version="nope")).runs == []
        with pytest.raises(InvalidArgument, match="version"):
            await engine.runs(version=3)  # type: ignore[arg-type]
        await engine.cancel_runs(workflow=evolving.name)


def _define(source: str) -> Any:
    namespace: dict[str, Any] = {}
    exec(compile(source, "<test>", "exec"), namespace)  # no file: the bytecode fallback
    return namespace["flow"]


def test_the_default_version_follows_the_code_not_its_formatting(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    def from_file(name: str, source: str) -> str:
        (tmp_path / f"{name}.py").write_text(source)
        monkeypatch.syspath_prepend(str(tmp_path))
        module = __import__(name)
        return code_version(getattr(module.flow, "fn", module.flow))

    base = "async def flow(x):\n    a = await step_a(x)\n    return a\n"
    reformatted = (
        "import durable\n\n\n@durable.workflow(name='patching.formatted')\n"
        "async def flow(x):\n    '''A docstring.'''\n    # a comment\n"
        "    a = await step_a( x )\n\n    return a\n"
    )
    changed = "async def flow(x):\n    a = await step_b(x)\n    return a\n"
    v_base = from_file("ver_base", base)
    assert len(v_base) == 12
    assert from_file("ver_reformatted", reformatted) == v_base
    assert from_file("ver_changed", changed) != v_base
    # No source (exec'd): from the bytecode, the same for the same code.
    assert code_version(_define(base)) == code_version(_define(base))
    assert code_version(_define(base)) != code_version(_define(changed))


def test_a_pinned_version_is_checked_at_decoration() -> None:
    for bad in ("", 3, "x" * 65, "a\nb"):
        with pytest.raises(DecoratorError, match="version"):

            @durable.workflow(name="patching.badversion", version=bad)  # type: ignore[arg-type]
            async def flow() -> None:
                pass

    assert dataclasses.is_dataclass(pinned.definition)
    assert pinned.definition.version == pinned.version == "2024-06-v2"
