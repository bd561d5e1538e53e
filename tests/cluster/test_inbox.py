"""The inbox end to end: an `InboxWriter` writes requests into a store, a real
owner (a `Queue` and a `WorkflowRuntime` on a local directory and in memory, a
`MockClock`) applies them with its `InboxApplier`.

Round trips of every request kind; two writers submitting one run id at once;
per-writer order; request-level errors that never block the requests behind
them; and the done records, kept an hour.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable

import pytest
from cluster_helpers import KEY, QUEUE, Factory, Opener, Owner, wait_then_echo

from durable.cluster.done import DONE_INDEX_PREFIX, DONE_PREFIX, decode_done, done_key
from durable.cluster.inbox import InboxWriter
from durable.cluster.requests import INBOX_PREFIX, SUBMIT_PREFIX, submit_name
from durable.engine import (
    GroupMembership,
    Pending,
    RunOptions,
    RunSpec,
    RuntimeOptions,
    TerminalStatus,
    Terminated,
)
from durable.engine import keys as engine_keys
from durable.engine.records import decode_member_record
from durable.engine.signals import SignalOutcome
from durable.errors import InputMismatch, InvalidArgument, InvalidId
from durable.store.clock import MockClock
from durable.store.objects.base import ObjectStore
from durable.testing import capture_logs


def writer(make_objects: Factory, clock: MockClock) -> InboxWriter:
    """A client's writer: another handle on the owner's store."""
    return InboxWriter(make_objects(), clock)


async def inbox(objects: ObjectStore) -> list[str]:
    """The names in the inbox."""
    return await objects.list(INBOX_PREFIX)


def status_of(owner: Owner, run_id: str) -> object:
    """The state of run ``run_id`` (it must be known)."""
    status = owner.runtime.status(run_id)
    assert status is not None, f"run {run_id!r} is unknown"
    return status.state


async def start_waiting(owner: Owner, run_id: str) -> None:
    """Submit ``run_id`` on the owner and run step 0 until it waits on `KEY`."""
    sub = await owner.runtime.submit(RunSpec(b"in", run_id=run_id))
    worker = owner.runtime.spawn()
    try:
        await asyncio.wait_for(owner.queue.wait_for_completion(sub.job_id, None), 30)
    finally:
        await worker.shutdown()
    assert owner.queue.kv.get(engine_keys.signal_wait_key(KEY)) is not None


# ------------------------------------------------------------- round trips


async def test_a_submit_round_trips_with_its_options_and_internal_writes(
    make_objects: Factory, clock: MockClock, owner_of: Opener
) -> None:
    owner = await owner_of(make_objects())
    spec = RunSpec(
        b"input",
        run_id="r1",
        options=RunOptions(headers={"tenant": "t1"}, priority=7, max_attempts_per_step=3),
    )
    assert await writer(make_objects, clock).submit(
        QUEUE, spec, internal={b"workflow/test/r1": b"invocation"}
    )
    assert await inbox(make_objects()) == [submit_name("r1")]
    assert await owner.applier.apply_now() == 1
    assert await inbox(make_objects()) == []
    assert isinstance(status_of(owner, "r1"), Pending)
    assert owner.queue.kv.get(b"workflow/test/r1") == b"invocation"
    pointer = owner.runtime.view.pointer("r1")
    assert pointer is not None
    job = owner.queue.job_record(pointer.job_id)
    assert job is not None
    assert (job.priority, job.max_attempts, job.headers["tenant"]) == (7, 3, "t1")
    end = await owner.run_until_done("r1")
    assert end.outcome.result == b"input"  # type: ignore[attr-defined]


async def test_a_group_members_submit_round_trips_with_its_member_record(
    make_objects: Factory, clock: MockClock, owner_of: Opener
) -> None:
    owner = await owner_of(make_objects())
    spec = RunSpec(b"x", run_id="m1")
    assert await writer(make_objects, clock).submit(QUEUE, spec, GroupMembership("g1", "k1"))
    await owner.applier.apply_now()
    raw = owner.queue.kv.get(engine_keys.member_key("g1", "k1"))
    assert raw is not None
    assert decode_member_record(raw).run_id == "m1"
    record = owner.runtime.view.run_record("m1")
    assert record is not None
    assert record.member == GroupMembership("g1", "k1")


async def test_a_signal_round_trips_and_wakes_the_waiting_run(
    make_objects: Factory, clock: MockClock, owner_of: Opener
) -> None:
    owner = await owner_of(make_objects(), wait_then_echo)
    await start_waiting(owner, "r1")
    posted = await writer(make_objects, clock).signal(QUEUE, KEY, b"approved")
    assert posted.name.startswith(INBOX_PREFIX + "req/")
    assert await owner.applier.apply_now() == 1
    raw = owner.queue.kv.get(posted.done_key)
    assert raw is not None
    assert decode_done(raw).error is None
    assert owner.queue.kv.get(engine_keys.signal_buffer_key(KEY)) is None  # delivered
    end = await owner.run_until_done("r1")
    assert end.outcome.result == b"approved"  # type: ignore[attr-defined]


async def test_a_cancel_round_trips_and_cancels_the_run(
    make_objects: Factory, clock: MockClock, owner_of: Opener
) -> None:
    owner = await owner_of(make_objects(), wait_then_echo)
    await start_waiting(owner, "r1")
    await writer(make_objects, clock).cancel(QUEUE, "r1")
    assert await owner.applier.apply_now() == 1
    state = status_of(owner, "r1")
    assert isinstance(state, Terminated)
    assert state.termination.status is TerminalStatus.CANCELLED


async def test_a_clear_signal_round_trips_and_discards_the_buffered_signal(
    make_objects: Factory, clock: MockClock, owner_of: Opener
) -> None:
    owner = await owner_of(make_objects())
    assert await owner.runtime.signal(KEY, b"early") is SignalOutcome.BUFFERED
    await writer(make_objects, clock).clear_signal(QUEUE, KEY)
    assert await owner.applier.apply_now() == 1
    assert owner.queue.kv.get(engine_keys.signal_buffer_key(KEY)) is None


async def test_a_group_mark_round_trips_and_writes_the_marker(
    make_objects: Factory, clock: MockClock, owner_of: Opener
) -> None:
    owner = await owner_of(make_objects(), options=RuntimeOptions(group_retention=60.0))
    await writer(make_objects, clock).group_mark(QUEUE, "g1")
    assert await owner.applier.apply_now() == 1
    prefix = engine_keys.group_terminals_prefix(QUEUE)
    [(marker, _)] = owner.queue.kv.scan(prefix, limit=10).entries
    assert marker.endswith(b"g1")


async def test_bad_requests_are_typed_errors_at_the_writer_and_write_nothing(
    make_objects: Factory, clock: MockClock
) -> None:
    w = writer(make_objects, clock)
    with pytest.raises(InvalidArgument, match="needs a run id"):
        await w.submit(QUEUE, RunSpec(b"x"))
    with pytest.raises(InvalidArgument, match="under b'workflow/'"):
        await w.submit(QUEUE, RunSpec(b"x", run_id="r1"), internal={b"user/key": b"v"})
    with pytest.raises(InvalidArgument, match="correlation key"):
        await w.signal(QUEUE, "", b"x")
    with pytest.raises(InvalidArgument, match="must carry bytes"):
        await w.signal(QUEUE, KEY, "text")  # type: ignore[arg-type]
    with pytest.raises(InvalidId, match="bad id"):
        await w.cancel(QUEUE, "bad id")
    with pytest.raises(InvalidId):
        await w.group_mark(QUEUE, "")
    assert await inbox(make_objects()) == []


# ------------------------------------------------------- one run per run id


async def test_two_writers_submitting_one_run_id_at_once_make_one_run(
    make_objects: Factory, clock: MockClock, owner_of: Opener
) -> None:
    owner = await owner_of(make_objects())
    spec = RunSpec(b"same", run_id="r1")
    first, second = writer(make_objects, clock), writer(make_objects, clock)
    results = await asyncio.gather(first.submit(QUEUE, spec), second.submit(QUEUE, spec))
    assert sorted(results) == [False, True]
    assert await inbox(make_objects()) == [submit_name("r1")]
    await owner.applier.apply_now()
    await owner.run_until_done("r1")
    assert owner.runner.ran == [("r1", 0)]


async def test_two_writers_submitting_one_run_id_with_other_inputs_get_input_mismatch(
    make_objects: Factory, clock: MockClock, owner_of: Opener
) -> None:
    owner = await owner_of(make_objects())
    first, second = writer(make_objects, clock), writer(make_objects, clock)
    results = await asyncio.gather(
        first.submit(QUEUE, RunSpec(b"a", run_id="r1")),
        second.submit(QUEUE, RunSpec(b"b", run_id="r1")),
        return_exceptions=True,
    )
    assert True in results
    [error] = [r for r in results if isinstance(r, BaseException)]
    assert isinstance(error, InputMismatch)
    assert "r1" in str(error)
    await owner.applier.apply_now()
    end = await owner.run_until_done("r1")
    winner = b"a" if results[0] is True else b"b"
    assert end.outcome.result == winner  # type: ignore[attr-defined]


async def test_a_submit_after_the_first_was_applied_is_a_duplicate_at_the_owner(
    make_objects: Factory, clock: MockClock, owner_of: Opener
) -> None:
    owner = await owner_of(make_objects(), wait_then_echo)
    w = writer(make_objects, clock)
    assert await w.submit(QUEUE, RunSpec(b"in", run_id="r1"))
    await owner.applier.apply_now()
    assert await w.submit(QUEUE, RunSpec(b"in", run_id="r1"))  # a new request...
    assert await w.submit(QUEUE, RunSpec(b"in", run_id="r1")) is False  # ...in the inbox
    assert await owner.applier.apply_now() == 1
    assert owner.queue.stats(QUEUE).pending == 1  # still the one run's step 0
    records = owner.queue.kv.scan(DONE_PREFIX + submit_name("r1").encode(), limit=9).entries
    assert len(records) == 2  # one per request instance (nonce)
    assert all(decode_done(raw).error is None for _, raw in records)


async def test_an_input_mismatch_at_the_owner_is_recorded_and_blocks_nothing(
    make_objects: Factory, clock: MockClock, owner_of: Opener
) -> None:
    owner = await owner_of(make_objects(), wait_then_echo)
    await owner.runtime.submit(RunSpec(b"mine", run_id="r1"))
    w = writer(make_objects, clock)
    assert await w.submit(QUEUE, RunSpec(b"theirs", run_id="r1"))  # the inbox was empty
    assert await w.submit(QUEUE, RunSpec(b"next", run_id="r2"))
    posted = await w.signal(QUEUE, "other-key", b"after")
    with capture_logs() as logs:
        assert await owner.applier.apply_now() == 3
    assert await inbox(make_objects()) == []
    [(_, raw)] = owner.queue.kv.scan(DONE_PREFIX + submit_name("r1").encode(), limit=9).entries
    done = decode_done(raw)
    assert done.error_type == "InputMismatch"
    assert done.error is not None
    assert "r1" in done.error
    [event] = [e for e in logs if e["event"] == "inbox request failed"]
    assert event["key"] == submit_name("r1")
    assert event["log_level"] == "error"
    record = owner.runtime.view.run_record("r1")
    assert record is not None
    assert record.matches_input(b"mine")
    assert isinstance(status_of(owner, "r2"), Pending)
    assert owner.queue.kv.get(posted.done_key) is not None
    assert owner.queue.kv.get(engine_keys.signal_buffer_key("other-key")) == b"after"


async def test_a_request_for_an_unknown_queue_is_recorded_as_failed_and_logged(
    make_objects: Factory, clock: MockClock, owner_of: Opener
) -> None:
    owner = await owner_of(make_objects())
    w = writer(make_objects, clock)
    lost = await w.signal("no-such-queue", KEY, b"x")
    kept = await w.signal(QUEUE, KEY, b"y")
    with capture_logs() as logs:
        assert await owner.applier.apply_now() == 2
    raw = owner.queue.kv.get(lost.done_key)
    assert raw is not None
    assert "no-such-queue" in (decode_done(raw).error or "")
    [event] = [e for e in logs if e["event"] == "inbox request for an unknown queue"]
    assert event["key"] == lost.name
    assert event["log_level"] == "error"
    assert owner.queue.kv.get(kept.done_key) is not None
    assert owner.queue.kv.get(engine_keys.signal_buffer_key(KEY)) == b"y"
    assert await inbox(make_objects()) == []


# ---------------------------------------------------------------- ordering


async def test_a_submit_then_a_cancel_from_one_writer_cancel_the_run(
    make_objects: Factory, clock: MockClock, owner_of: Opener
) -> None:
    # req/ sorts before submit/: applied in name order the cancel would find no
    # run and the run would be left running.
    owner = await owner_of(make_objects(), wait_then_echo)
    w = writer(make_objects, clock)
    assert await w.submit(QUEUE, RunSpec(b"in", run_id="r1"))
    await w.cancel(QUEUE, "r1")
    assert await owner.applier.apply_now() == 2
    state = status_of(owner, "r1")
    assert isinstance(state, Terminated)
    assert state.termination.status is TerminalStatus.CANCELLED


async def test_one_writers_requests_apply_in_the_order_it_made_them(
    make_objects: Factory, clock: MockClock, owner_of: Opener
) -> None:
    owner = await owner_of(make_objects())
    w = writer(make_objects, clock)
    for payload in (b"1", b"2", b"3"):  # a later signal replaces the buffered one
        await w.signal(QUEUE, KEY, payload)
    await w.clear_signal(QUEUE, KEY)
    await w.signal(QUEUE, KEY, b"4")
    assert await owner.applier.apply_now() == 5
    assert owner.queue.kv.get(engine_keys.signal_buffer_key(KEY)) == b"4"


class TornListing(ObjectStore):
    """A store whose first LIST of ``inbox/`` misses the submissions, as a
    listing that walks ``req/`` before a submit lands in ``submit/`` would."""

    def __init__(self, inner: ObjectStore) -> None:
        self.inner = inner
        self.guarantees = inner.guarantees
        self.torn = 0

    @property
    def url(self) -> str:
        return self.inner.url

    async def get(self, name: str) -> bytes:
        return await self.inner.get(name)

    async def put(self, name: str, data: bytes) -> None:
        await self.inner.put(name, data)

    async def create(self, name: str, data: bytes) -> None:
        await self.inner.create(name, data)

    async def list(self, prefix: str) -> list[str]:
        names = await self.inner.list(prefix)
        if prefix == INBOX_PREFIX and not self.torn:
            self.torn += 1
            return [n for n in names if not n.startswith(SUBMIT_PREFIX)]
        return names

    async def delete(self, names: Iterable[str]) -> None:
        await self.inner.delete(names)


async def test_a_listing_that_shows_a_request_shows_the_submit_made_before_it(
    make_objects: Factory, clock: MockClock, owner_of: Opener
) -> None:
    torn = TornListing(make_objects())
    owner = await owner_of(make_objects(), wait_then_echo, applier_store=torn)
    w = writer(make_objects, clock)
    assert await w.submit(QUEUE, RunSpec(b"in", run_id="r1"))
    await w.cancel(QUEUE, "r1")
    assert await owner.applier.apply_now() == 2
    assert torn.torn == 1
    state = status_of(owner, "r1")
    assert isinstance(state, Terminated)
    assert state.termination.status is TerminalStatus.CANCELLED


# ------------------------------------------------------------ done records


async def test_done_records_are_kept_an_hour_then_swept(
    make_objects: Factory, clock: MockClock, owner_of: Opener
) -> None:
    owner = await owner_of(make_objects())
    posted = await writer(make_objects, clock).signal(QUEUE, KEY, b"x")
    await owner.applier.apply_now()
    kv = owner.queue.kv
    assert kv.get(posted.done_key) is not None
    assert kv.count(DONE_INDEX_PREFIX) == 1
    clock.advance(3599.0)
    await owner.applier.apply_now()
    assert kv.get(posted.done_key) is not None
    clock.advance(1.0)
    await owner.applier.apply_now()
    assert kv.get(posted.done_key) is None
    assert kv.count(DONE_INDEX_PREFIX) == 0
    assert kv.count(DONE_PREFIX) == 0


def test_done_keys_name_the_object_and_the_nonce() -> None:
    nonce = bytes(range(16))
    assert done_key("inbox/req/X", nonce) == (
        b"workflow/inbox-done/inbox/req/X/000102030405060708090a0b0c0d0e0f"
    )
