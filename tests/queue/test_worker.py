"""The worker loops (semantics 1.27) on a real `Queue`, with a mock clock."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from durable.store.clock import MockClock
from durable.store.kv import KvNamespace
from durable.store.objects import MemoryObjectStore
from durable.store.queue import (
    Claim,
    JobStatus,
    LeaseHandle,
    OpenOptions,
    Queue,
    QueueConfig,
    SettlementEffects,
)
from durable.store.queue.worker import (
    FailWith,
    PermanentFailure,
    Slots,
    WorkerQueue,
    run_worker,
    run_worker_concurrent,
)
from durable.testing import capture_logs

Behaviour = Callable[[Claim], Awaitable[SettlementEffects | None]]
Opener = Callable[..., Awaitable[Queue]]


class Scripted:
    """A worker that records each delivery and runs ``behave`` for it."""

    def __init__(self, behave: Behaviour) -> None:
        self.behave = behave
        self.seen: list[tuple[bytes, int]] = []
        self.leases: list[LeaseHandle] = []

    async def process(self, job: Claim, lease: LeaseHandle) -> SettlementEffects | None:
        self.seen.append((job.payload, job.record.attempts))
        self.leases.append(lease)
        return await self.behave(job)


async def open_with(open_queue: Opener, **cfg: Any) -> Queue:
    return await open_queue(default_queue_config=QueueConfig(**cfg))


def kv_of(q: Queue) -> KvNamespace:
    return KvNamespace(q.writer)


def worker_task(q: WorkerQueue, worker: Scripted, shutdown: asyncio.Event) -> asyncio.Task[None]:
    return asyncio.create_task(
        run_worker(q, worker, name="q", poll_interval=5.0, shutdown=shutdown)
    )


async def settle_down() -> None:
    """Let every ready task run until none is (pure event-loop turns, no clock)."""
    for _ in range(50):
        await asyncio.sleep(0)


def test_a_queue_is_a_worker_queue() -> None:
    def accepts(q: WorkerQueue) -> None: ...

    accepts(Queue.__new__(Queue))  # mypy checks the structural match


# ----------------------------------------------------------- settlements


async def test_success_acks_with_the_returned_effects(queue: Queue) -> None:
    id = await queue.enqueue("q", b"job")
    shutdown = asyncio.Event()

    async def ok(job: Claim) -> SettlementEffects:
        shutdown.set()  # checked after the settlement
        return SettlementEffects().kv_put(b"result/" + job.payload, b"done")

    worker = Scripted(ok)
    await run_worker(queue, worker, name="q", poll_interval=5.0, shutdown=shutdown)
    assert worker.seen == [(b"job", 1)]
    assert queue.job_record(id) is None
    assert queue.stats("q").done == 1
    assert kv_of(queue).get(b"result/job") == b"done"


async def test_the_worker_gets_the_claims_lease_handle(queue: Queue, clock: MockClock) -> None:
    await queue.enqueue("q", b"job")
    shutdown = asyncio.Event()

    async def renew(job: Claim) -> None:
        shutdown.set()
        job.lease.renew(120)
        assert queue.lease_expiry("q", job.id) == clock.now_ms() + 120_000
        return None

    worker = Scripted(renew)
    await run_worker(queue, worker, name="q", poll_interval=5.0, shutdown=shutdown)
    assert queue.stats("q").done == 1


async def test_permanent_failure_dead_letters_with_its_effects(queue: Queue) -> None:
    id = await queue.enqueue("q", b"job")
    shutdown = asyncio.Event()

    async def fail(job: Claim) -> None:
        shutdown.set()
        raise PermanentFailure("bad input", SettlementEffects().kv_put(b"why", b"bad"))

    await run_worker(queue, Scripted(fail), name="q", poll_interval=5.0, shutdown=shutdown)
    rec = queue.job_record(id)
    assert rec is not None
    assert (rec.status, rec.last_error, rec.attempts) == (JobStatus.DEAD, "bad input", 1)
    assert kv_of(queue).get(b"why") == b"bad"


async def test_an_error_nacks_and_the_job_is_retried(open_queue: Opener) -> None:
    q = await open_with(open_queue, retry_backoff_base=0)
    id = await q.enqueue("q", b"job")
    shutdown = asyncio.Event()

    async def flaky(job: Claim) -> None:
        if job.record.attempts == 1:
            raise ValueError("transient trouble")
        shutdown.set()
        return None

    worker = Scripted(flaky)
    await run_worker(q, worker, name="q", poll_interval=5.0, shutdown=shutdown)
    assert worker.seen == [(b"job", 1), (b"job", 2)]
    assert q.job_record(id) is None
    assert q.stats("q").done == 1
    assert [h.error for h in q.attempt_history(id)] == []  # acked: history removed


async def test_a_nack_records_the_error_text(open_queue: Opener) -> None:
    q = await open_with(open_queue, retry_backoff_base=60)
    id = await q.enqueue("q", b"job")
    shutdown = asyncio.Event()

    async def fail(job: Claim) -> None:
        shutdown.set()
        raise KeyError  # no message: the type name is stored

    await run_worker(q, Scripted(fail), name="q", poll_interval=5.0, shutdown=shutdown)
    rec = q.job_record(id)
    assert rec is not None
    assert (rec.status, rec.last_error) == (JobStatus.SCHEDULED, "KeyError")


async def test_fail_with_effects_apply_only_when_the_nack_exhausts(open_queue: Opener) -> None:
    q = await open_with(open_queue, max_attempts=2, retry_backoff_base=0)
    id = await q.enqueue("q", b"job")
    shutdown = asyncio.Event()

    async def fail(job: Claim) -> None:
        n = job.record.attempts
        if n == 2:
            shutdown.set()
        raise FailWith(RuntimeError(f"try {n}"), SettlementEffects().kv_put(f"f{n}".encode(), b"x"))

    worker = Scripted(fail)
    await run_worker(q, worker, name="q", poll_interval=5.0, shutdown=shutdown)
    assert [a for _, a in worker.seen] == [1, 2]
    rec = q.job_record(id)
    assert rec is not None
    assert (rec.status, rec.last_error) == (JobStatus.DEAD, "try 2")
    assert kv_of(q).get(b"f1") is None  # the retried attempt's effects were dropped
    assert kv_of(q).get(b"f2") == b"x"  # the exhausting attempt's were applied


async def test_fail_with_a_permanent_failure_dead_letters_with_the_outer_effects(
    queue: Queue,
) -> None:
    id = await queue.enqueue("q", b"job")
    shutdown = asyncio.Event()

    async def fail(job: Claim) -> None:
        shutdown.set()
        inner = PermanentFailure("gone for good", SettlementEffects().kv_put(b"inner", b"x"))
        raise FailWith(inner, SettlementEffects().kv_put(b"outer", b"y"))

    await run_worker(queue, Scripted(fail), name="q", poll_interval=5.0, shutdown=shutdown)
    rec = queue.job_record(id)
    assert rec is not None
    assert (rec.status, rec.last_error, rec.attempts) == (JobStatus.DEAD, "gone for good", 1)
    assert kv_of(queue).get(b"outer") == b"y"
    assert kv_of(queue).get(b"inner") is None


async def test_a_wrong_return_value_nacks(open_queue: Opener) -> None:
    q = await open_with(open_queue, retry_backoff_base=60)
    id = await q.enqueue("q", b"job")
    shutdown = asyncio.Event()

    async def wrong(job: Claim) -> SettlementEffects:
        shutdown.set()
        return "done"  # type: ignore[return-value]

    with capture_logs() as logs:
        await run_worker(q, Scripted(wrong), name="q", poll_interval=5.0, shutdown=shutdown)
    rec = q.job_record(id)
    assert rec is not None
    assert rec.status is JobStatus.SCHEDULED
    assert rec.last_error is not None
    assert "not SettlementEffects" in rec.last_error
    assert any(e["log_level"] == "error" for e in logs)


async def test_a_lost_claim_is_logged_and_the_loop_goes_on(queue: Queue, clock: MockClock) -> None:
    id = await queue.enqueue("q", b"job")
    shutdown = asyncio.Event()

    async def slow_then_ok(job: Claim) -> None:
        if job.record.attempts == 1:
            clock.advance(31)  # past the 30 s lease
            assert queue.reap_now() == 1  # the job goes back to pending
        else:
            shutdown.set()
        return None

    worker = Scripted(slow_then_ok)
    with capture_logs() as logs:
        await run_worker(queue, worker, name="q", poll_interval=5.0, shutdown=shutdown)
    assert [a for _, a in worker.seen] == [1, 2]
    assert queue.job_record(id) is None
    failed = [e for e in logs if e["event"] == "job settlement failed"]
    assert len(failed) == 1
    assert "lost" in failed[0]["error"]
    assert failed[0]["job"] == id


# ------------------------------------------------------------------ loop


async def test_a_claim_error_ends_the_loop(queue: Queue, monkeypatch: pytest.MonkeyPatch) -> None:
    async def broken(queue_name: str, lease: float | None = None) -> Claim | None:
        raise RuntimeError("store is gone")

    monkeypatch.setattr(queue, "claim", broken)
    with pytest.raises(RuntimeError, match="store is gone"):
        await run_worker(
            queue, Scripted(_never), name="q", poll_interval=5.0, shutdown=asyncio.Event()
        )


async def _never(job: Claim) -> None:
    raise AssertionError("no job should be processed")


async def test_an_idle_worker_wakes_on_enqueue_without_the_clock(queue: Queue) -> None:
    shutdown = asyncio.Event()
    done = asyncio.Event()

    async def ok(job: Claim) -> None:
        done.set()
        return None

    task = worker_task(queue, Scripted(ok), shutdown)
    await settle_down()
    assert not task.done()
    await queue.enqueue("q", b"job")
    await done.wait()  # no clock advance: the enqueue's wakeup did it
    shutdown.set()
    await task
    assert queue.stats("q").done == 1


async def test_an_idle_worker_polls_every_poll_interval(
    queue: Queue, clock: MockClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    claims: list[int] = []
    real = queue.claim

    async def counting(queue_name: str, lease: float | None = None) -> Claim | None:
        claims.append(clock.now_ms())
        return await real(queue_name, lease)

    monkeypatch.setattr(queue, "claim", counting)
    shutdown = asyncio.Event()
    start = clock.now_ms()
    task = worker_task(queue, Scripted(_never), shutdown)
    await settle_down()
    assert claims == [start]
    clock.advance(4.999)
    await settle_down()
    assert claims == [start]
    clock.advance(0.001)  # the 5 s poll interval has passed
    await settle_down()
    assert claims == [start, start + 5000]
    shutdown.set()
    await task


async def test_shutdown_interrupts_the_idle_wait(queue: Queue) -> None:
    shutdown = asyncio.Event()
    task = worker_task(queue, Scripted(_never), shutdown)
    await settle_down()
    assert not task.done()
    shutdown.set()
    await task  # no clock advance needed


async def test_a_set_shutdown_claims_nothing(queue: Queue) -> None:
    await queue.enqueue("q", b"job")
    shutdown = asyncio.Event()
    shutdown.set()
    await run_worker(queue, Scripted(_never), name="q", poll_interval=5.0, shutdown=shutdown)
    assert queue.stats("q").pending == 1


async def test_shutdown_never_interrupts_processing(queue: Queue) -> None:
    await queue.enqueue("q", b"a")
    await queue.enqueue("q", b"b")
    shutdown = asyncio.Event()
    started = asyncio.Event()
    release = asyncio.Event()

    async def slow(job: Claim) -> None:
        started.set()
        await release.wait()
        return None

    worker = Scripted(slow)
    task = worker_task(queue, worker, shutdown)
    await started.wait()
    shutdown.set()
    await settle_down()
    assert not task.done()  # still processing
    release.set()
    await task
    assert [p for p, _ in worker.seen] == [b"a"]  # settled, then stopped claiming
    st = queue.stats("q")
    assert (st.done, st.pending, st.claimed) == (1, 1, 0)


async def test_poll_interval_and_name_are_checked(queue: Queue) -> None:
    for bad in (0, -1.0, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="poll_interval"):
            await run_worker(
                queue, Scripted(_never), name="q", poll_interval=bad, shutdown=asyncio.Event()
            )
    with pytest.raises(TypeError, match="queue name"):
        await run_worker(
            queue,
            Scripted(_never),
            name=b"q",  # type: ignore[arg-type]
            poll_interval=1.0,
            shutdown=asyncio.Event(),
        )


# ------------------------------------------------------------ concurrent


def concurrent_task(
    q: WorkerQueue, worker: Scripted, shutdown: asyncio.Event, concurrency: int
) -> asyncio.Task[None]:
    return asyncio.create_task(
        run_worker_concurrent(
            q, worker, name="q", concurrency=concurrency, poll_interval=5.0, shutdown=shutdown
        )
    )


class Gate:
    """Jobs block until released; tracks how many run at once."""

    def __init__(self) -> None:
        self.running = 0
        self.peak = 0
        self.release = asyncio.Event()
        self.started = 0
        self._changed = asyncio.Event()

    async def wait_started(self, n: int) -> None:
        """Return once ``n`` jobs have started."""
        while self.started < n:
            await self._changed.wait()

    async def __call__(self, job: Claim) -> SettlementEffects:
        self.running += 1
        self.started += 1
        self.peak = max(self.peak, self.running)
        self._changed.set()
        self._changed = asyncio.Event()
        try:
            await self.release.wait()
        finally:
            self.running -= 1
        return SettlementEffects().kv_put(b"done/" + job.payload, b"")


async def test_concurrent_runs_at_most_concurrency_jobs(
    queue: Queue, monkeypatch: pytest.MonkeyPatch
) -> None:
    sizes: list[int] = []
    real = queue.claim_batch

    async def recording(queue_name: str, n: int, lease: float | None = None) -> list[Claim]:
        sizes.append(n)
        return await real(queue_name, n, lease)

    monkeypatch.setattr(queue, "claim_batch", recording)
    payloads = [str(i).encode() for i in range(7)]
    await queue.enqueue_batch("q", payloads)
    gate = Gate()
    shutdown = asyncio.Event()
    task = concurrent_task(queue, Scripted(gate), shutdown, concurrency=3)
    await gate.wait_started(3)
    await settle_down()
    assert (gate.running, queue.stats("q").claimed, queue.stats("q").pending) == (3, 3, 4)
    assert sizes == [3]
    gate.release.set()
    await gate.wait_started(7)  # every job claimed: shutdown now drains them all
    shutdown.set()
    await task
    assert queue.stats("q").done == 7
    assert gate.peak == 3
    assert all(1 <= n <= 3 for n in sizes)
    assert sorted(k for k, _ in kv_of(queue).scan(b"done/", limit=10).entries) == sorted(
        b"done/" + p for p in payloads
    )


async def test_loops_sharing_slots_run_at_most_the_limit_together(clock: MockClock) -> None:
    """Two loops (two partitions' queues) of one process share `Slots(2)`:
    each could run 3, together they run 2 at once, and every job runs."""
    hour = 3600.0
    options = OpenOptions(
        clock=clock, reaper_interval=hour, scheduler_interval=hour, fence_check_interval=hour
    )
    queues = [await Queue.open(MemoryObjectStore(), options) for _ in range(2)]
    try:
        for q in queues:
            await q.enqueue_batch("q", [b"1", b"2", b"3"])
        gate, shutdown, slots = Gate(), asyncio.Event(), Slots(2)
        tasks = [
            asyncio.create_task(
                run_worker_concurrent(
                    q,
                    Scripted(gate),
                    name="q",
                    concurrency=3,
                    poll_interval=5.0,
                    shutdown=shutdown,
                    slots=slots,
                )
            )
            for q in queues
        ]
        await gate.wait_started(2)
        await settle_down()
        assert (gate.running, slots.used) == (2, 2)
        assert sum(q.stats("q").claimed for q in queues) == 2
        gate.release.set()
        await gate.wait_started(6)
        shutdown.set()
        await asyncio.gather(*tasks)
        assert sum(q.stats("q").done for q in queues) == 6
        assert (gate.peak, slots.used) == (2, 0)
    finally:
        for q in queues:
            await q.close()


class HeldCreates(MemoryObjectStore):
    """A memory store whose creates wait for ``go`` while ``hold`` is set:
    a log flush in flight, for as long as the test wants."""

    def __init__(self) -> None:
        super().__init__()
        self.hold = False
        self.go = asyncio.Event()

    async def create(self, name: str, data: bytes) -> None:
        if self.hold:
            await self.go.wait()
        await super().create(name, data)


async def test_a_claim_waiting_for_its_jobs_creation_holds_only_the_slots_it_took(
    clock: MockClock,
) -> None:
    """Loop A claims one job whose enqueue is still being flushed, and waits
    for it to be durable; it gives the three other slots it reserved back
    at once, so loop B runs three jobs meanwhile (before, A held all four
    for the whole wait and B ran nothing)."""
    hour = 3600.0
    options = OpenOptions(
        clock=clock, reaper_interval=hour, scheduler_interval=hour, fence_check_interval=hour
    )
    held = HeldCreates()
    a, b = await Queue.open(held, options), await Queue.open(MemoryObjectStore(), options)
    try:
        await b.enqueue_batch("q", [b"1", b"2", b"3"])
        held.hold = True
        enqueue = asyncio.create_task(a.enqueue("q", b"a"))  # in memory; its flush waits
        gate, shutdown, slots = Gate(), asyncio.Event(), Slots(4)

        def loop(q: Queue) -> asyncio.Task[None]:
            return asyncio.create_task(
                run_worker_concurrent(
                    q,
                    Scripted(gate),
                    name="q",
                    concurrency=4,
                    poll_interval=5.0,
                    shutdown=shutdown,
                    slots=slots,
                )
            )

        tasks = [loop(a)]
        await settle_down()  # A claimed its job and waits for the flush
        assert (a.stats("q").claimed, slots.used) == (1, 1)
        tasks.append(loop(b))
        await asyncio.wait_for(gate.wait_started(3), 5.0)
        assert gate.running == 3  # B's, while A's claim still waits
        held.go.set()
        await enqueue
        await asyncio.wait_for(gate.wait_started(4), 5.0)
        gate.release.set()
        shutdown.set()
        await asyncio.gather(*tasks)
        assert (a.stats("q").done + b.stats("q").done, slots.used) == (4, 0)
    finally:
        held.go.set()
        for q in (a, b):
            await q.close()


async def test_concurrent_claims_when_a_slot_frees(queue: Queue) -> None:
    await queue.enqueue_batch("q", [b"a", b"b", b"c"])
    releases = {p: asyncio.Event() for p in (b"a", b"b", b"c")}
    started = {p: asyncio.Event() for p in (b"a", b"b", b"c")}

    async def per_job(job: Claim) -> None:
        started[job.payload].set()
        await releases[job.payload].wait()
        return None

    worker = Scripted(per_job)
    shutdown = asyncio.Event()
    task = concurrent_task(queue, worker, shutdown, concurrency=2)
    await started[b"b"].wait()
    await settle_down()
    assert [p for p, _ in worker.seen] == [b"a", b"b"]  # no third slot
    releases[b"a"].set()
    await started[b"c"].wait()  # a's slot went to c
    assert not releases[b"b"].is_set()
    assert [p for p, _ in worker.seen] == [b"a", b"b", b"c"]
    releases[b"b"].set()
    releases[b"c"].set()
    shutdown.set()
    await task
    assert queue.stats("q").done == 3


async def test_concurrent_wakes_on_enqueue(queue: Queue) -> None:
    done = asyncio.Event()

    async def ok(job: Claim) -> None:
        done.set()
        return None

    shutdown = asyncio.Event()
    task = concurrent_task(queue, Scripted(ok), shutdown, concurrency=4)
    await settle_down()
    await queue.enqueue("q", b"job")
    await done.wait()
    shutdown.set()
    await task
    assert queue.stats("q").done == 1


async def test_concurrent_waits_for_inserts_not_for_jobs_that_finish(
    queue: Queue, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With slots free, the loop waits for an insert: a job that finishes
    wakes it only through what it makes pending (every such transition
    notifies), so a job that enqueues nothing costs no claim pass."""
    passes: list[int] = []
    real_claim = queue.claim_batch

    async def counting(queue_name: str, n: int, lease: float | None = None) -> list[Claim]:
        claims = await real_claim(queue_name, n, lease)
        passes.append(len(claims))
        return claims

    acked: list[bytes] = []
    both_acked = asyncio.Event()
    real_ack = queue.ack_with

    async def noting(claim: Claim, effects: SettlementEffects) -> object:
        result = await real_ack(claim, effects)
        acked.append(claim.payload)
        if len(acked) == 2:
            both_acked.set()
        return result

    monkeypatch.setattr(queue, "claim_batch", counting)
    monkeypatch.setattr(queue, "ack_with", noting)
    follow_up = SettlementEffects().enqueue("q", b"second")

    async def behave(job: Claim) -> SettlementEffects | None:
        return follow_up if job.payload == b"first" else None

    worker = Scripted(behave)
    shutdown = asyncio.Event()
    task = concurrent_task(queue, worker, shutdown, concurrency=4)
    await settle_down()
    await queue.enqueue("q", b"first")
    await both_acked.wait()  # the follow-up's insert woke the loop
    await settle_down()  # the job tasks end: a loop woken by that would claim now
    assert acked == [b"first", b"second"]
    # The first empty pass, one per insert, and none for a job finishing.
    assert passes == [0, 1, 1]
    shutdown.set()
    await task


async def test_concurrent_shutdown_stops_claiming_and_drains(queue: Queue) -> None:
    await queue.enqueue_batch("q", [b"a", b"b", b"c", b"d"])
    gate = Gate()
    shutdown = asyncio.Event()
    task = concurrent_task(queue, Scripted(gate), shutdown, concurrency=2)
    await gate.wait_started(2)
    shutdown.set()
    await settle_down()
    assert not task.done()  # draining the two in flight
    gate.release.set()
    await task
    assert gate.started == 2
    st = queue.stats("q")
    assert (st.done, st.pending, st.claimed) == (2, 2, 0)


async def test_concurrent_settles_each_outcome(open_queue: Opener) -> None:
    q = await open_with(open_queue, retry_backoff_base=60)
    ids = await q.enqueue_batch("q", [b"ok", b"perm", b"err"])
    left = asyncio.Event()
    count = 0

    async def mixed(job: Claim) -> SettlementEffects | None:
        nonlocal count
        count += 1
        if count == 3:
            left.set()
        if job.payload == b"perm":
            raise PermanentFailure("no")
        if job.payload == b"err":
            raise OSError("disk")
        return None

    shutdown = asyncio.Event()
    task = concurrent_task(q, Scripted(mixed), shutdown, concurrency=3)
    await left.wait()
    await settle_down()
    shutdown.set()
    await task
    assert q.job_record(ids[0]) is None
    dead, retry = q.job_record(ids[1]), q.job_record(ids[2])
    assert dead is not None
    assert (dead.status, dead.last_error) == (JobStatus.DEAD, "no")
    assert retry is not None
    assert (retry.status, retry.last_error) == (JobStatus.SCHEDULED, "disk")


async def test_concurrent_claim_error_drains_then_raises(
    queue: Queue, monkeypatch: pytest.MonkeyPatch
) -> None:
    await queue.enqueue("q", b"a")
    gate = Gate()
    shutdown = asyncio.Event()
    real = queue.claim_batch
    calls = 0

    async def breaks_second_time(
        queue_name: str, n: int, lease: float | None = None
    ) -> list[Claim]:
        nonlocal calls
        calls += 1
        if calls > 1:
            raise RuntimeError("claims broke")
        return await real(queue_name, n, lease)

    monkeypatch.setattr(queue, "claim_batch", breaks_second_time)
    task = concurrent_task(queue, Scripted(gate), shutdown, concurrency=2)
    await settle_down()
    await queue.enqueue("q", b"b")  # wakes the loop: its next claim fails
    await settle_down()
    assert not task.done()  # waits for the job it holds
    gate.release.set()
    with pytest.raises(RuntimeError, match="claims broke"):
        await task
    assert queue.stats("q").done == 1


async def test_a_crashing_job_task_is_logged_and_the_loop_goes_on(queue: Queue) -> None:
    class Boom(BaseException):
        pass

    await queue.enqueue_batch("q", [b"boom", b"ok"])
    processed = asyncio.Event()

    async def behave(job: Claim) -> None:
        if job.payload == b"boom":
            raise Boom("escaped every except Exception")
        processed.set()
        return None

    shutdown = asyncio.Event()
    with capture_logs() as logs:
        task = concurrent_task(queue, Scripted(behave), shutdown, concurrency=1)
        await processed.wait()
        await settle_down()
        shutdown.set()
        await task
    assert any(e["event"] == "job task crashed" and e["log_level"] == "error" for e in logs)
    st = queue.stats("q")
    assert (st.done, st.claimed) == (1, 1)  # the crashed job waits for its lease to expire


async def test_cancelling_the_concurrent_loop_cancels_its_jobs(queue: Queue) -> None:
    await queue.enqueue_batch("q", [b"a", b"b"])
    gate = Gate()
    task = concurrent_task(queue, Scripted(gate), asyncio.Event(), concurrency=2)
    await gate.wait_started(2)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert gate.running == 0
    assert queue.stats("q").claimed == 2  # their leases will expire; nothing settled


@pytest.mark.parametrize("bad", [0, -1, True, 1.5])
async def test_concurrency_must_be_at_least_one(queue: Queue, bad: Any) -> None:
    with pytest.raises(ValueError, match="concurrency"):
        await run_worker_concurrent(
            queue,
            Scripted(_never),
            name="q",
            concurrency=bad,
            poll_interval=1.0,
            shutdown=asyncio.Event(),
        )
