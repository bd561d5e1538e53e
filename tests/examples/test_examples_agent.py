"""``examples.agent``: an agent loop on the decorators against a local fake model."""

from __future__ import annotations

import re
from pathlib import Path

from example_helpers import run_example


def lines_of(out: str, run_id: str) -> list[str]:
    """The lines the steps of run ``run_id`` printed (they print once per execution)."""
    return [line.strip() for line in out.splitlines() if line.startswith(f"  [{run_id}] ")]


def test_agent_approval_timeout_and_memoized_model_calls(tmp_path: Path) -> None:
    out = run_example("agent", str(tmp_path / "demo"))
    assert re.search(r"fake model listening on http://127\.0\.0\.1:\d+/v1/chat", out)

    # Approved path: the run parks after two model calls, the signal finds it
    # waiting, the email is sent once, and the model gives its final answer.
    approved = "agent-approved"
    assert lines_of(out, approved) == [
        f"[{approved}] model call -> tool call calculator({{'expression': '17 * 23'}})",
        f"[{approved}] tool calculator('17 * 23') = 391",
        f"[{approved}] model call -> tool call send_email("
        "{'to': 'ops@example.com', 'body': '17 * 23 = 391'})",
        f"[{approved}] approval needed for send_email("
        "{'to': 'ops@example.com', 'body': '17 * 23 = 391'}): signal 'approve:agent-approved'",
        f"[{approved}] tool send_email to ops@example.com: '17 * 23 = 391'",
        f"[{approved}] model call -> final",
    ]
    assert f"run '{approved}' is waiting for approval (model requests so far: 2)" in out
    assert "approved: signal DELIVERED" in out
    assert f"run '{approved}' answered: '17 * 23 = 391; email: sent to ops@example.com'" in out

    # Timeout path: the mock clock passes the timeout, the wait returns None,
    # the email is never sent and the model is told so.
    timeout = "agent-timeout"
    steps = lines_of(out, timeout)
    assert not any("send_email to" in line for line in steps)
    assert steps[-1] == f"[{timeout}] model call -> final"
    assert f"run '{timeout}' is waiting for approval (model requests so far: 2)" in out
    assert "nobody approved: moved the clock 3600 s past the timeout" in out
    assert f"run '{timeout}' answered: '17 * 23 = 391; email: not sent: no approval'" in out

    # Memoization: each run's function ran twice (before and after the wait)
    # and awaited five model calls, but the server saw three requests: the
    # replay answered the first two from the journal.
    for run_id, sent in ((approved, 1), (timeout, 0)):
        assert (
            f"run '{run_id}': workflow function ran 2 times, awaited 5 model calls: "
            "2 answered from the journal, 3 made" in out
        )
        assert (
            f"run '{run_id}': model server requests 3, calculator ran 1, send_email ran {sent}"
            in out
        )
    assert "model server requests in total: 6" in out
    # The status while the run waits: plain state, journal positions, the wait.
    for run_id in (approved, timeout):
        assert (
            f"run '{run_id}' status: waiting, 5 journaled steps, in durable.wait_for_signal" in out
        )
