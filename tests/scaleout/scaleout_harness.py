"""The driver's side of the scale-out process tests: processes and checks.

`Cluster` starts the worker and client processes of one test on one store
(`scaleout_worker`, `scaleout_client`), all noting into one side channel
(`scaleout_app`), and reaps them however the test ends. The checks read
the side channel (every step body execution, every client call that
returned, every change of ownership) and, for what only the store knows,
a read-only view of the store (which never fences the owner).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import procs
import scaleout_app as app

from durable.cluster.assignment import AssignmentChain, Table
from durable.cluster.manifest import partition_of, partition_prefix
from durable.decorators.archive import ARCHIVE_KEY, _decode
from durable.decorators.codec import Codec
from durable.decorators.journal import STEP, decode_entry, journal_prefix
from durable.decorators.runtimes import MEMO_PREFIX
from durable.engine import keys
from durable.engine.memo import MemoStore
from durable.store.objects import open_object_store
from durable.store.objects.prefixed import PrefixedObjectStore
from durable.store.queue import QueueReader
from durable.testing import cloud
from durable.testing.cloud import StoreLocation

HERE = Path(__file__).parent
WORKER = str(HERE / "scaleout_worker.py")
CLIENT = str(HERE / "scaleout_client.py")
#: The membership timing of every worker: short, so that tests take seconds,
#: and long enough that an owner's stalls on a loaded 2-core CI machine (2.8 s
#: seen, against a self-fence at 0.8 ttl) do not make it give up the store
#: before the test kills or pauses it.
TTL, HB = 4.0, 0.5
#: Process scheduling on a busy 2-core machine (two pool tests at once on S3,
#: eight worker processes and moto: 6.9 s seen against ttl + 2 heartbeats = 5 s).
SLACK = 2.5

Event = dict[str, Any]
Match = Callable[[Event], bool]


def location(backend: str, tmp_path: Path) -> StoreLocation:
    """A fresh store on ``backend`` (skips a cloud one without its emulator)."""
    import pytest

    if backend in cloud.CLOUD_BACKENDS and not cloud.available(backend):
        pytest.skip(f"{cloud.ENV[backend]} is unset: start the emulators with scripts/test")
    return asyncio.run(cloud.new_location(backend, tmp_path))


class Proc:
    """A child process of a `Cluster`."""

    def __init__(self, popen: procs.Child, what: str) -> None:
        self.popen = popen
        self.what = what

    @property
    def pid(self) -> int:
        return self.popen.pid

    def signal(self, sig: int) -> float:
        """Send ``sig``; the time it was sent (``time.monotonic()``)."""
        os.kill(self.pid, sig)
        return time.monotonic()

    def say(self, line: str) -> None:
        """Write ``line`` to the child's stdin."""
        assert self.popen.stdin is not None
        self.popen.stdin.write(line + "\n")
        self.popen.stdin.flush()

    def wait(self, timeout: float) -> int:
        """Wait for the child to exit; its exit code."""
        return self.popen.wait(timeout=timeout)

    def __repr__(self) -> str:
        return f"<{self.what} pid={self.pid}>"


class Cluster:
    """The processes of one test on ``where``, and their side channel in ``workdir``."""

    def __init__(self, where: StoreLocation, workdir: Path) -> None:
        self.where = where
        self.side = workdir / "side.jsonl"
        self.errors = workdir / "stderr.log"
        self.tail = app.Tail(self.side)
        self.procs: list[Proc] = []

    @property
    def events(self) -> list[Event]:
        """Every event read from the side channel so far."""
        self.tail.new()
        return self.tail.events

    def _spawn(self, argv: list[str], what: str, **kwargs: Any) -> Proc:
        with open(self.errors, "ab") as err:
            popen = procs.spawn(argv, stderr=err, text=True, **kwargs)
        proc = Proc(popen, what)
        self.procs.append(proc)
        return proc

    def worker(
        self,
        *,
        ttl: float = TTL,
        heartbeat: float = HB,
        wait: bool = True,
        commits: bool = False,
        partitions: int | None = None,
        submit: str | None = None,
    ) -> Proc:
        """Start a worker; returns once it noted ``member`` (it owns the store
        or stands by), or at once without ``wait`` (see `joined`). With
        ``commits`` it notes each log object it creates (``commit``); with
        ``partitions`` it is a member of the pool on a store of that many
        partitions; ``submit`` (``NAME:N:STEPS:PAUSE``) makes it start runs
        too (see `scaleout_worker`)."""
        flags = ["commits"] if commits else []
        if partitions is not None:
            flags.append(f"partitions={partitions}")
        if submit is not None:
            flags.append(f"submit={submit}")
        proc = self._spawn(
            [WORKER, *self.where.argv(), str(self.side), str(ttl), str(heartbeat), *flags],
            "worker",
            stdout=procs.DEVNULL,
        )
        if wait:
            self.joined(proc)
        return proc

    def joined(self, proc: Proc, timeout: float = 60.0) -> Event:
        """Wait until worker ``proc`` noted ``member``; that event."""
        return self.wait_for(lambda e: e["ev"] == "member" and e["pid"] == proc.pid, timeout, proc)

    def client(self, scenario: str, *args: object) -> Proc:
        """Start a client playing ``scenario``; returns once it is ready
        (`go` starts it)."""
        proc = self._spawn(
            [CLIENT, *self.where.argv(), str(self.side), scenario, *map(str, args)],
            f"client {scenario}",
            stdin=procs.PIPE,
            stdout=procs.PIPE,
        )
        assert proc.popen.stdout is not None
        ready = proc.popen.stdout.readline()
        assert ready == "ready\n", f"{proc} did not start: {self.stderr()}"
        return proc

    def go(self, clients: Iterable[Proc]) -> None:
        """Start ``clients`` together."""
        for client in clients:
            client.say("go")

    def find(self, match: Match) -> Event | None:
        """The first event so far for which ``match`` is true."""
        return next((e for e in self.events if match(e)), None)

    def wait_for(self, match: Match, timeout: float = 30.0, proc: Proc | None = None) -> Event:
        """The first event (so far or to come) for which ``match`` is true;
        `AssertionError` after ``timeout`` seconds, or when ``proc`` exits
        first."""
        deadline = time.monotonic() + timeout
        while True:
            found = self.find(match)
            if found is not None:
                return found
            if proc is not None and proc.popen.poll() is not None:
                raise AssertionError(f"{proc} exited with {proc.popen.returncode}: {self.stderr()}")
            if time.monotonic() > deadline:
                raise AssertionError(f"no matching event in {timeout} s: {self.stderr()}")
            time.sleep(0.005)

    def finish(self, proc: Proc, timeout: float = 120.0) -> None:
        """Wait for ``proc`` to exit 0."""
        try:
            code = proc.wait(timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"{proc} did not exit in {timeout} s: {self.stderr()}") from None
        assert code == 0, f"{proc} exited with {code}: {self.stderr()}"

    def stderr(self) -> str:
        """The tail of every child's stderr."""
        try:
            return self.errors.read_text()[-4000:]
        except FileNotFoundError:
            return ""

    def close(self) -> None:
        """Kill every child still running (a SIGSTOPped one too) and reap it."""
        for proc in self.procs:
            if proc.popen.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(proc.pid, signal.SIGKILL)
                    os.kill(proc.pid, signal.SIGCONT)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.popen.wait(timeout=30)
            for stream in (proc.popen.stdin, proc.popen.stdout):
                if stream is not None:
                    with contextlib.suppress(OSError):
                        stream.close()


@contextlib.contextmanager
def cluster(where: StoreLocation, workdir: Path) -> Iterator[Cluster]:
    """A `Cluster`, every child of which is killed when the block ends."""
    procs = Cluster(where, workdir)
    try:
        yield procs
    finally:
        procs.close()


# ------------------------------------------------------------------ checks


def owner_event(proc: Proc, after: float = 0.0) -> Match:
    """Matches ``proc`` becoming the owner after time ``after``."""
    return lambda e: e["ev"] == "owner" and e["pid"] == proc.pid and e["t"] > after


def expected_result(run: str, plain_steps: int = app.PLAIN_STEPS) -> Any:
    """What a run started by `scaleout_client` ends with (its ``x`` and
    signal; the executions are checked by `check_executions`); ``plain``
    runs have ``plain_steps`` steps."""
    kind = run.rsplit("-", 1)[1]
    k = int(kind[1:])
    if kind[0] == "p":
        return {"x": k + plain_steps}
    if kind[0] == "s":
        return {"x": k + 2, "signal": f"v-{run}"}
    return "RunCancelled"


def check_results(
    events: list[Event], problems: list[str], plain_steps: int = app.PLAIN_STEPS
) -> dict[str, Any]:
    """Every run a client started ended once, as expected (``plain`` runs
    of ``plain_steps`` steps), and each signal a client sent was taken by
    exactly the run it was sent to, once. The results by run."""
    started = [e["run"] for e in events if e["ev"] == "started"]
    if len(set(started)) != len(started):
        problems.append("a run id was started twice")
    results: dict[str, Any] = {}
    for e in events:
        if e["ev"] != "result":
            continue
        if e["run"] in results:
            problems.append(f"{e['run']}: two results")
        results[e["run"]] = e.get("value", e.get("error"))
    for run in started:
        got, want = results.get(run), expected_result(run, plain_steps)
        if isinstance(want, dict):
            if not isinstance(got, dict) or {k: got.get(k) for k in want} != want:
                problems.append(f"{run} ended with {got!r}, expected {want!r}")
        elif got != want:
            problems.append(f"{run} ended with {got!r}, expected {want!r}")
    taken = defaultdict(list)
    for run, value in results.items():
        if isinstance(value, dict) and "signal" in value:
            taken[value["signal"]].append(run)
    for e in events:
        if e["ev"] == "signalled" and taken.get(e["value"]) != [e["run"]]:
            problems.append(f"signal {e['value']!r} taken by {taken.get(e['value'])}")
    for e in events:
        if e["ev"] == "cancelled" and e["answer"] is not True:
            problems.append(f"cancel of {e['run']} answered {e['answer']!r}")
    return results


Holder = tuple[int, int | None]


def ownerships(
    events: list[Event], interrupted: dict[int, float]
) -> dict[Holder, list[tuple[float, float | None]]]:
    """Each worker's spans of ownership ``(from, to)``, by holder ``(pid,
    partition)`` (partition None for an unpartitioned store): from its
    ``owner`` event to its next ``standby`` event (of the same partition
    ``p``, on a partitioned store), or to when it was killed or paused
    (``interrupted``: pid -> when); ``to`` is None for one still owning at
    the end."""
    spans: dict[Holder, list[tuple[float, float | None]]] = defaultdict(list)
    for e in events:
        holder = (e["pid"], e.get("p"))
        if e["ev"] == "owner":
            spans[holder].append((e["t"], None))
        elif e["ev"] == "standby" and spans[holder] and spans[holder][-1][1] is None:
            spans[holder][-1] = (spans[holder][-1][0], e["t"])
    for (pid, _), held in spans.items():
        at = interrupted.get(pid)
        if at is None:
            continue
        for i, (begin, end) in enumerate(held):
            if begin <= at and (end is None or end > at):
                held[i] = (begin, at)
    return spans


def check_executions(
    events: list[Event],
    results: dict[str, Any],
    interrupted: dict[int, float],
    problems: list[str],
    partitions: int | None = None,
) -> int:
    """Steps run only in an owner (of the run's partition, on a store of
    ``partitions``), once per ownership, and again only after the ownership
    they ran in ended (the process was killed or paused, or lost the store
    or partition: ``interrupted`` names the pids killed or paused, and
    when); the execution a run's result names for a step is its last (a
    journaled step never ran again). The number of re-runs."""
    spans = ownerships(events, interrupted)

    def span_of(e: Event) -> tuple[float, float | None] | None:
        p = None if partitions is None else partition_of(e["run"], partitions)
        for begin, end in spans.get((e["pid"], p), []):
            if begin <= e["t"] and (end is None or e["t"] < end):
                return begin, end
        return None

    starts: dict[tuple[str, str], list[Event]] = defaultdict(list)
    for e in events:
        if e["ev"] == "start":
            starts[(e["run"], e["step"])].append(e)
    reruns = 0
    for (run, label), appended in sorted(starts.items()):
        # In the order they began (their stamp), not the order their lines
        # reached the side channel: a process paused between stamping a line
        # and writing it appends it after lines stamped later.
        runs = sorted(appended, key=lambda e: e["t"])
        where = f"step {label} of {run}"
        owned = [span_of(e) for e in runs]
        for e, span in zip(runs, owned, strict=True):
            if span is None:
                problems.append(f"{where} started ({e['e']}) in {e['pid']}, not owning the store")
        if len({(e["pid"], span) for e, span in zip(runs, owned, strict=True)}) != len(runs):
            problems.append(f"{where} ran twice in one ownership: {[e['e'] for e in runs]}")
        value = results.get(run)
        journaled = value.get("e", {}).get(label) if isinstance(value, dict) else None
        if journaled is not None and runs[-1]["e"] != journaled:
            problems.append(
                f"{where}: its journaled execution {journaled} is not its last "
                f"({[e['e'] for e in runs]}): a journaled step ran again"
            )
        for e, span, later in zip(runs, owned, runs[1:], strict=False):
            if span is not None and (span[1] is None or later["t"] < span[1]):
                problems.append(
                    f"{where} ran again ({later['e']}) while the owner of {e['e']} went on"
                )
        reruns += len(runs) - 1
    for run, value in results.items():
        if isinstance(value, dict):
            for label, e in value.get("e", {}).items():
                if not starts.get((run, label)):
                    problems.append(f"{run}'s result names {label} execution {e}, never started")
    return reruns


async def journaled_executions(
    where: StoreLocation, runs: Iterable[str], partitions: int | None = None
) -> dict[str, str]:
    """The execution id of every step result the store holds, by run and
    position (``"<run>/<position>" -> execution``), read through a
    read-only view of each run's store (its partition's, on a store of
    ``partitions``): nothing is written, nobody fenced."""
    root = await open_object_store(where.url, where.options)
    by_store: dict[int | None, list[str]] = defaultdict(list)
    for run in runs:
        by_store[None if partitions is None else partition_of(run, partitions)].append(run)
    held: dict[str, str] = {}
    try:
        for p, its_runs in sorted(by_store.items(), key=lambda item: item[0] or 0):
            objects = root if p is None else PrefixedObjectStore(root, partition_prefix(p))
            reader = await QueueReader.open(objects)
            try:
                held.update(await _journaled(reader, its_runs))
            finally:
                await reader.close()
    finally:
        await root.close()
    return held


async def _journaled(reader: QueueReader, runs: Iterable[str]) -> dict[str, str]:
    codec, held = Codec(mode="msgpack"), {}
    memos = MemoStore(reader.reader.objects, MEMO_PREFIX)
    for run in runs:
        rows = reader.kv.snapshot(journal_prefix(run))
        if not rows:  # a terminated run's journal is in its archive
            archived = await memos.run_memo(run).get(ARCHIVE_KEY)
            if archived is not None:
                rows = [(b"%d" % p, e) for p, e in _decode(archived, run).journal.items()]
        for key, value in rows:
            position = int(key.rsplit(b"/", 1)[-1])
            entry = decode_entry(value, run, position)
            if entry.kind == STEP and entry.ok is not None:
                held[f"{run}/{position}"] = codec.loads(entry.ok, what="a result")["e"]
    return held


async def buffered_signals(where: StoreLocation, keys_: Iterable[str]) -> list[str]:
    """The signal keys under which the store still buffers a signal."""
    reader = await QueueReader.open(where.url, storage_options=where.options)
    try:
        return [k for k in keys_ if reader.kv_get(keys.signal_buffer_key(k)) is not None]
    finally:
        await reader.close()


def check_held(
    events: list[Event], held: dict[str, str], read_at: float, problems: list[str]
) -> None:
    """No execution of a step started after ``read_at`` if the store held a
    result of that step then (``held``: `journaled_executions`)."""
    label_of = {e["e"]: (e["run"], e["step"]) for e in events if e["ev"] == "start"}
    held_steps = {label_of[e] for e in held.values() if e in label_of}
    for e in events:
        if e["ev"] == "start" and e["t"] > read_at and (e["run"], e["step"]) in held_steps:
            problems.append(
                f"step {e['step']} of {e['run']} started ({e['e']}) though the store held "
                "its result"
            )


async def listing(where: StoreLocation, prefix: str) -> list[str]:
    """The names of the store's objects under ``prefix``."""
    objects = await open_object_store(where.url, where.options)
    try:
        return await objects.list(prefix)
    finally:
        await objects.close()


async def create(where: StoreLocation, name: str, data: bytes) -> None:
    """Create object ``name`` in the store, as another process would."""
    objects = await open_object_store(where.url, where.options)
    try:
        await objects.create(name, data)
    finally:
        await objects.close()


async def assignment(where: StoreLocation, partitions: int) -> Table:
    """The newest version of a partitioned store's assignment table (read
    only: its chain is LISTed and read)."""
    objects = await open_object_store(where.url, where.options)
    try:
        chain = AssignmentChain(objects, partitions)
        await chain.load()
        return chain.table
    finally:
        await objects.close()
