"""`LogWriter.set_validity` and `LogWriter.stop`: a writer that stops itself (issue 14).

An owner that can no longer be sure it owns the store (its heartbeat is too
old) must commit nothing, claims included: its writer's validity check
gives a reason and the next commit stops the writer with `SelfFenced`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest

import durable
from durable.errors import Fenced, SelfFenced, StoreClosed
from durable.store.log import LogWriter, WriteBatch
from durable.store.objects import FaultyObjectStore
from durable.store.objects.base import ObjectStore
from durable.store.queue import JobStatus, Queue

Factory = Callable[[], ObjectStore]


def put(key: bytes, value: bytes) -> WriteBatch:
    return WriteBatch().put(key, value)


class Check:
    """A validity check whose answer the test sets, counting its calls."""

    def __init__(self) -> None:
        self.reason: str | None = None
        self.calls = 0

    def __call__(self) -> str | None:
        self.calls += 1
        return self.reason


async def test_a_commit_while_the_check_gives_a_reason_stops_the_writer(
    make_objects: Factory,
) -> None:
    w = await LogWriter.open(make_objects())
    check = Check()
    w.set_validity(check)
    await w.commit(put(b"before", b"1"))
    watcher = w.watchers.watch(b"never-written")
    lazy = w.commit(put(b"lazy", b"1"), lazy=True)  # pending: no flush of its own
    stopped: list[BaseException] = []
    w.add_stop_callback(stopped.append)
    check.reason = "heartbeat not renewed for 13.0 s (ttl 15.0 s)"
    with pytest.raises(SelfFenced, match=r"heartbeat not renewed for 13\.0 s") as info:
        w.commit(put(b"after", b"1"))
    failure = info.value
    assert w.failure is failure
    assert isinstance(failure, Fenced)  # everything that handles fencing handles it
    assert failure.reason == check.reason
    assert failure.url == w.url
    assert w.state.get(b"after") is None  # nothing applied
    with pytest.raises(SelfFenced):
        await watcher
    with pytest.raises(SelfFenced):
        await lazy
    assert stopped == [failure]
    check.reason = None  # the check says fine again: the writer stays stopped
    with pytest.raises(SelfFenced):
        w.commit(put(b"later", b"1"))
    with pytest.raises(SelfFenced):
        await w.watchers.watch(b"k")  # a watch after the stop fails at once
    await w.close()  # no checkpoint of a state that may be stale
    again = await LogWriter.open(make_objects())
    assert again.state.get(b"before") == b"1"
    for key in (b"lazy", b"after", b"later"):
        assert again.state.get(key) is None
    await again.close()


async def test_a_lazy_commit_is_refused_too(make_objects: Factory) -> None:
    w = await LogWriter.open(make_objects())
    w.set_validity(lambda: "paused past the ttl")
    with pytest.raises(SelfFenced, match="paused past the ttl"):
        w.commit(put(b"claim", b"1"), lazy=True)
    assert w.state.get(b"claim") is None
    await w.close()


async def test_a_claim_made_while_the_check_fails_claims_nothing(make_objects: Factory) -> None:
    q = await Queue.open(make_objects())
    job = await q.enqueue("work", b"payload")
    q.writer.set_validity(lambda: "heartbeat too old")
    with pytest.raises(SelfFenced, match="heartbeat too old"):
        await q.claim("work")
    record = q.job_record(job)
    assert record is not None
    assert record.status is JobStatus.PENDING
    assert q.lease_expiry("work", job) is None  # the lease taken for it was dropped
    await q.close()
    reopened = await Queue.open(make_objects())
    record = reopened.job_record(job)
    assert record is not None
    assert record.status is JobStatus.PENDING
    assert record.attempts == 0
    await reopened.close()


async def test_the_check_runs_once_per_commit_and_none_removes_it(make_objects: Factory) -> None:
    w = await LogWriter.open(make_objects())
    check = Check()
    w.set_validity(check)
    for i in range(5):
        w.commit(put(b"k%d" % i, b"v"), lazy=i % 2 == 0)
    await w.flush()
    assert check.calls == 5
    w.set_validity(None)
    check.reason = "ignored"
    await w.commit(put(b"free", b"v"))
    assert check.calls == 5
    assert w.failure is None
    await w.close()


async def test_stop_fails_what_is_not_written_yet_and_lets_the_write_in_flight_land(
    make_objects: Factory,
) -> None:
    gate = asyncio.Event()
    gate.set()
    entered = asyncio.Event()

    async def gated(_seconds: float) -> None:
        entered.set()
        await gate.wait()

    objects = FaultyObjectStore(make_objects(), clock_sleep=gated)
    w = await LogWriter.open(objects)
    objects.latency = 1.0  # every call now goes through `gated`
    gate.clear()
    entered.clear()
    in_flight = asyncio.ensure_future(w.commit(put(b"in-flight", b"1")))
    await entered.wait()  # the flusher is writing the group holding it
    queued = w.commit(put(b"queued", b"1"))  # joins the next group
    w.stop(SelfFenced(w.url, "heartbeat lost", w.seq))
    with pytest.raises(SelfFenced):
        await queued
    gate.set()
    assert await in_flight == w.seq  # it landed: its caller is told so
    assert isinstance(w.failure, SelfFenced)
    w.stop(StoreClosed(w.url))  # once stopped, stop is a no-op
    assert isinstance(w.failure, SelfFenced)
    objects.latency = 0.0
    await w.close()
    again = await LogWriter.open(make_objects())
    assert again.state.get(b"in-flight") == b"1"
    assert again.state.get(b"queued") is None
    await again.close()


def test_self_fenced_is_exported_and_documented() -> None:
    assert durable.SelfFenced is SelfFenced
    assert "SelfFenced" in durable.errors.__doc__  # type: ignore[operator]
    err = SelfFenced("memory://x", "why", 7)
    assert err.seq == 7
    assert err.reason == "why"
    assert not err.transient


async def test_a_write_in_flight_that_finds_itself_fenced_after_stop_keeps_the_first_failure(
    make_objects: Factory,
) -> None:
    gate = asyncio.Event()
    entered = asyncio.Event()

    async def gated(_seconds: float) -> None:
        entered.set()
        await gate.wait()

    objects = FaultyObjectStore(make_objects(), clock_sleep=gated)
    gate.set()
    w = await LogWriter.open(objects)
    objects.latency = 1.0
    gate.clear()
    entered.clear()
    in_flight = asyncio.ensure_future(w.commit(put(b"in-flight", b"1")))
    await entered.wait()
    w.stop(SelfFenced(w.url, "heartbeat lost", w.seq))
    newer = await LogWriter.open(make_objects())  # takes the name the flush is writing
    gate.set()
    with pytest.raises(Fenced) as info:
        await in_flight
    assert not isinstance(info.value, SelfFenced)  # that write was fenced by `newer`
    assert isinstance(w.failure, SelfFenced)  # the writer's own failure stays the first
    objects.latency = 0.0
    await w.close()
    assert newer.state.get(b"in-flight") is None
    await newer.close()
