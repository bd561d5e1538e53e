"""The crash torture's checks (`torture.check`) on made-up side channels:
each kind of violation is reported, and a clean history is not."""

from __future__ import annotations

from typing import Any

import torture
import torture_workload as w

PLAN = w.Plan(1)


def _results() -> list[dict[str, Any]]:
    out = [{"c": 1, "ev": "result", "run": "marathon", "value": w.expected_marathon(PLAN)}]
    out += [
        {"c": 1, "ev": "result", "run": r, "value": w.expected_mixed(r)} for r in PLAN.mixed_runs()
    ]
    out.append({"c": 1, "ev": "result", "run": "batch-0", "value": w.expected_batch(0)})
    out += [
        {"c": 1, "ev": "published", "run": r, "value": w.expected_published(r)}
        for r in PLAN.mixed_runs()
    ]
    return out


def _run(c: int, n: int, end: str = "done", step: str = "a") -> list[dict[str, Any]]:
    return [
        {"c": c, "ev": "start", "run": "mixed-0-0", "step": step, "n": n},
        {"c": c, "ev": end, "run": "mixed-0-0", "step": step, "n": n},
    ]


def _check(events: list[dict[str, Any]], held: list[set[torture.Step]]) -> list[str]:
    report = torture.Report(seed=0, kills=1)
    torture.check(PLAN, events + _results(), held, report)
    return report.problems


def test_a_step_in_flight_at_a_kill_may_run_again() -> None:
    assert _check(_run(0, 1) + _run(1, 2), [set()]) == []


def test_a_journaled_step_that_runs_again_is_reported() -> None:
    problems = _check(_run(0, 1) + _run(1, 2), [{("mixed-0-0", "a")}])
    assert problems == [
        "('mixed-0-0', 'a') ran in worker 1 though the store held its result after kill 0"
    ]


def test_a_step_that_runs_twice_in_one_worker_is_reported() -> None:
    assert _check(_run(0, 1) + _run(0, 2), [set()]) == [
        "('mixed-0-0', 'a') ran again in worker 0 after execution 1 did not fail"
    ]
    assert _check(_run(0, 1, "fail") + _run(0, 2), [set()]) == []  # a retry


def test_a_step_that_ran_again_after_a_clean_exit_is_reported() -> None:
    assert _check(_run(1, 1) + _run(2, 2), [set()]) == [
        "('mixed-0-0', 'a') ran in worker 1 and again later, yet 1 was not killed"
    ]


def test_wrong_and_missing_results_are_reported() -> None:
    events = [e for e in _results() if e["run"] != "batch-0" and e["ev"] != "published"]
    events[0] = {**events[0], "value": 1}
    report = torture.Report(seed=0, kills=1)
    torture.check(PLAN, events, [set()], report)
    assert report.problems[0].startswith("marathon ended with 1 (noted by worker 1)")
    assert report.problems[1] == "batch-0 never ended"
    assert report.problems[2].startswith("mixed-0-0 published None")


def test_a_result_the_store_holds_for_a_step_that_never_ran_is_reported() -> None:
    assert _check(_run(0, 1), [{("mixed-0-0", "b")}]) == [
        "after kill 0 the store held a result of ('mixed-0-0', 'b'), which never ran"
    ]
