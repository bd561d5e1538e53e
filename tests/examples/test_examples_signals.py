"""The signal examples run as ``python -m examples.NAME`` and do what they say."""

from __future__ import annotations

import re
from pathlib import Path

from example_helpers import run_example


def test_durable_approvals_takes_all_three_paths_across_worker_processes(
    tmp_path: Path,
) -> None:
    out = run_example("durable_approvals", str(tmp_path / "demo"))
    phases = re.findall(r"--- phase ([\w-]+): a new worker process", out)
    assert phases == ["decide-early", "work", "approve", "after-timeout"]
    # Each phase ran in its own process.
    pids = {
        name: set(re.findall(r"\[pid (\d+)\]", block))
        for name, block in re.findall(r"--- phase ([\w-]+): [^\n]*\n(.*?)(?=---)", out, re.S)
    }
    assert all(len(p) == 1 for p in pids.values())
    assert len(set().union(*pids.values())) == 4
    # Buffered before the run existed, consumed by its wait.
    assert "decision 'approve' for refund-C -> buffered" in out
    assert "refund-C: refund of 25 EUR issued" in out
    # Delivered to a run that waited across a process restart.
    assert "decision 'approve' for refund-A -> delivered" in out
    assert "refund-A: refund of 40 EUR issued" in out
    # Timed out: the next process escalated; the late decision was discarded.
    assert "refund-B: escalated: no decision within 1.5 s" in out
    assert "decision 'approve' for refund-B -> buffered" in out
    assert "late decision for refund-B discarded: True" in out
    assert out.endswith(
        "--- outcomes, read from the store\n"
        "refund-A: succeeded: refund of 40 EUR issued\n"
        "refund-B: succeeded: escalated: no decision within 1.5 s\n"
        "refund-C: succeeded: refund of 25 EUR issued\n"
    )


def test_remote_reply_delivers_the_remote_processes_reply_as_the_signal(
    tmp_path: Path,
) -> None:
    out = run_example("remote_reply", str(tmp_path / "demo"))
    lines = out.splitlines()
    host = re.search(r"\[pid (\d+)\] submitted run 'translate-invoice-118'", out)
    remote = re.search(
        r"\[remote pid (\d+)\] wrote the reply to replies/translate-invoice-118/0", out
    )
    assert host is not None
    assert remote is not None
    assert host.group(1) != remote.group(1)  # the reply came from another process
    sent = lines.index(
        "[step 0] sending 'invoice 118: three chairs, one table'; "
        "reply expected at replies/translate-invoice-118/0"
    )
    received = lines.index("[step 1] reply received: 'INVOICE 118: THREE CHAIRS, ONE TABLE'")
    assert sent < received
    assert "run 'translate-invoice-118' succeeded: 'INVOICE 118: THREE CHAIRS, ONE TABLE'" in out
    assert "replies still pending: 0" in out
    replies = tmp_path / "demo" / "store" / "replies"
    assert not replies.exists() or not any(p.is_file() for p in replies.rglob("*"))
