"""Opening a store survives one transient error at any call (issue 13 point 8).

Every read, list, probe and delete made while a writer or a reader opens
retries transient errors within `LogOptions.write_retry_seconds`; a
permanent error fails the open at once. Each test injects one fault at each
open-time call in turn, on a store with a checkpoint, a log after it and a
probe object a crashed open left behind.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from durable.errors import MissingGuarantee, ObjectStoreError
from durable.store.log import LogOptions, LogReader, LogWriter, WriteBatch
from durable.store.log.writer import PROBE_PREFIX
from durable.store.objects import FaultyObjectStore, MemoryObjectStore
from durable.store.queue import OpenOptions, Queue, QueueReader
from durable.testing import MockClock, SimulatedCrash

OPS = ("get", "put", "create", "list", "delete")
EXPECTED = {b"a": b"1", b"b": b"2", b"c": b"3"}


async def _template() -> MemoryObjectStore:
    """A store as a crashed writer leaves it: checkpoint, log tail, orphan probe."""
    objects = MemoryObjectStore()
    w = await LogWriter.open(objects, LogOptions(checkpoint_on_close=False))
    await w.commit(WriteBatch().put(b"a", b"1"))
    await w.checkpoint()
    await w.commit(WriteBatch().put(b"b", b"2"))
    await w.commit(WriteBatch().put(b"c", b"3"))
    await w.close()
    await objects.create(f"{PROBE_PREFIX}leftover", b"first")
    return objects


async def _copy(template: MemoryObjectStore) -> MemoryObjectStore:
    objects = MemoryObjectStore()
    for name in await template.list(""):
        await objects.put(name, await template.get(name))
    return objects


Closer = Callable[[], Awaitable[None]]
#: Opens a store; returns its state and how to close it.
Opener = Callable[[FaultyObjectStore], Awaitable[tuple[dict[bytes, bytes], Closer]]]


async def _nothing() -> None:
    pass


async def _open_writer(objects: FaultyObjectStore) -> tuple[dict[bytes, bytes], Closer]:
    w = await LogWriter.open(objects)
    return dict(w.state.scan()), w.close


async def _open_queue(objects: FaultyObjectStore) -> tuple[dict[bytes, bytes], Closer]:
    q = await Queue.open(objects, OpenOptions(clock=MockClock()))
    return dict(q.writer.state.scan()), q.close


async def _open_reader(objects: FaultyObjectStore) -> tuple[dict[bytes, bytes], Closer]:
    return dict((await LogReader.open(objects)).state.scan()), _nothing


async def _open_queue_reader(objects: FaultyObjectStore) -> tuple[dict[bytes, bytes], Closer]:
    return dict((await QueueReader.open(objects)).reader.state.scan()), _nothing


OPENERS: dict[str, Opener] = {
    "writer": _open_writer,
    "queue": _open_queue,
    "reader": _open_reader,
    "queue-reader": _open_queue_reader,
}


async def _calls_at_open(opener: Opener) -> dict[str, int]:
    """How many calls of each operation one clean open makes."""
    objects = FaultyObjectStore(await _copy(await _template()))
    _, close = await opener(objects)
    counts = {op: objects.calls[op] for op in OPS}
    await close()
    return counts


async def _open_with(opener: Opener, script: Callable[[FaultyObjectStore], None]) -> Any:
    inner = await _copy(await _template())
    objects = FaultyObjectStore(inner)
    script(objects)
    state, close = await opener(objects)
    await close()
    return state, inner


@pytest.mark.parametrize("kind", sorted(OPENERS))
@pytest.mark.parametrize("fault", ["error", "timeout-before", "timeout-after"])
async def test_one_transient_fault_at_any_open_call_is_retried(kind: str, fault: str) -> None:
    opener = OPENERS[kind]
    counts = await _calls_at_open(opener)
    assert counts["list"] >= 2  # ckpt/ and log/
    assert counts["get"] >= 2  # the checkpoint and the log after it
    if kind in ("writer", "queue"):
        assert counts["create"] >= 3  # the probe twice, the open marker
        assert counts["delete"] >= 1  # the probes
    tried = 0
    for op, n in counts.items():
        for i in range(n):

            def script(objects: FaultyObjectStore, op: str = op, i: int = i) -> None:
                if fault == "error":
                    objects.fail_next(op, skip=i)
                else:
                    objects.timeout_next(op, after=fault == "timeout-after", skip=i)

            state, inner = await _open_with(opener, script)
            assert {k: state.get(k) for k in EXPECTED} == EXPECTED, (op, i)
            if kind in ("writer", "queue"):
                assert await inner.list(PROBE_PREFIX) == [], (op, i)  # no probe left behind
            tried += 1
    assert tried == sum(counts.values())


class Denied(ObjectStoreError):
    transient = False


@pytest.mark.parametrize("kind", sorted(OPENERS))
async def test_a_permanent_error_at_open_fails_at_once(kind: str) -> None:
    opener = OPENERS[kind]
    counts = await _calls_at_open(opener)
    for op, n in counts.items():
        for i in range(n):
            inner = await _copy(await _template())
            objects = FaultyObjectStore(inner)
            objects.fail_next(op, Denied(f"denied {op} #{i}"), skip=i)
            started = time.monotonic()
            with pytest.raises(Denied):
                await opener(objects)
            assert time.monotonic() - started < 5.0, (op, i)
            assert objects.calls[op] <= n, (op, i)  # the refused call was not retried


async def test_transient_errors_past_the_window_fail_the_open() -> None:
    objects = FaultyObjectStore(await _copy(await _template()))
    objects.fail_next("list", count=10_000)
    started = time.monotonic()
    with pytest.raises(ObjectStoreError) as exc:
        await LogWriter.open(objects, LogOptions(write_retry_seconds=0.2))
    assert exc.value.transient
    assert time.monotonic() - started < 5.0
    assert objects.calls["list"] > 2  # retried within the window


async def test_probes_left_by_a_crashed_open_are_removed_by_the_next() -> None:
    inner = await _copy(await _template())
    crashing = FaultyObjectStore(inner)
    crashing.crash_after_writes(1)  # the probe's first create lands, then the process dies
    with pytest.raises(SimulatedCrash):
        await LogWriter.open(crashing)
    probes = await inner.list(PROBE_PREFIX)
    assert len(probes) == 2  # this crash's and the template's
    w = await LogWriter.open(inner)
    assert await inner.list(PROBE_PREFIX) == []
    assert dict(w.state.scan()) == EXPECTED
    await w.close()


async def test_a_failed_probe_delete_is_retried_and_leaves_no_orphan() -> None:
    inner = MemoryObjectStore()
    objects = FaultyObjectStore(inner)
    objects.fail_next("delete", count=3)
    w = await LogWriter.open(objects)
    assert await inner.list(PROBE_PREFIX) == []
    await w.close()


async def test_a_concurrent_opens_sweep_deleting_our_probe_fails_over_to_a_new_probe() -> None:
    """Writer A opens (and sweeps every probe) between B's two probe creates:
    B's second create then succeeds as on a broken backend; B checks again
    under a new name and opens, fencing A."""
    shared = MemoryObjectStore()
    opened: list[LogWriter] = []

    class RacingStore(FaultyObjectStore):
        raced = False

        async def create(self, name: str, data: bytes) -> None:
            probes = await shared.list(PROBE_PREFIX) if name.startswith(PROBE_PREFIX) else []
            if name in probes and not self.raced:
                self.raced = True  # B's second create: A opens and sweeps right now
                opened.append(await LogWriter.open(shared))
                assert name not in await shared.list(PROBE_PREFIX)  # A deleted B's probe
            await super().create(name, data)

    racing = RacingStore(shared)
    b = await LogWriter.open(racing)
    assert racing.raced
    [a] = opened
    assert b.seq > a.seq
    assert await shared.list(PROBE_PREFIX) == []
    await b.commit(WriteBatch().put(b"b", b"1"))
    assert a.failure is None  # fenced at its next write
    with pytest.raises(Exception, match="fenced"):
        await a.commit(WriteBatch().put(b"a", b"1"))
    await b.close()
    await a.close()


async def test_a_backend_that_ignores_preconditions_is_still_refused_after_retries() -> None:
    class IgnoresPreconditions(MemoryObjectStore):
        async def create(self, name: str, data: bytes) -> None:
            await self.put(name, data)

    objects = FaultyObjectStore(IgnoresPreconditions())
    with pytest.raises(MissingGuarantee, match="second create"):
        await LogWriter.open(objects)
    assert objects.calls["create"] == 6  # three checks of two creates each
    assert await objects.list("") == []
