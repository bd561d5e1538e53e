"""The crash torture's workload: decorated workflows, steps and a job, the
side channel every step body writes, and the result each run must reach.

Imported by the worker (`torture_child`), which runs it, and by the driver
(`torture`), which computes the expected results and reads the side channel.
Every name is pinned, so the worker (run as ``__main__``) and the driver
agree.

**The side channel** is a file outside the store, opened ``O_APPEND``: one
JSON line per event, written with one ``write`` and fsynced before the code
that wrote it goes on. A step body writes ``start`` when it begins and
``done`` (or ``fail``) before it returns, with the run, the step's label
(unique in its run) and ``n``, its execution count of that (run, label)
over every process so far. Events carry ``c``, the worker's cycle number.

**A mixed run** (`mixed`) does, in order: a step; three steps gathered; a
durable sleep; a flaky step (it fails its first two executions, counted
through the side channel, and is retried); a step that always fails (its
error is journaled and the workflow catches it); a publish; a child
workflow (steps around a sleep); a wait for a signal the driver sends; a
step gathered with a sleep; a last step; a publish. Its result is a map of
what each returned: `expected_mixed`.

**The marathon** (`marathon`) is one long run of steps without a durable
wait, paced by the cycle number: step ``i`` blocks until the worker's cycle
reaches ``i // pace`` (or the worker finishes), so the run is in flight at
every kill, like the long workflow of a crash-looping host.

**A batch** (`square`) is a ``@job`` mapped over a few items.
"""

from __future__ import annotations

import asyncio
import collections
import hashlib
import json
import os
from dataclasses import dataclass, field
from typing import Any

import durable

#: Failures of `flaky` before it succeeds (counted over every process).
FLAKY_FAILURES = 2
#: Mixed runs started per wave, items per batch.
RUNS_PER_WAVE = 2
ITEMS = 4
#: Steps of the marathon per cycle.
PACE = 4


@dataclass
class _Channel:
    fd: int = -1
    cycle: int = 0
    finishing: bool = False
    counts: collections.Counter[tuple[str, str]] = field(default_factory=collections.Counter)


_CHANNEL = _Channel()


def open_channel(path: str, cycle: int, finishing: bool) -> None:
    """Open the side channel for this worker (cycle ``cycle``) and count the
    executions earlier workers recorded."""
    _CHANNEL.fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    _CHANNEL.cycle, _CHANNEL.finishing = cycle, finishing
    for event in read_events(path):
        if event["ev"] == "start":
            _CHANNEL.counts[(event["run"], event["step"])] += 1


def note(ev: str, **fields: Any) -> None:
    """Append one event to the side channel; durable (fsynced) on return."""
    line = json.dumps({"c": _CHANNEL.cycle, "ev": ev, **fields}, separators=(",", ":"))
    os.write(_CHANNEL.fd, line.encode() + b"\n")
    os.fsync(_CHANNEL.fd)


def read_events(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """Every complete event of the side channel."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        return []
    return [json.loads(line) for line in data.split(b"\n")[:-1] if line]


def _begin(run: str, label: str) -> int:
    n = _CHANNEL.counts[(run, label)] + 1
    _CHANNEL.counts[(run, label)] = n
    note("start", run=run, step=label, n=n)
    return n


def _pause(run: str, label: str) -> float:
    """A step's "work": 5 to 25 ms, the same on every execution."""
    digest = hashlib.sha256(f"{run}/{label}".encode()).digest()
    return 0.005 + digest[0] / 255 * 0.02


# ------------------------------------------------------------------ steps


@durable.step(name="torture.work")
async def work(label: str, x: int) -> str:
    """A plain step."""
    run = durable.run_id()
    n = _begin(run, label)
    await asyncio.sleep(_pause(run, label))
    note("done", run=run, step=label, n=n)
    return f"{label}={2 * x}"


@durable.step(
    name="torture.flaky",
    max_attempts=FLAKY_FAILURES + 1,
    backoff=durable.Backoff(initial=0.05, factor=1.0, max=0.05),
)
async def flaky(label: str, x: int) -> str:
    """Fails its first `FLAKY_FAILURES` executions ever, then succeeds."""
    run = durable.run_id()
    n = _begin(run, label)
    await asyncio.sleep(_pause(run, label))
    if n <= FLAKY_FAILURES:
        note("fail", run=run, step=label, n=n)
        raise ConnectionError(f"{label}: execution {n} fails")
    note("done", run=run, step=label, n=n)
    return f"{label}={x + 1000}"


@durable.step(
    name="torture.boom", max_attempts=2, backoff=durable.Backoff(initial=0.02, factor=1.0)
)
async def boom(label: str, x: int) -> str:
    """Always fails: its error is journaled."""
    run = durable.run_id()
    n = _begin(run, label)
    await asyncio.sleep(_pause(run, label))
    note("fail", run=run, step=label, n=n)
    raise ValueError(f"{label}: always fails")


@durable.step(name="torture.paced")
async def paced(label: str, i: int, pace: int) -> str:
    """Runs in the worker of cycle ``i // pace`` or later (or the finishing
    one); in an earlier worker it waits until it is killed."""
    run = durable.run_id()
    n = _begin(run, label)
    if not _CHANNEL.finishing and _CHANNEL.cycle < i // pace:
        await asyncio.Event().wait()
    note("done", run=run, step=label, n=n)
    return f"{label}={i}"


@durable.job(name="torture.square", max_attempts=20)
async def square(batch: int, i: int) -> int:
    """A job of batch ``batch``; its item ``i``."""
    run, label = batch_name(batch), f"item-{i}"
    n = _begin(run, label)
    await asyncio.sleep(_pause(run, label))
    note("done", run=run, step=label, n=n)
    return batch * 100 + i * i


# -------------------------------------------------------------- workflows


@durable.workflow(name="torture.leaf")
async def leaf(n: int) -> str:
    """The child workflow of a mixed run."""
    x = await work("x", n)
    await durable.sleep(0.05)
    y = await work("y", n + 1)
    return f"{x}+{y}"


@durable.workflow(name="torture.mixed")
async def mixed(n: int) -> dict[str, Any]:
    """See the module docstring."""
    run = durable.run_id()
    a = await work("a", n)
    g = list(await asyncio.gather(*(work(f"g{i}", n + i) for i in range(3))))
    await durable.sleep(0.2)
    f = await flaky("flaky", n)
    try:
        await boom("boom", n)
        caught = None
    except ValueError as e:
        caught = str(e)
    await durable.publish("progress", {"stage": "half", "n": n})
    c = await leaf(n)
    note("waits", run=run, key=signal_key(run))
    s = await durable.wait_for_signal(signal_key(run), timeout=3600)
    _, d = await asyncio.gather(durable.sleep(0.1), work("d", n))
    z = await work("z", n)
    await durable.publish("progress", {"stage": "done", "n": n})
    return {"a": a, "g": g, "f": f, "caught": caught, "c": c, "s": s, "d": d, "z": z}


@durable.workflow(name="torture.marathon")
async def marathon(steps: int, pace: int) -> int:
    """See the module docstring."""
    total = 0
    for i in range(steps):
        total += int((await paced(f"m{i}", i, pace)).split("=")[1])
    return total


# ----------------------------------------------------------- the plan


def signal_key(run: str) -> str:
    """The key mixed run ``run`` waits on."""
    return f"torture-sig-{run}"


def signal_value(run: str) -> str:
    """The value the driver sends to mixed run ``run``."""
    return f"hello {run}"


def batch_name(batch: int) -> str:
    """The side-channel run name of batch ``batch``'s jobs."""
    return f"batch-{batch}"


def mixed_input(run: str) -> int:
    """The argument of mixed run ``run`` (``mixed-W-K``)."""
    _, wave, k = run.split("-")
    return 10 * int(wave) + int(k)


@dataclass(frozen=True)
class Plan:
    """What a torture of ``kills`` kills runs: a wave of mixed runs and a
    batch starts in each of the first `waves` cycles; the marathon paces
    through every cycle."""

    kills: int

    @property
    def waves(self) -> int:
        """Waves of mixed runs (and batches)."""
        return max(1, (self.kills + 1) // 2)

    @property
    def marathon_steps(self) -> int:
        """Steps of the marathon: `PACE` per cycle, a few more at the finish."""
        return PACE * (self.kills + 1)

    def waves_by(self, cycle: int) -> range:
        """The waves started by the worker of ``cycle`` (all at the finish)."""
        return range(min(cycle + 1, self.waves))

    def mixed_runs(self, waves: range | None = None) -> list[str]:
        """The ids of the mixed runs of ``waves`` (all by default)."""
        return [
            f"mixed-{w}-{k}" for w in (waves or range(self.waves)) for k in range(RUNS_PER_WAVE)
        ]


def expected_mixed(run: str) -> dict[str, Any]:
    """The result mixed run ``run`` must reach."""
    n = mixed_input(run)
    return {
        "a": f"a={2 * n}",
        "g": [f"g{i}={2 * (n + i)}" for i in range(3)],
        "f": f"flaky={n + 1000}",
        "caught": "boom: always fails",
        "c": f"x={2 * n}+y={2 * (n + 1)}",
        "s": signal_value(run),
        "d": f"d={2 * n}",
        "z": f"z={2 * n}",
    }


def expected_marathon(plan: Plan) -> int:
    """The result of the marathon."""
    return sum(range(plan.marathon_steps))


def expected_batch(batch: int) -> list[int]:
    """The results of batch ``batch``'s map, in item order."""
    return [batch * 100 + i * i for i in range(ITEMS)]


def expected_published(run: str) -> dict[str, Any]:
    """The last value mixed run ``run`` publishes."""
    return {"stage": "done", "n": mixed_input(run)}
