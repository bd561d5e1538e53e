"""A pool of worker processes on a partitioned store (issue 15): three
workers share a store of 8 partitions (``Engine(url, partitions=8)`` then
``engine.serve()``); 200 `plain` runs of 5 steps are started from every
process (each worker starts 30 through its own engine, all at once; a
client process streams the rest); meanwhile one owner is killed -9 right
after one of its steps started, another is paused (SIGSTOP) until its
partitions were taken over, past the TTL, then woken (SIGCONT), and a
fourth worker joins. Then, from the side channel and the store:

- every run ended once with its result (the dead worker's runs through a
  client that adopts them);
- no journaled step ran again (step bodies are counted outside the store):
  a step ran again only when the ownership of its partition it ran in
  ended (a kill, a pause, a loss, a handover), the execution a run's result
  names is the step's last, and no step whose result the store held (read
  after the kill and after the pause) started after that read; the woken
  worker started no step in the partitions it had lost;
- each partition of the killed and of the paused worker was taken over
  within ttl + 2 heartbeats (plus the slack of a busy machine) and opened
  within `OPEN_LIMIT`;
- at the end, the assignment table gives every partition to a live worker
  (the woken one, the third, the joiner), with no move pending, balanced
  (max - min <= 1), and each owner's process holds what the table says.
"""

from __future__ import annotations

import asyncio
import signal
import time
from collections import Counter
from collections.abc import Callable, Iterable
from pathlib import Path

import pytest
from scaleout_harness import (
    HB,
    SLACK,
    TTL,
    Cluster,
    Event,
    Proc,
    assignment,
    check_executions,
    check_held,
    check_results,
    cluster,
    journaled_executions,
    location,
)

from durable.cluster.assignment import Table
from durable.testing.cloud import StoreLocation

pytestmark = pytest.mark.slow

PARTITIONS = 8
STEPS = 5
#: Seconds each step body takes: runs stay in flight through the kill and the pause.
PAUSE = 0.1
#: Runs each of the three first workers starts through its own engine.
WORKER_RUNS = 30
#: Runs the client starts, one every `EVERY` seconds.
CLIENT_RUNS = 200 - 3 * WORKER_RUNS
EVERY = 0.06
#: Seconds a worker may take to open a partition it decided to take.
OPEN_LIMIT = 5.0
#: Seconds for the pool to settle after a join or a loss (rebalancing moves
#: a partition in a few heartbeats: plan, drain, hand over, open).
SETTLE = TTL + 2 * HB + SLACK + OPEN_LIMIT + 10.0


def until(cond: Callable[[], bool], timeout: float, what: str, procs: Cluster) -> float:
    """Wait until ``cond()``; the time it held (`AssertionError` after ``timeout``)."""
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"not {what} after {timeout} s: {procs.stderr()}")
        time.sleep(0.02)
    return time.monotonic()


def holding(events: Iterable[Event], pid: int) -> set[int]:
    """The partitions process ``pid`` held (opened, or opening) at its last event."""
    held: set[int] = set()
    for e in events:
        if e["pid"] == pid and "p" in e:
            if e["ev"] in ("owner", "owned"):
                held.add(e["p"])
            elif e["ev"] == "standby":
                held.discard(e["p"])
    return held


def holders(events: Iterable[Event], p: int) -> dict[int, str]:
    """pid -> ``owner`` (opening) or ``owned``, of every process whose last
    ownership event of partition ``p`` says it holds it."""
    out: dict[int, str] = {}
    for e in events:
        if e.get("p") == p and e["ev"] in ("owner", "owned"):
            out[e["pid"]] = e["ev"]
        elif e.get("p") == p and e["ev"] == "standby":
            out.pop(e["pid"], None)
    return out


def members(events: Iterable[Event]) -> dict[str, int]:
    """Member id -> pid of every pool member so far."""
    return {e["member"]: e["pid"] for e in events if e["ev"] == "pool-member"}


def settled(table: Table, events: list[Event], live: list[Proc]) -> str | None:
    """None if ``table`` gives every partition to one of ``live`` (the
    processes not killed), with no move pending, balanced, and each
    partition's owner is the one live process that holds it; else what is
    not so."""
    pid_of = members(events)
    pids = {p.pid for p in live}
    loads = Counter({pid: 0 for pid in pids})
    for p, slot in enumerate(table.slots):
        pid = pid_of.get(slot.owner) if slot.owner is not None else None
        if pid not in pids:
            return f"partition {p} owned by {slot.owner} (pid {pid}), not a live worker"
        if slot.next is not None:
            return f"partition {p} is moving to {slot.next}"
        held = {h: ev for h, ev in holders(events, p).items() if h in pids}  # not the killed
        if pid is None or held != {pid: "owned"}:
            return f"partition {p}: the table says pid {pid}, the processes {held}"
        loads[pid] += 1
    if max(loads.values()) - min(loads.values()) > 1:
        return f"unbalanced: {dict(loads)}"
    return None


def wait_settled(procs: Cluster, where: StoreLocation, live: list[Proc]) -> Table:
    """Wait until the pool settled on ``live`` (see `settled`); the table."""
    deadline = time.monotonic() + SETTLE
    while True:
        table = asyncio.run(assignment(where, PARTITIONS))
        why = settled(table, procs.events, live)
        if why is None:
            return table
        if time.monotonic() > deadline:
            raise AssertionError(f"the pool did not settle in {SETTLE} s: {why}\n{procs.stderr()}")
        time.sleep(0.1)


def taken_over(
    procs: Cluster, lost: set[int], gone: Proc, since: float
) -> dict[int, tuple[float, float]]:
    """Wait until another process opened each partition of ``lost`` (held by
    ``gone``) after ``since``; per partition, seconds from ``since`` to the
    decision to take it (its ``owner`` event) and from there to opened."""
    out: dict[int, tuple[float, float]] = {}

    def done() -> bool:
        for p in lost - out.keys():
            opened = procs.find(
                lambda e, p=p: (
                    e["ev"] == "owned" and e["p"] == p and e["pid"] != gone.pid and e["t"] > since
                )
            )
            if opened is not None:
                begun = next(
                    e
                    for e in reversed(procs.events)
                    if e["ev"] == "owner"
                    and e["p"] == p
                    and e["pid"] == opened["pid"]
                    and e["t"] <= opened["t"]
                )
                out[p] = (begun["t"] - since, opened["t"] - begun["t"])
        return out.keys() == lost

    until(done, TTL + 2 * HB + SLACK + OPEN_LIMIT + 30, f"{sorted(lost)} taken over", procs)
    return out


def results_of(events: list[Event], pid: int) -> bool:
    """True once every run process ``pid`` started has a result noted."""
    started = {e["run"] for e in events if e["ev"] == "started" and e["pid"] == pid}
    ended = {e["run"] for e in events if e["ev"] == "result"}
    return started <= ended


def pool_run(where: StoreLocation, workdir: Path) -> None:
    """Play the test (see the module docstring) on ``where``."""
    began = time.monotonic()
    reads: list[tuple[dict[str, str], float]] = []

    def held_now(procs: Cluster) -> None:
        runs = {e["run"] for e in procs.events if e["ev"] == "started"}
        reads.append((asyncio.run(journaled_executions(where, runs, PARTITIONS)), time.monotonic()))

    with cluster(where, workdir) as procs:
        w1, w2, w3 = (
            procs.worker(partitions=PARTITIONS, submit=f"w{i}:{WORKER_RUNS}:{STEPS}:{PAUSE}")
            for i in (1, 2, 3)
        )
        wait_settled(procs, where, [w1, w2, w3])
        client = procs.client("plain", "c", CLIENT_RUNS, STEPS, PAUSE, EVERY)
        procs.go([client])

        # Kill -9 of an owner right after one of its steps started.
        procs.wait_for(lambda e: e["ev"] == "submitted" and e["pid"] == w1.pid, 30, w1)
        now = time.monotonic()
        procs.wait_for(lambda e: e["ev"] == "start" and e["pid"] == w1.pid and e["t"] > now, 30)
        killed_at = w1.signal(signal.SIGKILL)
        w1.wait(30)
        killed = holding(procs.events, w1.pid)
        held_now(procs)
        after_kill = taken_over(procs, killed, w1, killed_at)

        # SIGSTOP of another owner right after one of its steps ended, until
        # its partitions were taken over (past the ttl); then SIGCONT.
        procs.wait_for(lambda e: e["ev"] == "submitted" and e["pid"] == w2.pid, 30, w2)
        now = time.monotonic()
        procs.wait_for(lambda e: e["ev"] == "done" and e["pid"] == w2.pid and e["t"] > now, 30)
        stopped_at = w2.signal(signal.SIGSTOP)
        paused = holding(procs.events, w2.pid)
        after_pause = taken_over(procs, paused, w2, stopped_at)
        cont_at = w2.signal(signal.SIGCONT)
        procs.wait_for(  # it stops writing the partitions it lost
            lambda e: e["ev"] == "standby" and e["pid"] == w2.pid and e["t"] > cont_at, 30, w2
        )
        held_now(procs)

        # A fourth worker joins; the pool settles on the live three.
        w4 = procs.worker(partitions=PARTITIONS)
        joined_at = time.monotonic()
        live = [w2, w3, w4]
        final = wait_settled(procs, where, live)
        settled_after_join = time.monotonic() - joined_at

        procs.finish(client, 180)
        for w in (w2, w3):
            until(lambda w=w: results_of(procs.events, w.pid), 120, f"{w}'s results", procs)
        adopter = procs.client("adopt")
        procs.go([adopter])
        procs.finish(adopter, 120)
        final = wait_settled(procs, where, live)
        for w in live:
            w.signal(signal.SIGTERM)
        for w in live:
            procs.finish(w, 60)

    events = procs.events
    problems: list[str] = []
    results = check_results(events, problems, plain_steps=STEPS)
    interrupted = {w1.pid: killed_at, w2.pid: stopped_at}
    reruns = check_executions(events, results, interrupted, problems, PARTITIONS)
    for held, read_at in reads:
        check_held(events, held, read_at, problems)
    started = [e for e in events if e["ev"] == "started"]
    by_submitter = Counter(e["pid"] for e in started)
    steps_run = sum(1 for e in events if e["ev"] == "start")
    loads = Counter(members(events)[s.owner] for s in final.slots if s.owner is not None)

    def worst(takeovers: dict[int, tuple[float, float]]) -> str:
        noticed = max(n for n, _ in takeovers.values())
        opened = max(o for _, o in takeovers.values())
        return f"taken over after {noticed:.2f} s, opened in {opened:.2f} s"

    summary = (
        f"{where.backend}: {len(results)} runs ({dict(by_submitter)} by submitter), "
        f"{steps_run} step executions ({reruns} re-runs of steps cut short) in "
        f"{time.monotonic() - began:.1f} s; kill -9 of {len(killed)} partitions: "
        f"{worst(after_kill)}; SIGSTOP of {len(paused)}: {worst(after_pause)}; join settled "
        f"in {settled_after_join:.2f} s; final loads {sorted(loads.values())}"
    )
    print(summary)
    assert not problems, summary + "\n" + "\n".join(problems)
    assert len(started) == 200, summary
    assert set(by_submitter) == {w1.pid, w2.pid, w3.pid, client.pid}, summary
    assert killed, summary
    assert paused, summary
    for noticed, opened in [*after_kill.values(), *after_pause.values()]:
        assert noticed <= TTL + 2 * HB + SLACK, summary
        assert opened <= OPEN_LIMIT, summary


@pytest.mark.timeout(240)
@pytest.mark.parametrize(
    "backend",
    ["local", pytest.param("s3", marks=pytest.mark.emulator)],
)
def test_a_pool_of_workers_survives_a_kill_a_pause_and_a_join(backend: str, tmp_path: Path) -> None:
    pool_run(location(backend, tmp_path), tmp_path)
