"""Crashes of the owner while it applies the inbox, and corrupt request objects.

A crash between the commit that applies a request and the delete of its
object (the delete fails, then a new owner opens the store) leaves the
request in the inbox: the new owner finds its done record and applies it
no second time. Each test counts what a second application would change: a
signal applied twice buffers (its waiter took the first), a submit applied
twice after its run ended starts it again, a group mark applied twice
writes two markers. A crash inside an operation, after its commit, is
finished by the next owner (a woken waiter, a removed step).

A request object that does not decode is moved to ``inbox-corrupt/``, logged
as an error event naming its key, and never blocks the requests behind it.
"""

from __future__ import annotations

import asyncio

import pytest
from cluster_helpers import KEY, QUEUE, Factory, Opener, Owner, echo, wait_then_echo

from durable.cluster.inbox import InboxWriter
from durable.cluster.requests import (
    CORRUPT_PREFIX,
    INBOX_PREFIX,
    NONCE_SIZE,
    REQ_PREFIX,
    SignalRequest,
    encode_request,
    submit_name,
)
from durable.engine import RunSpec, RuntimeOptions, TerminalStatus, Terminated
from durable.engine import keys as engine_keys
from durable.errors import ObjectStoreError, StoreError
from durable.store.clock import MockClock
from durable.testing import FaultyObjectStore, capture_logs


def permanent_error() -> ObjectStoreError:
    """A delete that fails for good (not retried)."""
    error = ObjectStoreError("injected: the process died before its delete")
    error.transient = False
    return error


async def start_waiting(owner: Owner, run_id: str) -> None:
    """Submit ``run_id`` and run step 0 until it waits on `KEY`."""
    sub = await owner.runtime.submit(RunSpec(b"in", run_id=run_id))
    worker = owner.runtime.spawn()
    try:
        await asyncio.wait_for(owner.queue.wait_for_completion(sub.job_id, None), 30)
    finally:
        await worker.shutdown()


async def apply_but_fail_the_delete(owner: Owner, faulty: FaultyObjectStore) -> None:
    """One pass whose commits land but whose delete fails."""
    faulty.fail_next("delete", permanent_error())
    with pytest.raises(ObjectStoreError, match="before its delete"):
        await owner.applier.apply_now()


# ------------------------------------------------- crash before the delete


async def test_a_signal_applied_before_a_crash_is_not_applied_again(
    make_objects: Factory, clock: MockClock, owner_of: Opener
) -> None:
    faulty = FaultyObjectStore(make_objects())
    first = await owner_of(make_objects(), wait_then_echo, applier_store=faulty)
    await start_waiting(first, "r1")
    posted = await InboxWriter(make_objects(), clock).signal(QUEUE, KEY, b"yes")
    await apply_but_fail_the_delete(first, faulty)
    assert await make_objects().list(INBOX_PREFIX) == [posted.name]

    second = await owner_of(make_objects(), wait_then_echo)  # the next owner
    assert await second.applier.apply_now() == 0
    assert await make_objects().list(INBOX_PREFIX) == []
    # Applied twice, the signal would be buffered: its waiter took the first.
    assert second.queue.kv.get(engine_keys.signal_buffer_key(KEY)) is None
    end = await second.run_until_done("r1")
    assert end.outcome.result == b"yes"  # type: ignore[attr-defined]
    assert second.runner.ran == [("r1", 1)]


async def test_a_submit_applied_before_a_crash_does_not_start_its_ended_run_again(
    make_objects: Factory, clock: MockClock, owner_of: Opener
) -> None:
    faulty = FaultyObjectStore(make_objects())
    first = await owner_of(make_objects(), echo, applier_store=faulty)
    assert await InboxWriter(make_objects(), clock).submit(QUEUE, RunSpec(b"in", run_id="r1"))
    await apply_but_fail_the_delete(first, faulty)
    await first.run_until_done("r1")  # the run ends before the crash

    second = await owner_of(make_objects(), echo)
    assert await second.applier.apply_now() == 0
    assert await make_objects().list(INBOX_PREFIX) == []
    state = second.runtime.status("r1")
    assert state is not None
    assert isinstance(state.state, Terminated)
    assert second.queue.stats(QUEUE).pending == 0  # no step 0 of a second run
    assert first.runner.ran + second.runner.ran == [("r1", 0)]


async def test_a_group_mark_applied_before_a_crash_writes_one_marker(
    make_objects: Factory, clock: MockClock, owner_of: Opener
) -> None:
    options = RuntimeOptions(group_retention=60.0)
    faulty = FaultyObjectStore(make_objects())
    first = await owner_of(make_objects(), options=options, applier_store=faulty)
    await InboxWriter(make_objects(), clock).group_mark(QUEUE, "g1")
    await apply_but_fail_the_delete(first, faulty)
    clock.advance(1.0)  # a second marker would have another time

    second = await owner_of(make_objects(), options=options)
    assert await second.applier.apply_now() == 0
    assert second.queue.kv.count(engine_keys.group_terminals_prefix(QUEUE)) == 1


async def test_the_requests_applied_before_a_failed_pass_are_deleted(
    make_objects: Factory, clock: MockClock, owner_of: Opener
) -> None:
    # The second request's read fails for good: the pass ends, the first
    # request (applied, durable) is deleted all the same.
    faulty = FaultyObjectStore(make_objects())
    owner = await owner_of(make_objects(), applier_store=faulty)
    w = InboxWriter(make_objects(), clock)
    first = await w.signal(QUEUE, KEY, b"1")
    second = await w.signal(QUEUE, KEY, b"2")
    faulty.fail_next("get", permanent_error(), skip=1)
    with pytest.raises(ObjectStoreError):
        await owner.applier.apply_now()
    assert await make_objects().list(INBOX_PREFIX) == [second.name]
    assert owner.queue.kv.get(first.done_key) is not None
    assert await owner.applier.apply_now() == 1
    assert owner.queue.kv.get(engine_keys.signal_buffer_key(KEY)) == b"2"


# ------------------------------------------------ crash inside an operation


async def test_a_signal_buffered_before_a_crash_wakes_its_waiter_under_the_next_owner(
    make_objects: Factory, clock: MockClock, owner_of: Opener
) -> None:
    # The commit that buffers the signal (with its done record) lands; the
    # process dies before the commit that wakes the waiter.
    faulty = FaultyObjectStore(make_objects())
    first = await owner_of(faulty, wait_then_echo, applier_store=make_objects())
    await start_waiting(first, "r1")
    await InboxWriter(make_objects(), clock).signal(QUEUE, KEY, b"yes")
    await first.queue.writer.flush()
    faulty.crash_after_writes(1)
    with pytest.raises(StoreError):
        await first.applier.apply_now()
    assert faulty.crashed

    second = await owner_of(make_objects(), wait_then_echo)
    assert second.queue.kv.get(engine_keys.signal_buffer_key(KEY)) == b"yes"
    assert await second.applier.apply_now() == 0  # applied already: handed over, not again
    assert second.queue.kv.get(engine_keys.signal_buffer_key(KEY)) is None
    end = await asyncio.wait_for(second.run_until_done("r1"), 30)
    assert end.outcome.result == b"yes"  # type: ignore[attr-defined]


async def test_a_cancel_recorded_before_a_crash_is_finished_by_the_next_owner(
    make_objects: Factory, clock: MockClock, owner_of: Opener
) -> None:
    # The commit that flags the run lands; the process dies before the
    # commit that removes its scheduled step and terminates it.
    faulty = FaultyObjectStore(make_objects())
    first = await owner_of(faulty, wait_then_echo, applier_store=make_objects())
    await start_waiting(first, "r1")
    await InboxWriter(make_objects(), clock).cancel(QUEUE, "r1")
    await first.queue.writer.flush()
    faulty.crash_after_writes(1)
    with pytest.raises(StoreError):
        await first.applier.apply_now()

    second = await owner_of(make_objects(), wait_then_echo)
    assert await second.applier.apply_now() == 0
    state = second.runtime.status("r1")
    assert state is not None
    assert isinstance(state.state, Terminated)
    assert state.state.termination.status is TerminalStatus.CANCELLED


# --------------------------------------------------------- corrupt objects


def signal_bytes(payload: bytes) -> bytes:
    return encode_request(SignalRequest(QUEUE, b"\x01" * NONCE_SIZE, KEY, payload))


@pytest.mark.parametrize(
    ("name", "data"),
    [
        pytest.param(REQ_PREFIX + "0000", b"\x00garbage", id="garbage"),
        pytest.param(REQ_PREFIX + "0000", signal_bytes(b"x")[:-1], id="truncated"),
        pytest.param(submit_name("r9"), signal_bytes(b"x"), id="a-signal-under-submit"),
        pytest.param(INBOX_PREFIX + "stray/0000", signal_bytes(b"x"), id="a-stray-name"),
    ],
)
async def test_a_corrupt_request_is_moved_aside_logged_and_blocks_nothing(
    make_objects: Factory, clock: MockClock, owner_of: Opener, name: str, data: bytes
) -> None:
    owner = await owner_of(make_objects())
    await make_objects().create(name, data)
    w = InboxWriter(make_objects(), clock)
    assert await w.submit(QUEUE, RunSpec(b"in", run_id="r1"))
    behind = await w.signal(QUEUE, KEY, b"after")  # sorts after the corrupt one
    with capture_logs() as logs:
        assert await owner.applier.apply_now() == 2
    assert await make_objects().list(INBOX_PREFIX) == []
    moved = CORRUPT_PREFIX + name.removeprefix(INBOX_PREFIX)
    assert await make_objects().list(CORRUPT_PREFIX) == [moved]
    assert await make_objects().get(moved) == data
    [event] = [e for e in logs if e["event"] == "corrupt inbox request moved aside"]
    assert (event["key"], event["moved_to"], event["log_level"]) == (name, moved, "error")
    assert owner.queue.kv.get(behind.done_key) is not None
    assert owner.queue.kv.get(engine_keys.signal_buffer_key(KEY)) == b"after"
    assert owner.runtime.status("r1") is not None


async def test_a_second_corrupt_object_of_one_name_keeps_the_first(
    make_objects: Factory, owner_of: Opener
) -> None:
    owner = await owner_of(make_objects())
    name = REQ_PREFIX + "0000"
    await make_objects().create(name, b"first")
    await owner.applier.apply_now()
    await make_objects().create(name, b"second")
    await owner.applier.apply_now()
    moved = await make_objects().list(CORRUPT_PREFIX)
    assert len(moved) == 2
    contents = {await make_objects().get(n) for n in moved}
    assert contents == {b"first", b"second"}


async def test_a_submit_meeting_a_corrupt_object_of_its_name_waits_for_it_to_go(
    make_objects: Factory, clock: MockClock, owner_of: Opener
) -> None:
    # The running applier moves the corrupt object aside; the submit then
    # writes its own, which the applier applies.
    owner = await owner_of(make_objects())
    await make_objects().create(submit_name("r1"), b"corrupt")
    started = owner.queue.kv.watch(engine_keys.run_key("r1"))
    owner.applier.start()
    try:
        submitted = InboxWriter(make_objects(), clock).submit(QUEUE, RunSpec(b"in", run_id="r1"))
        assert await asyncio.wait_for(submitted, 30)
        await asyncio.wait_for(started, 30)
    finally:
        await owner.applier.stop()
    assert owner.runtime.status("r1") is not None
    assert await make_objects().list(CORRUPT_PREFIX) == [CORRUPT_PREFIX + "submit/r1"]


async def test_a_writer_retries_a_transient_create_failure_and_a_lost_answer(
    make_objects: Factory, clock: MockClock, owner_of: Opener
) -> None:
    owner = await owner_of(make_objects())
    faulty = FaultyObjectStore(make_objects())
    w = InboxWriter(faulty, clock)
    faulty.fail_next("create")
    assert await w.submit(QUEUE, RunSpec(b"in", run_id="r1"))
    faulty.timeout_next("create", after=True)  # it landed; the answer was lost
    assert await w.submit(QUEUE, RunSpec(b"in", run_id="r2"))  # its own bytes: new
    faulty.timeout_next("create", after=True)
    posted = await w.signal(QUEUE, KEY, b"x")
    assert await make_objects().list(INBOX_PREFIX) == [
        posted.name,
        submit_name("r1"),
        submit_name("r2"),
    ]
    assert await owner.applier.apply_now() == 3
