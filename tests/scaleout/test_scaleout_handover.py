"""Graceful handover on SIGTERM: a worker owns the store, a client process
keeps starting and signalling runs whose steps take a while, a standby
stands by. The owner gets SIGTERM while steps run in it: ``serve()``
returns, the owner drains (each step in flight finishes; its run goes on in
the next owner), closes the store, releases it and exits 0; the standby
takes over within one heartbeat of the release. Then:

- every run a client started ended once as expected, and no step ran
  twice (a step that finished is never run again: with a graceful handover
  no execution is cut short);
- every step in flight at SIGTERM finished in the old owner;
- every signal whose call returned was taken once, and none is left
  buffered.

It prints the measured times: from SIGTERM to the owner's exit, and from
the release to the standby owning the store.
"""

from __future__ import annotations

import asyncio
import functools
import math
import signal
import time
from pathlib import Path

import pytest
import scaleout_app as app
from scaleout_harness import (
    HB,
    SLACK,
    Cluster,
    Event,
    Proc,
    buffered_signals,
    check_executions,
    check_results,
    cluster,
    location,
    owner_event,
)

from durable.testing.cloud import StoreLocation

pytestmark = pytest.mark.slow

#: Seconds each step body takes: runs are in flight at SIGTERM (long
#: enough that the driver, polling the side channel on a loaded machine,
#: signals before the step it saw start has finished).
STEP = 1.0


def _started_after(pid: int, after: float, e: Event) -> bool:
    return bool(e["ev"] == "start" and e["pid"] == pid and e["t"] > after)


def _done(execution: object, e: Event) -> bool:
    return bool(e["ev"] == "done" and e["e"] == execution)


def wait_for_a_running_step(procs: Cluster, owner: Proc) -> None:
    """Until a step body started in ``owner`` that has not finished yet."""
    seen = -math.inf
    while True:
        started = procs.wait_for(functools.partial(_started_after, owner.pid, seen), 30, owner)
        if procs.find(functools.partial(_done, started["e"])) is None:
            return
        seen = started["t"]  # it ended before we looked: wait for the next one


def handover(where: StoreLocation, workdir: Path) -> None:
    """Play the test (see the module docstring) on ``where``."""
    with cluster(where, workdir) as procs:
        owner = procs.worker()
        procs.wait_for(owner_event(owner), 30, owner)
        client = procs.client("stream", "h", STEP, 0.2)
        procs.go([client])
        standby = procs.worker()
        wait_for_a_running_step(procs, owner)
        term_at = owner.signal(signal.SIGTERM)
        procs.finish(owner, 60)
        exited_at = time.monotonic()
        took = procs.wait_for(owner_event(standby, term_at), 30, standby)
        # The new owner runs the work: the client's requests made meanwhile too.
        procs.wait_for(lambda e: e["ev"] == "done" and e["pid"] == standby.pid, 30, standby)
        client.say("stop")
        procs.finish(client, 120)
        standby.signal(signal.SIGTERM)
        procs.finish(standby, 60)

    events = procs.events
    released = procs.find(lambda e: e["ev"] == "released" and e["pid"] == owner.pid)
    acquiring = procs.find(
        lambda e: e["ev"] == "acquiring" and e["pid"] == standby.pid and e["t"] > term_at
    )
    assert released is not None
    assert acquiring is not None
    problems: list[str] = []
    # Every step in flight at SIGTERM finished in the old owner.
    done_at = {e["e"]: e["t"] for e in events if e["ev"] == "done"}
    in_flight = [
        e
        for e in events
        if e["ev"] == "start"
        and e["pid"] == owner.pid
        and e["t"] < term_at
        and done_at.get(e["e"], term_at) >= term_at
    ]
    for e in in_flight:
        if e["e"] not in done_at:
            problems.append(f"step {e['step']} of {e['run']} in flight at SIGTERM never finished")
    results = check_results(events, problems)
    reruns = check_executions(events, results, {}, problems)
    if reruns:
        problems.append(f"{reruns} steps ran again after a graceful handover")
    signalled = [e["run"] for e in events if e["ev"] == "signalled"]
    left = asyncio.run(buffered_signals(where, map(app.signal_key, signalled)))
    if left:
        problems.append(f"signals left buffered (applied twice?): {left}")
    summary = (
        f"SIGTERM of the owner with {len(in_flight)} steps in flight (each {STEP} s): it "
        f"released the store {released['t'] - term_at:.2f} s after the signal and exited "
        f"{exited_at - term_at:.2f} s after it; the standby decided to take over "
        f"{acquiring['t'] - released['t']:.2f} s after the release and owned the store "
        f"{took['t'] - released['t']:.2f} s after it; {len(results)} runs"
    )
    print(summary)
    assert not problems, summary + "\n" + "\n".join(problems)
    assert in_flight, summary  # the test did hand over with work in flight
    assert acquiring["t"] - released["t"] <= HB + SLACK, summary


@pytest.mark.timeout(120)
@pytest.mark.parametrize("backend", ["local", pytest.param("s3", marks=pytest.mark.emulator)])
def test_sigterm_hands_the_store_over_with_no_run_lost_or_repeated(
    backend: str, tmp_path: Path
) -> None:
    handover(location(backend, tmp_path), tmp_path)
