"""Remote replies (`durable.engine.remote`): a reply object in the bucket
delivered as the signal of the run that requested it.

The remote worker is simulated by a second handle on the same store that
only writes one object (for the local backend, a handle like another
process's). Covered: the reply written before the watcher runs, before the
wait registers, after a restart of the requesting process; the watcher's
loop on the runtime's clock; a crash between the signal and the cleanup,
and one between the signal's buffer commit and its wake (each reply is
signalled once: nothing resumes twice, nothing stale stays buffered);
discarding an expected reply; bad reply keys.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable

import pytest
from engine_helpers import BG, HOUR, QUEUE, Factory, Opener, finish

from durable.engine import (
    Fail,
    RunSpec,
    Step,
    StepOutcome,
    Succeed,
    TerminalStatus,
    WorkflowRuntime,
)
from durable.engine import keys as engine_keys
from durable.engine.remote import ReplyState, ReplyWatcher
from durable.errors import InvalidArgument, ObjectNotFound
from durable.store.clock import MockClock
from durable.store.objects import FaultyObjectStore
from durable.store.objects.base import ObjectStore
from durable.store.queue import JobStatus, OpenOptions, Queue, QueueConfig

TIMEOUT = 300.0
RUN = "translate-118"
REPLY = f"replies/{RUN}/0"
CORR = f"reply:{RUN}:0"

#: Called by step 0 after it registered the reply and "sent" the request.
Send = Callable[[str, bytes], Awaitable[None]]


class Requester:
    """Step 0 expects a reply and sends its request; step 1 finishes with
    the reply (or fails when the wait timed out, discarding the reply)."""

    def __init__(self, send: Send | None = None) -> None:
        self.watcher: ReplyWatcher
        self.send = send
        self.requests: list[tuple[str, bytes]] = []
        self.replies: list[bytes | None] = []

    async def run_step(self, step: Step) -> StepOutcome:
        """The two steps."""
        w = self.watcher
        reply_key = w.reply_key(step.run_id, 0)
        key = w.correlation_key(step.run_id, 0)
        if step.step_number == 0:
            await w.expect(reply_key, key)  # durable before the request goes out
            self.requests.append((reply_key, step.payload))
            if self.send is not None:
                await self.send(reply_key, step.payload)
            return StepOutcome.continue_on_signal(step.payload, key, TIMEOUT)
        self.replies.append(step.signal)
        if step.signal is None:
            await w.discard(reply_key, key)
            return Fail("no reply in time")
        return Succeed(step.signal)


async def remote_worker(objects: ObjectStore, reply_key: str, request: bytes) -> None:
    """The other machine: it can only write the reply object."""
    await objects.put(reply_key, request.upper())


class Host:
    """The requesting process: queue, runtime and watcher on one store."""

    def __init__(self, open_queue: Opener, runner: Requester) -> None:
        self.open_queue = open_queue
        self.runner = runner
        self.q: Queue
        self.rt: WorkflowRuntime
        self.watcher: ReplyWatcher

    async def start(self, objects: ObjectStore | None = None) -> Host:
        """Open the queue; build the runtime and its watcher."""
        self.q = await self.open_queue()
        self.rt = WorkflowRuntime(self.q, self.runner)
        self.watcher = ReplyWatcher(self.rt, objects=objects, interval=5.0)
        self.runner.watcher = self.watcher
        return self

    async def restart(self, objects: ObjectStore | None = None) -> None:
        """Close and open again (a new process on the same store)."""
        await self.q.close()
        await self.start(objects)

    async def request(self) -> None:
        """Submit the run and run step 0 (the request) to its wait."""
        sub = await self.rt.submit(RunSpec(b"three chairs, one table", run_id=RUN))
        worker = self.rt.spawn()
        try:
            await asyncio.wait_for(self.q.wait_for_completion(sub.job_id, None), 30)
        finally:
            await worker.shutdown()


def leftovers(q: Queue) -> dict[bytes, bytes]:
    """Markers and signal records still in the store."""
    kv = q.kv
    return {
        **dict(kv.scan(engine_keys.REPLY_MARKERS_PREFIX, limit=100).entries),
        **dict(kv.scan(b"workflow/signal-", limit=100).entries),
    }


async def gone(objects: ObjectStore, name: str) -> bool:
    """True if object ``name`` does not exist."""
    try:
        await objects.get(name)
    except ObjectNotFound:
        return True
    return False


# -------------------------------------------------------------------- paths


async def test_a_reply_written_before_the_watcher_runs_resumes_the_run(
    open_queue: Opener, make_objects: Factory
) -> None:
    host = await Host(open_queue, Requester()).start()
    await host.request()
    [(name, marker)] = (await host.watcher.pending()).items()
    assert name == REPLY
    assert (marker.correlation_key, marker.state) == (CORR, ReplyState.PENDING)
    assert await host.watcher.poll_once() == 0  # nothing written yet
    await remote_worker(make_objects(), *host.runner.requests[0])
    assert await host.watcher.poll_once() == 1
    end = await finish(host.rt, RUN)
    assert end.outcome.result == b"THREE CHAIRS, ONE TABLE"
    assert host.runner.replies == [b"THREE CHAIRS, ONE TABLE"]
    assert leftovers(host.q) == {}
    assert await gone(make_objects(), REPLY)


async def test_a_reply_written_before_the_wait_registers_is_consumed_by_it(
    open_queue: Opener, make_objects: Factory
) -> None:
    """A fast remote: the reply is written and delivered while step 0 still
    runs; the signal is buffered and the wait's registration consumes it."""
    remote = make_objects()

    async def fast(reply_key: str, request: bytes) -> None:
        await remote_worker(remote, reply_key, request)
        assert await host.watcher.poll_once() == 1

    host = await Host(open_queue, Requester(send=fast)).start()
    await host.rt.submit(RunSpec(b"rush order", run_id=RUN))
    end = await finish(host.rt, RUN)
    assert end.outcome.result == b"RUSH ORDER"
    assert leftovers(host.q) == {}


async def test_a_reply_after_the_requesting_process_restarted_resumes_the_run(
    open_queue: Opener, make_objects: Factory
) -> None:
    host = await Host(open_queue, Requester()).start()
    await host.request()
    request = host.runner.requests[0]
    await host.q.close()  # the requesting process is gone while the remote works
    await remote_worker(make_objects(), *request)
    await host.start()
    assert await host.watcher.poll_once() == 1
    end = await finish(host.rt, RUN)
    assert end.outcome.result == b"THREE CHAIRS, ONE TABLE"
    assert host.runner.replies == [b"THREE CHAIRS, ONE TABLE"]
    assert leftovers(host.q) == {}


async def test_the_watcher_loop_polls_on_the_runtimes_clock(
    open_queue: Opener, make_objects: Factory, clock: MockClock
) -> None:
    host = await Host(open_queue, Requester()).start()
    await host.request()
    handle = host.watcher.spawn()
    try:
        await clock.wait_for_sleepers(BG + 1)  # its first pass found nothing
        await remote_worker(make_objects(), *host.runner.requests[0])
        assert leftovers(host.q) != {}
        clock.advance(host.watcher.interval)
        end = await finish(host.rt, RUN)
    finally:
        await handle.shutdown()
    assert not handle.running
    assert end.outcome.result == b"THREE CHAIRS, ONE TABLE"


async def test_shutdown_lets_the_pass_in_progress_clean_up_what_it_delivered(
    open_queue: Opener, make_objects: Factory, clock: MockClock
) -> None:
    """The run may end (and its host shut the watcher down) between the
    reply's delivery and its cleanup: the pass finishes first."""

    class Gated(FaultyObjectStore):
        async def delete(self, names: object) -> None:
            deleting.set()
            await proceed.wait()
            await super().delete(names)  # type: ignore[arg-type]

    deleting, proceed = asyncio.Event(), asyncio.Event()
    host = await Host(open_queue, Requester()).start(objects=Gated(make_objects()))
    await host.request()
    await remote_worker(make_objects(), *host.runner.requests[0])
    handle = host.watcher.spawn()
    await deleting.wait()  # signalled, the cleanup under way
    stopping = asyncio.create_task(handle.shutdown())
    await asyncio.sleep(0)
    assert not stopping.done()  # it waits for the pass
    proceed.set()
    await stopping
    assert not handle.running
    assert await host.watcher.pending() == {}
    assert await gone(make_objects(), REPLY)
    end = await finish(host.rt, RUN)
    assert end.outcome.result == b"THREE CHAIRS, ONE TABLE"


# ---------------------------------------------------------------- crashes


async def test_a_crash_between_the_signal_and_the_cleanup_resumes_nothing_twice(
    open_queue: Opener, make_objects: Factory
) -> None:
    """The reply's cleanup fails after the run was woken; after a restart the
    watcher finishes the cleanup without signalling the reply again."""
    faulty = FaultyObjectStore(make_objects())
    host = await Host(open_queue, Requester()).start(objects=faulty)
    await host.request()
    await remote_worker(make_objects(), *host.runner.requests[0])
    faulty.fail_next("delete")
    assert await host.watcher.poll_once() == 0  # woken, then the cleanup failed
    woken = host.q.job_record(host.rt.view.pointer(RUN).job_id)  # type: ignore[union-attr]
    assert woken is not None
    assert woken.status is JobStatus.PENDING
    assert (await host.watcher.pending())[REPLY].state is ReplyState.DELIVERED
    await host.restart()
    assert await host.watcher.poll_once() == 1
    assert leftovers(host.q) == {}  # no second copy buffered for a later waiter
    assert await gone(make_objects(), REPLY)
    end = await finish(host.rt, RUN)
    assert end.outcome.result == b"THREE CHAIRS, ONE TABLE"
    assert host.runner.replies == [b"THREE CHAIRS, ONE TABLE"]


async def test_a_crash_after_the_signal_was_buffered_wakes_the_waiter_after_restart(
    make_objects: Factory, clock: MockClock
) -> None:
    """The process dies right after the commit that buffers the reply and
    marks it delivered, before the waiter is woken: the next process's
    watcher wakes it from the buffer, once."""
    options = OpenOptions(
        clock=clock,
        reaper_interval=HOUR,
        scheduler_interval=HOUR,
        queue_configs={QUEUE: QueueConfig(retry_backoff_base=0.0)},
    )
    faulty = FaultyObjectStore(make_objects())
    runner = Requester()
    q = await Queue.open(faulty, options)
    rt = WorkflowRuntime(q, runner)
    runner.watcher = ReplyWatcher(rt, objects=make_objects())
    sub = await rt.submit(RunSpec(b"crash me", run_id=RUN))
    worker = rt.spawn()
    await asyncio.wait_for(q.wait_for_completion(sub.job_id, None), 30)
    await worker.shutdown()
    await remote_worker(make_objects(), *runner.requests[0])
    await q.writer.flush()
    faulty.crash_after_writes(1)  # the buffer commit lands, then the process dies
    assert await runner.watcher.poll_once() == 0  # the wake's commit failed
    assert faulty.crashed
    with contextlib.suppress(Exception):
        await q.close()
    q2 = await Queue.open(make_objects(), options)  # the next process
    try:
        rt2 = WorkflowRuntime(q2, runner)
        runner.watcher = ReplyWatcher(rt2, objects=make_objects())
        assert leftovers(q2)[engine_keys.signal_buffer_key(CORR)] == b"CRASH ME"
        assert (await runner.watcher.pending())[REPLY].state is ReplyState.DELIVERED
        assert await runner.watcher.poll_once() == 1
        assert leftovers(q2) == {}
        end = await finish(rt2, RUN)
        assert end.outcome.result == b"CRASH ME"
        assert runner.replies == [b"CRASH ME"]
    finally:
        await q2.close()


# ------------------------------------------------------------ the edges


async def test_a_discarded_reply_is_not_delivered(
    open_queue: Opener, make_objects: Factory, clock: MockClock
) -> None:
    """The wait times out; step 1 discards the reply: a reply written later
    stays in the bucket, undelivered."""
    host = await Host(open_queue, Requester()).start()
    await host.request()
    clock.advance(TIMEOUT)
    assert host.q.promote_scheduled_now() == 1
    end = await finish(host.rt, RUN)
    assert end.termination.status is TerminalStatus.FAILED
    assert host.runner.replies == [None]
    await remote_worker(make_objects(), *host.runner.requests[0])
    assert await host.watcher.poll_once() == 0
    assert leftovers(host.q) == {}
    assert not await gone(make_objects(), REPLY)


@pytest.mark.parametrize(
    ("reply_key", "key"),
    [
        pytest.param("elsewhere/r/0", CORR, id="outside-the-prefix"),
        pytest.param("replies/", CORR, id="no-name"),
        pytest.param("replies/r/../log/x", CORR, id="dot-dot"),
        pytest.param("replies/r//0", CORR, id="empty-segment"),
        pytest.param(REPLY, "", id="empty-correlation-key"),
    ],
)
async def test_expect_rejects_a_bad_reply_key_naming_it(
    open_queue: Opener, reply_key: str, key: str
) -> None:
    host = await Host(open_queue, Requester()).start()
    with pytest.raises(InvalidArgument) as err:
        await host.watcher.expect(reply_key, key)
    assert repr(reply_key if key else key) in str(err.value)
    assert leftovers(host.q) == {}


async def test_a_watcher_needs_a_prefix_and_a_positive_interval(open_queue: Opener) -> None:
    host = await Host(open_queue, Requester()).start()
    with pytest.raises(InvalidArgument, match="prefix"):
        ReplyWatcher(host.rt, prefix="no-slash")
    with pytest.raises(InvalidArgument, match="interval"):
        ReplyWatcher(host.rt, interval=0)
