"""Signals across the partitions of one store (`durable.engine.signals`,
`durable.cluster.signal_route`, `durable.cluster.outbox`), at the runtime's API.

Two partitions of a shared store, each opened like its owner (a queue, a
runtime whose signals take the partition's route, an inbox applier and an
outbox), on memory and a local directory, with a `MockClock`. Runs wait on
the key their input names, in the run's partition A; each key has its home
H. Covered: a key at home in the run's partition (nothing sent, the one-store
path); both orders across partitions (a wait registered then signalled, a
signal buffered then consumed); the timeout (then a signal is buffered for
the next waiter, also while the unregister is still on its way); a second
waiter (rejected, the first keeps its wait); a cancelled waiter; a client's
signal through the home's inbox; a signal or clear sent to a partition that
is not the key's home (forwarded); messages through inbox objects instead of
direct applies; the loops running on their own.
"""

from __future__ import annotations

import asyncio

from cluster_helpers import Factory
from signal_cluster import (
    QUEUE,
    TIMEOUT,
    Part,
    SignalCluster,
    buffer_of,
    index_of,
    name_in,
)

from durable.cluster.inbox import InboxWriter
from durable.engine import RunSpec, TerminalStatus
from durable.engine import keys as engine_keys
from durable.engine.signals import RemoteWaiter, SignalOutcome, decode_remote_waiter
from durable.store.clock import MockClock
from durable.store.queue import JobStatus

P = 2
#: The run's partition and the key's home in the cross-partition tests.
A, H = 0, 1
DELIVERED, BUFFERED, SENT = SignalOutcome.DELIVERED, SignalOutcome.BUFFERED, SignalOutcome.SENT


def run_in(p: int, stem: str = "run") -> str:
    """A run id of partition ``p``."""
    return name_in(p, P, stem)


def key_at(p: int, stem: str = "key") -> str:
    """A correlation key whose home is partition ``p``."""
    return name_in(p, P, stem)


async def result_of(part: Part, run_id: str) -> bytes | None:
    """Run ``run_id`` to its end in ``part``; its result."""
    end = await part.finish(run_id)
    return end.outcome.result  # type: ignore[attr-defined, no-any-return]


async def clean(cluster: SignalCluster) -> None:
    """Nothing left anywhere: no signal record, no message in flight."""
    assert await cluster.in_flight() == 0
    for part in cluster.parts.values():
        assert part.signal_records() == {}


# ------------------------------------------------------------ at home


async def test_a_key_at_home_in_the_runs_partition_sends_nothing(cluster: SignalCluster) -> None:
    """Key and run in one partition: the one-store path, commit for commit
    (the waiter index names the job; the signal wakes it; no outbox record)."""
    a = cluster.parts[A]
    run, key = run_in(A), key_at(A)
    job = await a.start_waiting(run, key)
    assert index_of(a, key) == job.id.encode()
    assert a.outbox_records() == []
    seq = a.queue.writer.seq
    assert await a.runtime.signal(key, b"v") is DELIVERED
    assert a.queue.writer.seq == seq + 2  # the buffer, then the wake: as on one store
    assert await result_of(a, run) == b"v"
    await clean(cluster)


# ------------------------------------------------------- across partitions


async def test_a_wait_registers_at_the_keys_home_and_a_signal_is_forwarded(
    cluster: SignalCluster,
) -> None:
    """Wait, then signal: the settlement stages the register message (no
    index in A); H indexes the remote waiter; the signal at H deletes the
    index and sends the value in one commit; A wakes the run with it."""
    a, h = cluster.parts[A], cluster.parts[H]
    run, key = run_in(A), key_at(H)
    job = await a.start_waiting(run, key)
    assert index_of(a, key) is None
    assert len(a.outbox_records()) == 1
    await cluster.pump()
    assert decode_remote_waiter(index_of(h, key) or b"") == RemoteWaiter(run, job.id, QUEUE)
    seq = h.queue.writer.seq
    assert await h.runtime.signal(key, b"v") is DELIVERED
    assert h.queue.writer.seq == seq + 1  # index out, deliver staged: one commit
    assert index_of(h, key) is None
    assert buffer_of(h, key) is None
    await cluster.pump()
    woken = a.queue.job_record(job.id)
    assert woken is not None
    assert woken.status is JobStatus.PENDING
    assert woken.wake_payload == b"v"
    assert await result_of(a, run) == b"v"
    assert a.runner.finished == [(run, b"v")]
    await clean(cluster)


async def test_a_signal_buffered_at_the_home_is_consumed_by_a_later_waiter(
    cluster: SignalCluster,
) -> None:
    """Signal, then wait: H buffers; the register message consumes the
    buffer and sends the value back; the run wakes with it."""
    a, h = cluster.parts[A], cluster.parts[H]
    run, key = run_in(A), key_at(H)
    assert await h.runtime.signal(key, b"early") is BUFFERED
    assert buffer_of(h, key) == b"early"
    await a.start_waiting(run, key)
    await cluster.pump()
    assert buffer_of(h, key) is None
    assert index_of(h, key) is None
    assert await result_of(a, run) == b"early"
    await clean(cluster)


async def test_a_timed_out_waiter_is_forgotten_and_a_later_signal_waits_for_the_next(
    cluster: SignalCluster, clock: MockClock
) -> None:
    """The waiter times out (None): its claim sends the unregister, H's
    index goes; a signal then is buffered, and the next waiter takes it."""
    a, h = cluster.parts[A], cluster.parts[H]
    first, second, key = run_in(A, "first"), run_in(A, "second"), key_at(H)
    await a.start_waiting(first, key)
    await cluster.pump()
    assert index_of(h, key) is not None
    clock.advance(TIMEOUT)
    assert a.queue.promote_scheduled_now() == 1
    assert await result_of(a, first) == b"timed out"
    await cluster.pump()
    assert index_of(h, key) is None
    assert await h.runtime.signal(key, b"late") is BUFFERED
    await a.start_waiting(second, key)
    await cluster.pump()
    assert await result_of(a, second) == b"late"
    await clean(cluster)


async def test_a_signal_racing_the_timeout_comes_back_and_is_buffered(
    cluster: SignalCluster, clock: MockClock
) -> None:
    """The signal reaches H before the unregister: H forwards it, A finds
    the run no longer waiting and sends it back, H buffers it; nothing is
    lost and the next waiter takes it."""
    a, h = cluster.parts[A], cluster.parts[H]
    first, second, key = run_in(A, "first"), run_in(A, "second"), key_at(H)
    await a.start_waiting(first, key)
    await cluster.pump()
    clock.advance(TIMEOUT)
    assert a.queue.promote_scheduled_now() == 1
    assert await result_of(a, first) == b"timed out"  # the unregister is staged in A
    assert await h.runtime.signal(key, b"v") is DELIVERED  # H still names the waiter
    await cluster.pump()
    assert buffer_of(h, key) == b"v"
    assert index_of(h, key) is None
    await a.start_waiting(second, key)
    await cluster.pump()
    assert await result_of(a, second) == b"v"
    assert a.runner.finished == [(first, None), (second, b"v")]
    await clean(cluster)


async def test_a_returned_signal_does_not_replace_a_newer_one(
    cluster: SignalCluster, clock: MockClock
) -> None:
    """A value sent back to H after a newer signal was buffered is dropped:
    the newer one replaced it, as a second signal replaces the first."""
    a, h = cluster.parts[A], cluster.parts[H]
    first, second, key = run_in(A, "first"), run_in(A, "second"), key_at(H)
    await a.start_waiting(first, key)
    await cluster.pump()
    clock.advance(TIMEOUT)
    a.queue.promote_scheduled_now()
    await result_of(a, first)
    assert await h.runtime.signal(key, b"older") is DELIVERED  # on its way to A
    await a.outbox.send_now()  # A's unregister reaches H first
    await h.applier.apply_now()
    assert await h.runtime.signal(key, b"newer") is BUFFERED
    await cluster.pump()  # "older" comes back
    assert buffer_of(h, key) == b"newer"
    await a.start_waiting(second, key)
    await cluster.pump()
    assert await result_of(a, second) == b"newer"
    await clean(cluster)


async def test_a_second_waiter_of_another_partition_is_rejected(cluster: SignalCluster) -> None:
    """One waiter per key: a second run, in another partition than the key,
    fails with SignalWaiterExists's message; the first still gets the signal."""
    a, h = cluster.parts[A], cluster.parts[H]
    first, second, key = run_in(A, "first"), run_in(A, "second"), key_at(H)
    first_job = await a.start_waiting(first, key)
    await cluster.pump()
    await a.start_waiting(second, key)
    await cluster.pump()
    end = await a.finish(second)
    t = end.termination  # type: ignore[attr-defined]
    assert t.status is TerminalStatus.FAILED
    assert f"a waiter is already registered for correlation key {key!r}" in t.error
    assert repr(second) in t.error
    assert decode_remote_waiter(index_of(h, key) or b"") == RemoteWaiter(first, first_job.id, QUEUE)
    assert await h.runtime.signal(key, b"v") is DELIVERED
    await cluster.pump()
    assert await result_of(a, first) == b"v"
    await clean(cluster)


async def test_a_waiter_at_home_while_a_remote_run_waits_fails_at_once(
    cluster: SignalCluster,
) -> None:
    """A run in the key's home registering while a run of another partition
    waits fails at its registration, as on one store."""
    a, h = cluster.parts[A], cluster.parts[H]
    remote, local, key = run_in(A), run_in(H, "local"), key_at(H)
    await a.start_waiting(remote, key)
    await cluster.pump()
    await h.runtime.submit(RunSpec(key.encode(), run_id=local))
    t = (await h.finish(local)).termination  # type: ignore[attr-defined]
    assert (t.status, t.final_step) == (TerminalStatus.FAILED, 0)
    assert "a waiter is already registered" in t.error
    assert await h.runtime.signal(key, b"v") is DELIVERED
    await cluster.pump()
    assert await result_of(a, remote) == b"v"
    await clean(cluster)


async def test_a_cancelled_waiter_is_withdrawn_from_the_home(cluster: SignalCluster) -> None:
    """Cancelling a run waiting across partitions sends the unregister with
    the cancel: H's index goes, and a later signal is buffered."""
    a, h = cluster.parts[A], cluster.parts[H]
    run, key = run_in(A), key_at(H)
    await a.start_waiting(run, key)
    await cluster.pump()
    assert await a.runtime.cancel(run) is True
    assert len(a.outbox_records()) == 1
    await cluster.pump()
    assert index_of(h, key) is None
    assert await h.runtime.signal(key, b"v") is BUFFERED
    assert buffer_of(h, key) == b"v"


async def test_a_clients_signal_reaches_a_waiter_in_another_partition(
    cluster: SignalCluster, clock: MockClock
) -> None:
    """A process owning nothing writes the signal into H's inbox; H's owner
    applies it and forwards it to the run."""
    a = cluster.parts[A]
    run, key = run_in(A), key_at(H)
    await a.start_waiting(run, key)
    await cluster.pump()
    client = InboxWriter(cluster.store(H), clock)
    await client.signal(QUEUE, key, b"from a client")
    await cluster.pump()
    assert await result_of(a, run) == b"from a client"
    await clean(cluster)


async def test_a_signal_or_clear_on_a_partition_that_is_not_the_home_is_forwarded(
    cluster: SignalCluster,
) -> None:
    """A runtime of another partition forwards a key's signal and clear to
    its home (SENT; clear answers False), where they take effect."""
    a, h = cluster.parts[A], cluster.parts[H]
    key = key_at(H)
    assert await a.runtime.signal(key, b"v") is SENT
    assert buffer_of(a, key) is None
    await cluster.pump()
    assert buffer_of(h, key) == b"v"
    assert await a.runtime.clear_signal(key) is False
    await cluster.pump()
    assert buffer_of(h, key) is None
    await clean(cluster)


async def test_the_loops_carry_a_wait_and_its_signal_on_their_own(
    cluster: SignalCluster,
) -> None:
    """With the outbox and applier loops running (pokes from KV watches),
    a cross-partition wait and its signal complete with no pump."""
    cluster.start_loops()
    a, h = cluster.parts[A], cluster.parts[H]
    run, key = run_in(A), key_at(H)
    await a.start_waiting(run, key)
    while index_of(h, key) is None:  # the register message arrives on its own
        await asyncio.wait_for(h.queue.kv.watch(engine_keys.signal_wait_key(key)), 10)
    assert await h.runtime.signal(key, b"v") is DELIVERED
    assert await result_of(a, run) == b"v"


async def test_a_partition_owned_here_gets_its_messages_without_objects(
    clock: MockClock, make_objects: Factory
) -> None:
    """When this process owns the target, the outbox applies the request
    there at once (one commit with its done record): no inbox object; when
    it does not, the object waits in the target's inbox for its owner."""
    cl = SignalCluster(make_objects(), P, clock, direct=True)
    try:
        a = await cl.open(A)
        run, key = run_in(A), key_at(H)
        await a.start_waiting(run, key)
        assert await a.outbox.send_now() == 0  # H not opened here: an object
        assert len(await cl.store(H).list("inbox/")) == 1
        assert a.outbox_records() == []
        h = await cl.open(H)
        await h.applier.apply_now()
        assert index_of(h, key) is not None
        assert await h.runtime.signal(key, b"v") is DELIVERED
        assert await h.outbox.send_now() == 0  # A is opened here: applied at once
        assert await a.inbox_objects() == []
        assert h.outbox_records() == []
        assert await result_of(a, run) == b"v"
    finally:
        await cl.close()
