"""``examples.agent_chat``: a Pydantic AI chat agent in a worker process, a
client that chats with it through requests and its durable stream, an
approval, and a kill -9 of the worker in the middle of a model call."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
from example_helpers import run_example

pytestmark = pytest.mark.slow
pytest.importorskip("pydantic_ai")

ANSWER = "Done: deleted 3 log files older than 30 days. Your disk has room again; anything else?"


def test_the_chat_streams_asks_for_approval_and_survives_a_kill_9(tmp_path: Path) -> None:
    out = run_example("agent_chat", str(tmp_path / "demo"))
    lines = out.splitlines()
    # Turn 1: the streamed text is the reply to the request.
    start = lines.index("you> Hi! What can you do?")
    assert lines[start + 1 : start + 3] == [
        "agent> I can answer questions and clean up your log files (with your approval).",
        "  (the reply to the request matches the streamed text)",
    ]
    # Turn 2: an approval, then the answer is cut short by the kill, the new
    # worker's stream drops the 4 pieces the killed attempt stored, and the
    # retried model call streams the whole answer, which is the reply.
    start = lines.index("you> Please clean up the old log files.")
    turn = lines[start + 1 : start + 8]
    assert turn[0] == '[approval needed: delete_logs({"older_than_days": 30})] approving'
    assert turn[1] == "agent> Done: deleted 3 log"  # 4 pieces, streamed before the kill
    assert turn[2] == "  [killed the worker (kill -9) in the middle of model call 5]"
    assert turn[3].startswith("  [started a new worker, pid ")
    assert turn[4] == (
        "  [stream: attempt 1 of step 'chat__model.request_stream' was discarded "
        "after 4 pieces: dropped them]"
    )
    assert turn[5] == f"agent> {ANSWER}"
    assert turn[6] == "  (the reply to the request matches the streamed text)"
    assert "you> bye\nagent> Bye, ada!\n" in out
    # One incarnation per turn: the journal starts empty at each.
    assert "session ended after 2 turns; it continued as new 2 times" in out
    # The model calls, from the side channel the workers wrote: each call
    # finished before the kill was made once; only call 5 was made twice.
    calls = Counter((tmp_path / "demo" / "model-calls.log").read_text().splitlines())
    assert calls == Counter(
        {"start 1": 1, "done 1": 1, "start 3": 1, "done 3": 1, "tool delete_logs": 1}
        | {"start 5": 2, "done 5": 1}
    )
    assert "finished before the kill: 1, 3\n" in out
    assert "made again after the kill: 5 (in flight at the kill)" in out
    assert "finished model calls paid twice: none" in out
    assert "delete_logs ran 1 time(s)" in out
    assert "worker stopped (SIGTERM): exit code 0" in out
