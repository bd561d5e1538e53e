"""Crash torture: kill -9 a worker running a mixed decorator workload, over and over.

    python -m tests.crash.torture --kills 200 [--store PATH|URL|local|s3|gcs|azure]
                                  [--storage-options JSON] [--seed N] [--workdir DIR]

A worker process (`torture_child`) runs the workload of `torture_workload`
(multi-step workflows, gathered steps, durable sleeps, signals, child
workflows, a flaky retried step, a journaled failure, publishes, a long
paced run, ``@job`` maps). The driver kills it with SIGKILL at a random
moment (after a random number of step starts since it came up, or a random
time, whichever is first, plus a random delay), reads what the store holds
(a read-only `QueueReader`: the journal of every run, the member records of
every batch), and starts the next worker. After ``--kills`` kills a last
worker runs everything to its end.

Signals: the driver decides when each run's signal is sent (before the run
waits on it, or once the side channel says it waits) and writes the request
to a file; the worker sends it (only one process may own the store).

Then it checks, from the side channel (every step body execution, fsynced
before the step returns) and the stores read after each kill:

- every run and batch reached its expected result, and every run's last
  published value is the last it published;
- no step ran after a kill at which the store already held its result
  (a journaled step never runs again; the same for a settled job);
- every step ran at most once per worker, except the retries of a failing
  step within one worker, and ran again in a later worker only after a
  kill that cut it short: at most one re-run per step in flight at a kill.

The random seed is printed; ``--seed`` reproduces a run's kill schedule.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))  # as a script: the workload beside it

import procs
import torture_workload as w

from durable.decorators.archive import ARCHIVE_KEY, _decode
from durable.decorators.codec import Codec
from durable.decorators.jobs.mapping import group_id_for_key
from durable.decorators.journal import STEP, decode_entry, journal_prefix
from durable.decorators.runtimes import MEMO_PREFIX
from durable.engine.keys import member_key
from durable.engine.memo import MemoStore
from durable.engine.records import decode_member_record
from durable.errors import WorkflowFailed
from durable.store.queue import QueueReader
from durable.testing import cloud
from durable.testing.cloud import StoreLocation

CHILD = str(Path(__file__).with_name("torture_child.py"))
#: Seconds a worker may take to open the store; the finish to end everything.
READY_TIMEOUT = 60.0
FINISH_TIMEOUT = 300.0
#: A kill comes after 1..MAX_STARTS step starts or MIN..MAX_WAIT seconds
#: since the worker opened the store, whichever is first.
MAX_STARTS = 30
MIN_WAIT, MAX_WAIT = 0.05, 2.5
POLL = 0.01

Step = tuple[str, str]  # (run, label)


@dataclass
class Report:
    """What a torture did and found."""

    seed: int
    kills: int
    executions: int = 0
    #: Steps that ran again in a later worker (each after a kill cut it short).
    reruns: int = 0
    results: dict[str, Any] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)
    seconds: float = 0.0

    def summary(self) -> str:
        """One paragraph for a log."""
        verdict = "OK" if not self.problems else f"{len(self.problems)} PROBLEMS"
        return (
            f"torture seed={self.seed} kills={self.kills}: {verdict}; {self.executions} step "
            f"executions, {self.reruns} re-runs of steps in flight at a kill, "
            f"{len(self.results)} runs and batches ended, {self.seconds:.1f} s"
        )


class SideChannel:
    """The driver's reader of the side channel (new events since the last read)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._offset = 0

    def new(self) -> list[dict[str, Any]]:
        """The events appended since the last call."""
        try:
            with open(self.path, "rb") as f:
                f.seek(self._offset)
                data = f.read()
        except FileNotFoundError:
            return []
        end = data.rfind(b"\n") + 1
        self._offset += end
        return [json.loads(line) for line in data[:end].split(b"\n") if line]


class Signals:
    """When the driver sends each mixed run's signal: some before the run
    waits (the signal is buffered), most once it does, some a worker later."""

    def __init__(self, path: Path, rng: random.Random) -> None:
        self.path = path
        self.rng = rng
        self.sent: set[str] = set()
        self.early: set[str] = set()
        self.waiting: dict[str, int] = {}  # run -> cycle it was seen waiting

    def started(self, runs: list[str]) -> None:
        """Decide, for runs just started, which get their signal early."""
        for run in runs:
            if run not in self.sent and self.rng.random() < 0.3:
                self.early.add(run)

    def seen(self, event: dict[str, Any]) -> None:
        """Note a run that waits for its signal."""
        if event["ev"] == "waits":
            self.waiting.setdefault(event["run"], event["c"] + self.rng.choice((0, 0, 1)))

    def send_due(self, cycle: int) -> None:
        """Write the requests that are due in ``cycle``."""
        due = [r for r in self.early if r not in self.sent]
        due += [r for r, c in self.waiting.items() if c <= cycle and r not in self.sent]
        self.send(due)

    def send(self, runs: list[str]) -> None:
        """Write a request for each of ``runs`` (durable before it returns)."""
        lines = b"".join(
            json.dumps({"key": w.signal_key(r), "value": w.signal_value(r)}).encode() + b"\n"
            for r in sorted(set(runs) - self.sent)
        )
        if not lines:
            return
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, lines)
            os.fsync(fd)
        finally:
            os.close(fd)
        self.sent.update(runs)


# ----------------------------------------------------------------- workers


def _spawn(where: StoreLocation, workdir: Path, cycle: int, kills: int, mode: str) -> Any:
    argv = [CHILD, *where.argv(), str(workdir), str(cycle), str(kills), mode]
    with open(workdir / "err.log", "ab") as err:
        return procs.spawn(argv, stdout=procs.DEVNULL, stderr=err)


def _kill(proc: Any) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)


def _work_and_kill(
    where: StoreLocation,
    workdir: Path,
    cycle: int,
    kills: int,
    rng: random.Random,
    side: SideChannel,
    signals: Signals,
    events: list[dict[str, Any]],
) -> None:
    """One worker of cycle ``cycle``, killed at a random moment."""
    proc = _spawn(where, workdir, cycle, kills, "work")
    try:
        starts_wanted = rng.randint(1, MAX_STARTS)
        wait = rng.uniform(MIN_WAIT, MAX_WAIT)
        ready_at = None
        starts = 0
        deadline = time.monotonic() + READY_TIMEOUT
        while True:
            for event in side.new():
                events.append(event)
                signals.seen(event)
                if event["c"] != cycle:
                    continue
                if event["ev"] == "ready":
                    ready_at = time.monotonic()
                elif event["ev"] == "started":
                    signals.started(w.Plan(kills).mixed_runs(range(event["waves"])))
                elif event["ev"] == "start":
                    starts += 1
            signals.send_due(cycle)
            if proc.poll() is not None:
                raise AssertionError(
                    f"worker {cycle} exited with {proc.returncode}: "
                    f"{(workdir / 'err.log').read_text()[-3000:]}"
                )
            now = time.monotonic()
            if ready_at is None:
                assert now < deadline, f"worker {cycle} did not open the store"
            elif starts >= starts_wanted or now - ready_at >= wait:
                break
            time.sleep(POLL)
        time.sleep(rng.uniform(0.0, 0.03))
    finally:
        _kill(proc)
    events.extend(side.new())


def _finish(
    where: StoreLocation,
    workdir: Path,
    kills: int,
    side: SideChannel,
    signals: Signals,
    events: list[dict[str, Any]],
) -> None:
    """The last worker: sends what is left and runs everything to its end."""
    signals.send(w.Plan(kills).mixed_runs())
    proc = _spawn(where, workdir, kills, kills, "finish")
    try:
        proc.wait(timeout=FINISH_TIMEOUT)
    except subprocess.TimeoutExpired:
        _kill(proc)
        raise AssertionError(f"the finishing worker did not end in {FINISH_TIMEOUT} s") from None
    events.extend(side.new())
    if proc.returncode != 0:
        err = (workdir / "err.log").read_text()[-3000:]
        raise AssertionError(f"the finishing worker exited with {proc.returncode}: {err}")


# ------------------------------------------------------------- the store


async def stored_results(where: StoreLocation, runs: set[str], batches: int) -> set[Step]:
    """The steps whose result (or error) the store holds, and the settled jobs,
    read through a read-only view (nothing runs, nothing is written)."""
    reader = await QueueReader.open(where.url, storage_options=where.options)
    try:
        codec, held = Codec(mode="msgpack"), set()  # it never unpickles: errors as text
        memos = MemoStore(reader.reader.objects, MEMO_PREFIX)
        for run in runs:
            rows = reader.kv.snapshot(journal_prefix(run))
            if not rows:  # a terminated run's journal may be in its archive
                archived = await memos.run_memo(run).get(ARCHIVE_KEY)
                if archived is not None:
                    rows = [(b"%d" % p, e) for p, e in _decode(archived, run).journal.items()]
            for key, value in rows:
                entry = decode_entry(value, run, int(key.rsplit(b"/", 1)[-1]))
                if entry.kind == STEP and entry.ok is not None:
                    held.add((run, codec.loads(entry.ok, what="a result").split("=")[0]))
                elif entry.kind == STEP and entry.err is not None:
                    error = codec.loads_error(entry.err, what="an error")
                    assert isinstance(error, WorkflowFailed), error
                    held.add((run, error.message.split(":")[0]))
        for batch in range(batches):
            group = group_id_for_key("torture.square", w.batch_name(batch))
            for i in range(w.ITEMS):
                raw = reader.kv_get(member_key(group, f"item-{i}"))
                if raw is not None and decode_member_record(raw).termination is not None:
                    held.add((w.batch_name(batch), f"item-{i}"))
        return held
    finally:
        await reader.close()


# ----------------------------------------------------------------- checks


def check(
    plan: w.Plan, events: list[dict[str, Any]], held_after_kill: list[set[Step]], report: Report
) -> None:
    """Check the side channel and the stores read after each kill (see the
    module docstring); problems go to ``report.problems``."""
    problem = report.problems.append
    expected: dict[str, Any] = {"marathon": w.expected_marathon(plan)}
    expected |= {run: w.expected_mixed(run) for run in plan.mixed_runs()}
    expected |= {w.batch_name(b): w.expected_batch(b) for b in range(plan.waves)}
    for event in events:  # every worker after the end of a run notes its result again
        if event["ev"] == "result" and event["run"] not in report.results:
            got = event.get("value", event.get("error"))
            report.results[event["run"]] = got
            if got != expected.get(event["run"]):
                problem(
                    f"{event['run']} ended with {got!r} (noted by worker {event['c']}), "
                    f"expected {expected[event['run']]!r}"
                )
        elif event["ev"] == "result" and (
            event.get("value", event.get("error")) != report.results[event["run"]]
        ):
            problem(f"{event['run']} ended differently for worker {event['c']}")
    for name in sorted(set(expected) - set(report.results)):
        problem(f"{name} never ended")
    published = {e["run"]: e["value"] for e in events if e["ev"] == "published"}
    for run in plan.mixed_runs():
        if published.get(run) != w.expected_published(run):
            problem(f"{run} published {published.get(run)!r}, expected the last of its values")

    # Executions of each step, by worker.
    runs: dict[Step, dict[int, list[dict[str, Any]]]] = defaultdict(lambda: defaultdict(list))
    for event in events:
        if event["ev"] in ("start", "done", "fail"):
            runs[(event["run"], event["step"])][event["c"]].append(event)
    for k, held in enumerate(held_after_kill):
        for step in sorted(held - set(runs)):
            problem(f"after kill {k} the store held a result of {step}, which never ran")
    for step, by_cycle in sorted(runs.items()):
        starts = [e for c in sorted(by_cycle) for e in by_cycle[c] if e["ev"] == "start"]
        report.executions += len(starts)
        if [e["n"] for e in starts] != list(range(1, len(starts) + 1)):
            problem(f"{step}: executions counted {[e['n'] for e in starts]}")
        cycles = sorted(c for c in by_cycle if any(e["ev"] == "start" for e in by_cycle[c]))
        report.reruns += len(cycles) - 1
        for c in cycles:
            _check_worker(step, c, by_cycle[c], problem)
        first_held = next((k for k, held in enumerate(held_after_kill) if step in held), None)
        if first_held is not None and cycles[-1] > first_held:
            problem(
                f"{step} ran in worker {cycles[-1]} though the store held its result "
                f"after kill {first_held}"
            )
        for c in cycles[:-1]:
            if c >= len(held_after_kill):
                problem(f"{step} ran in worker {c} and again later, yet {c} was not killed")


def _check_worker(
    step: Step, cycle: int, events: list[dict[str, Any]], problem: Callable[[str], None]
) -> None:
    """Within one worker a step runs once, or retries after failures."""
    starts = [e for e in events if e["ev"] == "start"]
    ends = {e["n"]: e["ev"] for e in events if e["ev"] != "start"}
    for e in starts[:-1]:
        if ends.get(e["n"]) != "fail":
            problem(f"{step} ran again in worker {cycle} after execution {e['n']} did not fail")


# ----------------------------------------------------------------- torture


def torture(where: StoreLocation, kills: int, seed: int, workdir: Path) -> Report:
    """Run the torture on store ``where``; see the module docstring."""
    started = time.monotonic()
    rng = random.Random(seed)
    plan = w.Plan(kills)
    report = Report(seed, kills)
    side = SideChannel(workdir / "side.jsonl")
    signals = Signals(workdir / "signals.jsonl", rng)
    events: list[dict[str, Any]] = []
    held_after_kill: list[set[Step]] = []
    for cycle in range(kills):
        _work_and_kill(where, workdir, cycle, kills, rng, side, signals, events)
        runs = {e["run"] for e in events if e["ev"] in ("start", "waits")}
        held_after_kill.append(asyncio.run(stored_results(where, runs, plan.waves)))
    _finish(where, workdir, kills, side, signals, events)
    check(plan, events, held_after_kill, report)
    report.seconds = time.monotonic() - started
    return report


@contextlib.contextmanager
def _location(store: str, options: str | None, workdir: Path) -> Iterator[StoreLocation]:
    if store in ("local", *cloud.CLOUD_BACKENDS):
        yield asyncio.run(cloud.new_location(store, workdir))
    else:
        yield StoreLocation("given", store, json.loads(options or "{}"))


def main(argv: list[str] | None = None) -> int:
    """The command line; see the module docstring."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kills", type=int, default=20)
    parser.add_argument("--store", default="local", help="a path or URL, or: local, s3, gcs, azure")
    parser.add_argument("--storage-options", help="JSON, for a --store URL")
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--workdir", type=Path, default=None)
    args = parser.parse_args(argv)
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(2**32)
    print(f"torture seed={seed} kills={args.kills}", flush=True)
    with contextlib.ExitStack() as stack:
        workdir = args.workdir or Path(stack.enter_context(tempfile.TemporaryDirectory()))
        workdir.mkdir(parents=True, exist_ok=True)
        where = stack.enter_context(_location(args.store, args.storage_options, workdir))
        report = torture(where, args.kills, seed, workdir)
    print(report.summary())
    for line in report.problems:
        print("  " + line)
    return 1 if report.problems else 0


if __name__ == "__main__":
    sys.exit(main())
