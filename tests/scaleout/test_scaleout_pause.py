"""SIGSTOP of the owner past the TTL, then SIGCONT: a worker owns the store,
a client process keeps starting and signalling runs, a standby stands by.
The owner is stopped while a step runs in it; the standby takes over once
the owner's heartbeat is a TTL old (within ttl + 2 heartbeats: on a local
directory too, since a stopped process keeps its host lock), and the old
owner is woken at once (the most race-prone moment). Then:

- the woken owner commits nothing (no log object it created after waking:
  its workers note each create) and starts no step body (side channel): its
  writer refuses the next commit (`SelfFenced`: its heartbeat is too old;
  or `Fenced` by the new owner's open marker), and it says why it lost the
  store;
- it serves as a standby (the documented choice: it does not exit), a
  working one: when the new owner stops gracefully it takes the store back;
- every run a client started ended once as expected, no journaled step ran
  again, every signal whose call returned was taken once, and none is left
  buffered.
"""

from __future__ import annotations

import asyncio
import signal
import time
from collections import Counter
from pathlib import Path

import pytest
import scaleout_app as app
from scaleout_harness import (
    HB,
    SLACK,
    TTL,
    buffered_signals,
    check_executions,
    check_held,
    check_results,
    cluster,
    journaled_executions,
    location,
    owner_event,
)

from durable.testing.cloud import StoreLocation

pytestmark = pytest.mark.slow

#: Plays, at most, when the owner loses the store before the pause.
PLAYS = 3


class Replay(Exception):
    """The owner lost the store before it was paused, or as the pause took
    hold (its heartbeat stalled: a loaded emulator), so the play cannot show
    what a woken owner does: play it again on a fresh store."""


def pause_owner(where: StoreLocation, workdir: Path) -> None:
    """Play the test (see the module docstring) on ``where``."""
    with cluster(where, workdir) as procs:
        owner = procs.worker(commits=True)
        procs.wait_for(owner_event(owner), 30, owner)
        client = procs.client("stream", "z", 0.2, 0.1)
        procs.go([client])
        standby = procs.worker(commits=True)
        # Right after a step body ended: its result is being journaled, the next
        # step of its run starts once that is durable (in the woken owner, if
        # the pause falls in between and nothing stops it).
        procs.wait_for(lambda e: e["ev"] == "done" and e["pid"] == owner.pid, 30, owner)
        stopped_at = owner.signal(signal.SIGSTOP)
        early = procs.find(
            lambda e: e["ev"] == "lost" and e["pid"] == owner.pid and e["t"] < stopped_at
        )
        if early is not None:
            owner.signal(signal.SIGCONT)
            raise Replay(early["message"])
        took = procs.wait_for(owner_event(standby, stopped_at), TTL + 2 * HB + 30, standby)
        cont_at = owner.signal(signal.SIGCONT)
        # A stopped process emits nothing: a loss stamped before the SIGCONT
        # came in the moment before the stop took hold (the stalled heartbeat
        # again, not the pause).
        early = procs.find(
            lambda e: e["ev"] == "lost" and e["pid"] == owner.pid and e["t"] < cont_at
        )
        if early is not None:
            raise Replay(early["message"])
        runs = {e["run"] for e in procs.events if e["ev"] == "started"}
        held = asyncio.run(journaled_executions(where, runs)), time.monotonic()
        lost = procs.wait_for(
            lambda e: e["ev"] == "lost" and e["pid"] == owner.pid and e["t"] > cont_at, 30, owner
        )
        procs.wait_for(
            lambda e: e["ev"] == "standby" and e["pid"] == owner.pid and e["t"] > cont_at,
            30,
            owner,
        )
        # The new owner runs the work: the client's requests made meanwhile too.
        procs.wait_for(lambda e: e["ev"] == "done" and e["pid"] == standby.pid, 30, standby)
        client.say("stop")
        procs.finish(client, 120)
        # The woken owner is a working standby: it takes over after a release.
        released_at = standby.signal(signal.SIGTERM)
        procs.finish(standby, 60)
        procs.wait_for(owner_event(owner, released_at), 30, owner)
        owner.signal(signal.SIGTERM)
        procs.finish(owner, 60)

    events = procs.events
    acquiring = [
        e
        for e in events
        if e["ev"] == "acquiring" and e["pid"] == standby.pid and e["t"] > stopped_at
    ]
    noticed = acquiring[0]["t"] - stopped_at
    back = min(  # the woken owner decides to take the store back
        e["t"]
        for e in events
        if e["ev"] == "acquiring" and e["pid"] == owner.pid and e["t"] > cont_at
    )
    problems: list[str] = []
    for e in events:
        if e["pid"] != owner.pid or not cont_at < e["t"] < back:
            continue
        if e["ev"] == "commit" and e["t0"] > cont_at:
            problems.append(f"the woken owner committed log object {e['seq']} after waking")
        if e["ev"] == "start":
            problems.append(f"the woken owner started step {e['step']} of {e['run']} ({e['e']})")
    twice = [
        s for s, n in Counter(e["seq"] for e in events if e["ev"] == "commit").items() if n > 1
    ]
    if twice:
        problems.append(f"log objects created by two writers: {twice}")
    if not ("renewed its ownership heartbeat" in lost["message"] or "fenced" in lost["message"]):
        problems.append(f"the woken owner lost the store for another reason: {lost['message']}")
    results = check_results(events, problems)
    reruns = check_executions(events, results, {owner.pid: stopped_at}, problems)
    check_held(events, *held, problems)
    signalled = [e["run"] for e in events if e["ev"] == "signalled"]
    left = asyncio.run(buffered_signals(where, map(app.signal_key, signalled)))
    if left:
        problems.append(f"signals left buffered (applied twice?): {left}")
    summary = (
        f"SIGSTOP of the owner: the standby decided to take over {noticed:.2f} s after the "
        f"stop and owned the store {took['t'] - stopped_at:.2f} s after it; the woken owner "
        f"lost the store {lost['t'] - cont_at:.2f} s after SIGCONT ({lost['message']!r}); "
        f"{len(results)} runs, {reruns} re-runs of steps cut short"
    )
    print(summary)
    assert not problems, summary + "\n" + "\n".join(problems)
    assert noticed <= TTL + 2 * HB + SLACK, summary
    assert results, summary


@pytest.mark.timeout(120 * PLAYS)
@pytest.mark.parametrize("backend", ["local", pytest.param("s3", marks=pytest.mark.emulator)])
def test_an_owner_paused_past_the_ttl_commits_nothing_after_waking_and_stands_by(
    backend: str, tmp_path: Path
) -> None:
    reasons = []
    for play in range(PLAYS):
        workdir = tmp_path / f"play{play}"
        workdir.mkdir()
        try:
            pause_owner(location(backend, workdir), workdir)
            return
        except Replay as e:
            reasons.append(str(e))
    pytest.fail(f"the owner lost the store before every pause: {reasons}")
