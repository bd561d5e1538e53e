"""Kill -9 of the owner at random moments, with a standby always present:
a worker owns the store, a client process keeps starting and signalling
runs, and each round kills the owner (SIGKILL) at a moment of a seeded
schedule; the standby takes over (within ttl + 2 heartbeats; on a local
directory at its next poll, through the lock) and a new standby joins.

Then, from the side channel and the store:

- every run a client started ended with its expected result, and the
  client saw it through ``handle.result()``;
- no journaled step ran again: a step ran again only when its execution was
  cut short by a kill, the execution a run's result names is the step's last,
  and no step whose result the store held (read after each kill) started
  after that read;
- every request whose call returned in the client was applied exactly once:
  each start is one run (its steps ran once, but for kills), each signal was
  taken by the run it was sent to, once, and no signal is left buffered.

The schedule's seed is random and printed; ``DURABLE_SCALEOUT_SEED`` pins it,
``DURABLE_SCALEOUT_KILLS`` changes the number of rounds.
"""

from __future__ import annotations

import asyncio
import os
import random
import signal
import statistics
import time
from dataclasses import dataclass
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

KILLS = int(os.environ.get("DURABLE_SCALEOUT_KILLS", "20"))
#: A kill comes this many seconds (uniform) after the previous takeover.
MAX_DELAY = 1.0
#: Seconds a standby may take to open the store it decided to take.
OPEN_LIMIT = 5.0


@dataclass(frozen=True)
class Takeover:
    """Seconds from a kill -9 to the standby deciding to take the store
    (``noticed``), and from there to owning it (``opened``: opening the
    store reads the log since its last checkpoint)."""

    noticed: float
    opened: float

    @property
    def total(self) -> float:
        return self.noticed + self.opened


def spread(values: list[float]) -> str:
    """min / median / max, in seconds."""
    return (
        f"min {min(values):.2f} s, median {statistics.median(values):.2f} s, "
        f"max {max(values):.2f} s"
    )


def _seed() -> int:
    pinned = os.environ.get("DURABLE_SCALEOUT_SEED")
    return int(pinned) if pinned else random.SystemRandom().randrange(2**32)


def kill_rounds(where: StoreLocation, workdir: Path, kills: int, seed: int) -> list[Takeover]:
    """Play the rounds (see the module docstring); the takeover times."""
    rng = random.Random(seed)
    takeovers: list[Takeover] = []
    killed: dict[int, float] = {}
    reads: list[tuple[dict[str, str], float]] = []
    with cluster(where, workdir) as procs:
        owner = procs.worker()
        procs.wait_for(owner_event(owner), 30, owner)
        client = procs.client("stream", "k", 0.03, 0.1)
        procs.go([client])
        standby = procs.worker()
        took_at = time.monotonic()
        for _ in range(kills):
            delay = rng.uniform(0.0, MAX_DELAY)
            procs.joined(standby)
            time.sleep(max(0.0, took_at + delay - time.monotonic()))
            killed_at = owner.signal(signal.SIGKILL)
            killed[owner.pid] = killed_at
            owner.wait(30)
            upcoming = procs.worker(wait=False)  # so that a standby is always present
            runs = {e["run"] for e in procs.events if e["ev"] == "started"}
            reads.append((asyncio.run(journaled_executions(where, runs)), time.monotonic()))
            took = procs.wait_for(owner_event(standby, killed_at), TTL + 2 * HB + 30, standby)
            acquiring = procs.find(
                lambda e: e["ev"] == "acquiring" and e["pid"] == standby.pid  # noqa: B023
            )
            assert acquiring is not None
            took_at = took["t"]
            takeovers.append(Takeover(acquiring["t"] - killed_at, took_at - acquiring["t"]))
            owner, standby = standby, upcoming
        client.say("stop")
        procs.finish(client, 240)
        owner.signal(signal.SIGTERM)
        procs.finish(owner, 60)
        standby.signal(signal.SIGTERM)
        procs.finish(standby, 60)

    events = procs.events
    problems: list[str] = []
    results = check_results(events, problems)
    reruns = check_executions(events, results, killed, problems)
    for held, read_at in reads:
        check_held(events, held, read_at, problems)
    signalled = [e["run"] for e in events if e["ev"] == "signalled"]
    left = asyncio.run(buffered_signals(where, map(app.signal_key, signalled)))
    if left:
        problems.append(f"signals left buffered (applied twice?): {left}")
    summary = (
        f"seed={seed} kills={kills}: {len(results)} runs, {reruns} re-runs of steps cut "
        f"short; takeover after kill -9: {spread([t.total for t in takeovers])} (noticing "
        f"the owner gone {spread([t.noticed for t in takeovers])}, opening the store "
        f"{spread([t.opened for t in takeovers])})"
    )
    print(summary)
    assert not problems, summary + "\n" + "\n".join(problems)
    assert len(results) >= 2 * kills  # the client kept starting runs through the kills
    for took in takeovers:
        assert took.noticed <= TTL + 2 * HB + SLACK, summary
        assert took.opened <= OPEN_LIMIT, summary
    return takeovers


@pytest.mark.timeout(300)
def test_kill_9_of_the_owner_with_a_standby_on_a_local_store(tmp_path: Path) -> None:
    kill_rounds(location("local", tmp_path), tmp_path, KILLS, _seed())


@pytest.mark.emulator
@pytest.mark.timeout(300)
def test_kill_9_of_the_owner_with_a_standby_on_s3(tmp_path: Path) -> None:
    kill_rounds(location("s3", tmp_path), tmp_path, max(KILLS // 4, 3), _seed())
