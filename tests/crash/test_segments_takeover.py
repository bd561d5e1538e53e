"""Real processes on the segment medium: a writer stopped (SIGSTOP) while it
commits is taken over by a new writer process (``takeover=True``, as an
engine whose ownership protocol judged it gone), then woken.

Each round stops the current writer at a random point (an append, a roll,
a sync may be in flight), starts the next one (it replaces the lock the
stopped one still holds), lets it commit, then wakes the stopped one. After
six rounds and a final kill -9:

- every commit any writer acknowledged is in the log (nothing a woken
  writer appended took a slot that the new writer had: it got `Fenced`);
- every woken writer said "fenced" and acknowledged nothing after it lost;
- a reader that read the log all along never read a record that later
  changed: each slot's first entry is the record for good.
"""

from __future__ import annotations

import os
import random
import signal
from pathlib import Path

import procs
import pytest
from procs import reap

from durable.errors import ObjectNotFound, StoreClosed
from durable.store.log import LogWriter
from durable.store.objects import SegmentObjectStore

HERE = Path(__file__).parent
pytestmark = pytest.mark.slow

SEGMENT_BYTES = 4096  # a roll every few dozen commits


def spawn(root: Path, tag: str) -> procs.Child:
    return procs.spawn(
        [str(HERE / "segments_takeover_child.py"), str(root), str(SEGMENT_BYTES), tag],
        stdout=procs.PIPE,
        text=True,
    )


def parse(lines: list[str], acked: dict[str, set[int]]) -> list[str]:
    """Record the "ack TAG N" lines in ``acked``; the other lines."""
    other = []
    for line in lines:
        words = line.split()
        if words and words[0] == "ack":
            acked.setdefault(words[1], set()).add(int(words[2]))
        elif words:
            other.append(line.strip())
    return other


def read_until(proc: procs.Child, want: str, acked: dict[str, set[int]], acks: int = 0) -> None:
    """Read ``proc``'s lines until ``want`` was seen and ``acks`` more acks came."""
    assert proc.stdout is not None
    seen, count = want == "", 0
    while not seen or count < acks:
        line = proc.stdout.readline()
        assert line, f"writer exited early (waiting for {want!r})"
        before = sum(map(len, acked.values()))
        if line.strip() == want:
            seen = True
        parse([line], acked)
        count += sum(map(len, acked.values())) - before


async def read_log(store: SegmentObjectStore, seen: dict[int, bytes]) -> None:
    """Read every record of the log; a record read before must be unchanged."""
    for name in await store.list("log/"):
        seq = int(name.split("/")[1])
        try:
            data = await store.get(name)
        except ObjectNotFound:
            continue
        assert seen.setdefault(seq, data) == data, f"record {seq} changed after it was read"


async def test_a_stopped_writer_taken_over_and_woken_loses_and_changes_nothing(
    tmp_path: Path,
) -> None:
    root = tmp_path / "store"
    rng = random.Random(20)
    acked: dict[str, set[int]] = {}
    seen: dict[int, bytes] = {}
    reader = SegmentObjectStore(root, segment_bytes=SEGMENT_BYTES)
    stopped: tuple[str, procs.Child] | None = None
    for tag in "abcdef":
        proc = spawn(root, tag)
        # It opens although the stopped writer still holds the lock.
        read_until(proc, f"open {tag}", acked)
        if stopped is not None:
            old_tag, old = stopped
            os.kill(old.pid, signal.SIGCONT)
            assert old.stdout is not None
            rest = parse(old.stdout.read().splitlines(), acked)
            assert rest == [f"fenced {old_tag}"]
            reap(old)
            await read_log(reader, seen)
        read_until(proc, "", acked, acks=rng.randint(20, 200))
        await read_log(reader, seen)
        os.kill(proc.pid, signal.SIGSTOP)  # mid-commit: an append or a roll may be in flight
        stopped = (tag, proc)
    assert stopped is not None
    os.kill(stopped[1].pid, signal.SIGKILL)
    assert stopped[1].stdout is not None
    parse(stopped[1].stdout.read().splitlines(), acked)
    reap(stopped[1])

    await read_log(reader, seen)
    w = await LogWriter.open(SegmentObjectStore(root, segment_bytes=SEGMENT_BYTES))
    missing = [
        f"{tag}-{n}"
        for tag, ns in acked.items()
        for n in ns
        if w.state.get(f"{tag}-{n}".encode()) != b"v%d" % n
    ]
    assert missing == []
    assert set(acked) == set("abcdef")
    assert all(len(ns) >= 20 for ns in acked.values())
    w.stop(StoreClosed(w.url, "checked"))
    await w.close()
    await read_log(reader, seen)  # the reopen changed no record either
    assert len(seen) > 120
    assert len(os.listdir(root / "segments")) > 3  # it rolled, across takeovers too
