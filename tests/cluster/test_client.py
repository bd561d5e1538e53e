"""A client of a store (`ClientQueue`, `ClientRuntime`) against a real owner.

The owner (a `Queue`, a `WorkflowRuntime` with a worker, its `InboxApplier`)
and the client share the test's store (a local directory, memory). The
client reads through its own view, which its follower keeps caught up, and
writes only requests: runs start, get signalled and cancelled, and the
client sees them end, with no write of its own to the log.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
from cluster_helpers import KEY, QUEUE, Factory, Opener, Owner, echo, wait_then_echo

from durable.cluster.client import ClientQueue, ClientRuntime
from durable.engine import RunSpec, RuntimeOptions, TerminalStatus, Terminated, keys
from durable.engine.signals import SignalOutcome
from durable.errors import InputMismatch, InvalidArgument, ReadOnlyStore, StoreNotInitialized
from durable.store.clock import MockClock
from durable.store.log.format import LOG_PREFIX
from durable.store.objects.base import ObjectStore
from durable.store.queue import SettlementEffects

LIMIT = 20.0


@pytest.fixture
async def client_of(clock: MockClock) -> AsyncIterator[object]:
    opened: list[ClientQueue] = []

    async def _open(store: ObjectStore, **pacing: float) -> ClientRuntime:
        client = await ClientQueue.open(store, clock, **pacing)
        opened.append(client)
        return ClientRuntime(client, _no_runner, options=RuntimeOptions(queue_name=QUEUE))

    yield _open
    for client in opened:
        await client.close()


class _NoRunner:
    async def run_step(self, step: object) -> object:
        raise AssertionError("a client runs no step")


_no_runner = _NoRunner()


async def serving(owner: Owner) -> object:
    """Start the owner's worker and inbox applier (stopped by the fixture's close)."""
    owner.applier.start()
    return owner.runtime.spawn()


async def test_a_client_starts_a_run_and_sees_it_end(
    make_objects: Factory, owner_of: Opener, client_of: object
) -> None:
    owner = await owner_of(make_objects(), echo)
    worker = await serving(owner)
    client = await client_of(make_objects())  # type: ignore[operator]
    logs_before = len(await make_objects().list(LOG_PREFIX))
    sub = await client.submit(RunSpec(b"hello", run_id="r1"))
    assert (sub.run_id, sub.newly_submitted) == ("r1", True)
    end = await asyncio.wait_for(client.wait("r1"), LIMIT)
    assert end is not None
    assert end.termination.status is TerminalStatus.SUCCEEDED
    assert end.outcome is not None
    assert end.outcome.result == b"hello"
    # A run id of the client's own making.
    mine = await client.submit(RunSpec(b"x"))
    assert mine.run_id
    assert mine.newly_submitted
    assert (await asyncio.wait_for(client.wait(mine.run_id), LIMIT)) is not None
    await worker.shutdown()  # type: ignore[attr-defined]
    assert len(await make_objects().list(LOG_PREFIX)) > logs_before  # the owner wrote them


async def test_a_client_signals_and_cancels_runs(
    make_objects: Factory, owner_of: Opener, client_of: object
) -> None:
    owner = await owner_of(make_objects(), wait_then_echo)
    worker = await serving(owner)
    client = await client_of(make_objects())  # type: ignore[operator]
    await client.submit(RunSpec(b"in", run_id="signalled"))
    wait_key = keys.signal_wait_key(KEY)
    while client.queue.kv.get(wait_key) is None:  # the client's view of the wait
        fut = client.queue.kv.watch(wait_key)
        await asyncio.wait_for(fut, LIMIT)
    # Known to the view and active: the same input is the same run, another a clash.
    again = await client.submit(RunSpec(b"in", run_id="signalled"))
    assert again.newly_submitted is False
    with pytest.raises(InputMismatch):
        await client.submit(RunSpec(b"other", run_id="signalled"))
    assert await client.signal(KEY, b"approved") is SignalOutcome.SENT
    end = await asyncio.wait_for(client.wait("signalled"), LIMIT)
    assert end is not None
    assert end.outcome is not None
    assert end.outcome.result == b"approved"

    await client.submit(RunSpec(b"in", run_id="cancelled"))
    assert await client.cancel("cancelled") is True  # started by this client: sent
    end = await asyncio.wait_for(client.wait("cancelled"), LIMIT)
    assert end is not None
    assert end.termination.status is TerminalStatus.CANCELLED
    assert await client.cancel("cancelled") is False  # terminated: nothing sent
    assert await client.cancel("never-started") is False
    await worker.shutdown()  # type: ignore[attr-defined]


async def test_a_client_writes_nothing_but_requests(
    make_objects: Factory, owner_of: Opener, client_of: object
) -> None:
    owner = await owner_of(make_objects(), echo)
    client = await client_of(make_objects())  # type: ignore[operator]
    with pytest.raises(ReadOnlyStore, match="does not own the store"):
        client.spawn()
    with pytest.raises(ReadOnlyStore):
        await client.queue.commit_effects(object())  # type: ignore[arg-type]
    effects = SettlementEffects().kv_put(b"app/a", b"b")
    with pytest.raises(InvalidArgument, match="owns the store"):
        await client.submit(RunSpec(b"x", run_id="fx", effects=effects))
    status = client.status("nobody")
    assert status is None
    assert owner.runtime.status("fx") is None


async def test_a_client_of_a_store_nobody_opened_is_told_so(clock: MockClock) -> None:
    from durable.store.objects import MemoryObjectStore

    with pytest.raises(StoreNotInitialized, match=r"no durable store at .*start a worker"):
        await ClientQueue.open(MemoryObjectStore(), clock)


async def test_a_client_sees_a_run_another_client_started(
    make_objects: Factory, owner_of: Opener, client_of: object
) -> None:
    owner = await owner_of(make_objects(), echo)
    worker = await serving(owner)
    first = await client_of(make_objects())  # type: ignore[operator]
    second = await client_of(make_objects())  # type: ignore[operator]
    a, b = await asyncio.gather(
        first.submit(RunSpec(b"same", run_id="shared")),
        second.submit(RunSpec(b"same", run_id="shared")),
    )
    # One of the two wrote the request first. The other finds it in the
    # inbox (False) or, if the owner applied and deleted it in between,
    # writes its own, which the owner applies as a duplicate (True).
    assert a.run_id == b.run_id == "shared"
    assert True in (a.newly_submitted, b.newly_submitted)
    ends = await asyncio.wait_for(
        asyncio.gather(first.wait("shared"), second.wait("shared")), LIMIT
    )
    assert all(e is not None and isinstance(e.termination, object) for e in ends)
    status = second.status("shared")
    assert status is not None
    assert isinstance(status.state, Terminated)
    assert owner.runner.ran == [("shared", 0)]  # one run, its step run once
    await worker.shutdown()  # type: ignore[attr-defined]


async def test_a_client_whose_view_lags_does_not_call_a_run_unknown(
    make_objects: Factory, owner_of: Opener, client_of: object
) -> None:
    # The client's view polls only when asked (an hour's pace): it has not
    # seen the run the owner started, yet waiting on it, its status and a
    # cancel answer from the store, not from the stale view.
    owner = await owner_of(make_objects(), echo)
    client = await client_of(make_objects(), busy=3600.0, idle=3600.0)  # type: ignore[operator]
    await client.client.follower.refreshed()  # its first poll: the next in an hour
    await owner.runtime.submit(RunSpec(b"hi", run_id="elsewhere"))
    await owner.run_until_done("elsewhere")
    assert client.status("elsewhere") is None  # not polled since
    end = await asyncio.wait_for(client.wait("elsewhere"), LIMIT)
    assert end is not None
    assert end.outcome is not None
    assert end.outcome.result == b"hi"
    await owner.runtime.submit(RunSpec(b"x", run_id="later"))
    assert await client.cancel("later") is True  # seen after one more read: sent
    assert await asyncio.wait_for(client.wait("nobody"), LIMIT) is None


async def test_a_client_that_starts_runs_and_never_looks_holds_only_the_unapplied(
    make_objects: Factory, owner_of: Opener, client_of: object, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A web server that starts runs and hands their ids elsewhere: its
    # memory of the runs it asked for drops those its view shows, each time
    # that memory has doubled (here from 8).
    import durable.cluster.client as client_module

    monkeypatch.setattr(client_module, "_PRUNE_FLOOR", 8)
    owner = await owner_of(make_objects(), echo)
    worker = await serving(owner)
    client = await client_of(make_objects())  # type: ignore[operator]
    for i in range(7):
        await client.submit(RunSpec(b"x", run_id=f"fire-{i}"))
    assert len(client.client.started) == 7
    for i in range(7):  # applied and seen by the client's view
        await asyncio.wait_for(client.until_visible(f"fire-{i}", None), LIMIT)
        client.client.started[f"fire-{i}"] = b"x"  # as if never looked at
    await client.submit(RunSpec(b"x", run_id="fire-7"))  # the 8th: a prune
    assert set(client.client.started) <= {"fire-7"}
    await client.submit(RunSpec(b"x", run_id="fire-8"))
    assert "fire-8" in client.client.started
    await worker.shutdown()  # type: ignore[attr-defined]
