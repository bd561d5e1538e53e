"""Every example runs as ``python -m examples.NAME`` and does what it says."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from example_helpers import run_example


@pytest.mark.slow
def test_quickstart_survives_kill_9_and_repeats_only_the_step_in_flight(tmp_path: Path) -> None:
    out = run_example("quickstart", str(tmp_path / "demo"))
    assert "killed the worker process (kill -9) during step 'charge'" in out
    assert "steps it had started: reserve, charge" in out
    assert "run 'order-42' returned 'order-42: reserved, charged, shipped'" in out
    executions = (tmp_path / "demo" / "executions.log").read_text().split()
    # Every step ran; `reserve` was journaled before the kill and never ran
    # again; `charge` was in flight and ran again; the rest ran once.
    assert executions == ["reserve", "charge", "charge", "ship", "notify"]
    assert "step executions: reserve 1, charge 2, ship 1, notify 1" in out
    assert "ran again: charge (only the step in flight at the kill)" in out


def test_single_step_transforms_its_input_and_succeeds(tmp_path: Path) -> None:
    out = run_example("single_step", str(tmp_path / "demo"))
    assert "submitted run 'greeting' (new: True)" in out
    assert "step 0 of run 'greeting' got b'hello, durable'" in out
    assert "run 'greeting' succeeded" in out
    assert "final step: 0" in out
    assert "result: b'HELLO, DURABLE!'" in out


def test_multi_step_chains_steps_and_memoizes_the_fetch(tmp_path: Path) -> None:
    out = run_example("multi_step", str(tmp_path / "demo"))
    steps = re.findall(r"step (\d) \((\w+)\), attempt (\d)", out)
    expected = [("0", "fetch", "1"), ("0", "fetch", "2"), ("1", "parse", "1")]
    assert steps == [*expected, ("2", "summarize", "1")]
    assert "outcome: succeeded at step 2" in out
    assert "result: 2 lines, 12 words: 'Durable runs keep their state in object storage.'" in out
    assert "status: Terminated, current step 2" in out
    assert "downloads: 1 " in out  # the retry read the memo, no second download


@pytest.mark.slow
def test_crash_resume_repeats_only_the_step_in_flight(tmp_path: Path) -> None:
    out = run_example("crash_resume", str(tmp_path / "demo"))
    assert "killed worker process" in out
    assert "run 'six-steps' succeeded at step 5" in out
    assert "result: b'steps: 0 1 2 3 4 5'" in out
    lines = (tmp_path / "demo" / "steps.log").read_text().splitlines()
    ran = [(int(step), int(attempt)) for _, step, attempt in map(str.split, lines)]
    assert {step for step, _ in ran} == set(range(6))  # every step executed
    # The killed process ran steps 0..k in order, k >= 3; the restart ran k..5.
    killed = re.search(r"steps run by the killed process: (.*)", out)
    restarted = re.search(r"steps run after the restart: +(.*)", out)
    assert killed is not None
    assert restarted is not None
    before = [int(s) for s in re.findall(r"(\d) \(attempt", killed.group(1))]
    after = [int(s) for s in re.findall(r"(\d) \(attempt", restarted.group(1))]
    assert before + after == [step for step, _ in ran]
    assert before == list(range(len(before)))
    assert len(before) >= 4
    # Steps finished before the kill never ran again; at most the one in flight did.
    assert after[0] >= before[-1]
    assert after == list(range(after[0], 6))
    repeated = set(before) & set(after)
    assert repeated <= {before[-1]}
    assert f"steps run twice: {before[-1] if repeated else 'none'}" in out


def test_kv_effects_commit_with_submit_and_each_step(tmp_path: Path) -> None:
    out = run_example("kv_effects", str(tmp_path / "demo"))
    submitted, rest = out.split("  step 0 ", 1)
    steps, rest = rest.split("queue.kv after the run:")
    writer, reader = rest.split("the QueueReader after refresh:")
    # RunSpec.effects committed with step 0: a reader sees them before any step ran.
    assert "orders/order-42/status = b'submitted'" in submitted
    assert "orders/order-42/reserved = None" in submitted
    # Each step reads the previous settlement's write (committed state only).
    assert "(reserve): status was b'submitted'" in steps
    assert "step 1 (charge): status was b'reserved'" in steps
    assert "step 2 (ship): status was b'charged'" in steps
    for view in (writer, reader):  # the writer and a read-only view agree
        assert "orders/order-42/status = b'shipped'" in view
        assert "orders/order-42/reserved = b'3 widgets'" in view
        assert "orders/order-42/receipt = b'receipt #1001: 29.97 EUR'" in view


def test_sync_steps_run_def_bodies_in_the_engine_pool(tmp_path: Path) -> None:
    out = run_example("sync_steps", str(tmp_path / "demo"))
    lines = out.splitlines()
    assert [line.split()[0] for line in lines[:6]] == [f"file{i}.txt" for i in range(6)]
    assert all(line.endswith("(durable-sync)") for line in lines[:6])
    assert "lines in file5.txt: 6" in out


def test_typed_values_come_back_as_their_types_through_msgpack(tmp_path: Path) -> None:
    out = run_example("typed_values", str(tmp_path / "demo"))
    assert "priced: [Line(sku='pen', qty=3, cents=225), Line(sku='ink', qty=1, cents=1080)]" in out
    assert "result: Invoice {'order_id': 'o-7', 'total_cents': 1755" in out
    assert "'approved_by': 'ana'}" in out
    assert "as stored (engine.handle, untyped): dict" in out
