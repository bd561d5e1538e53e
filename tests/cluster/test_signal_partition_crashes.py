"""Crashes while a signal crosses partitions: exactly once, in one process.

Each test crashes one partition's owner between two steps of the message
protocol (`durable.engine.signals`, `durable.cluster.outbox`), opens the
partition again (fencing the dead owner) and checks that the signal was
delivered to exactly one waiter and left no copy behind: a message applied
twice would wake nothing the second time and send the value back, where it
would sit buffered (so "no buffer at the home" is what a duplicate breaks),
and a message lost would leave the run waiting or the value nowhere.

The crashes: the home dies after the commit that decides to forward, before
it sends; the home dies after the send, before it deletes its outbox record
(the resend is deduplicated by the target's done record; through an inbox
object or a direct apply); the run's partition dies after a deliver's
commit, before it deletes the inbox object; the run's partition dies with a
give-back staged; a register staged in a settlement whose partition dies.
"""

from __future__ import annotations

import pytest
from cluster_helpers import Factory
from signal_cluster import TIMEOUT, Part, SignalCluster, buffer_of, index_of, name_in

from durable.engine.signals import SignalOutcome
from durable.errors import ObjectStoreError, StoreClosed
from durable.store.clock import MockClock
from durable.testing import FaultyObjectStore

P = 2
A, H = 0, 1


RUN, KEY = name_in(A, P, "run"), name_in(H, P, "key")


async def reopen(cluster: SignalCluster, p: int) -> Part:
    """Partition ``p``'s owner died: a new one opens it."""
    await cluster.drop(p)
    return await cluster.open(p)


async def waiting(cluster: SignalCluster) -> None:
    """RUN waits on KEY, registered at the home."""
    await cluster.parts[A].start_waiting(RUN, KEY)
    await cluster.pump()
    assert index_of(cluster.parts[H], KEY) is not None


async def delivered_once(cluster: SignalCluster, value: bytes) -> None:
    """RUN ended with ``value``, its step 1 ran once, and nothing is left."""
    a = cluster.parts[A]
    end = await a.finish(RUN)
    assert end.outcome.result == value  # type: ignore[attr-defined]
    await cluster.pump()
    assert buffer_of(cluster.parts[H], KEY) is None
    assert index_of(cluster.parts[H], KEY) is None
    assert await cluster.in_flight() == 0


def lost_delete() -> ObjectStoreError:
    """A delete that fails for good: the process died before it."""
    error = ObjectStoreError("injected: the process died before its delete")
    error.transient = False
    return error


async def test_the_home_dies_before_it_sends_the_deliver(cluster: SignalCluster) -> None:
    """The signal's commit (index out, deliver staged) is durable; the home
    dies before sending: its next owner sends it."""
    await waiting(cluster)
    h = cluster.parts[H]
    assert await h.runtime.signal(KEY, b"v") is SignalOutcome.DELIVERED
    h = await reopen(cluster, H)
    assert len(h.outbox_records()) == 1
    await cluster.pump()
    await delivered_once(cluster, b"v")


async def test_the_home_dies_between_the_send_and_its_outbox_delete(
    cluster: SignalCluster, clock: MockClock
) -> None:
    """The deliver reached the run's partition (applied, or its object
    written), then the home died before deleting its outbox record: the
    next owner sends it again, and the target's done record makes the copy
    a no-op (no second wake, nothing sent back)."""
    store = cluster.store(H)
    await cluster.drop(H)
    faulty = FaultyObjectStore(store)
    h = await cluster.open(H, faulty)
    await waiting(cluster)
    assert await h.runtime.signal(KEY, b"v") is SignalOutcome.DELIVERED
    a = cluster.parts[A]
    faulty.crash_after_writes(0)  # the object or the apply is in A's store
    with pytest.raises(StoreClosed, match="SimulatedCrash"):  # the delete's commit
        await h.outbox.send_now()
    await a.applier.apply_now()  # the first copy is applied: the run is woken
    job = a.queue.job_record(a.runtime.view.pointer(RUN).job_id)  # type: ignore[union-attr]
    assert job is not None
    assert job.wake_payload == b"v"
    h = await reopen(cluster, H)
    assert len(h.outbox_records()) == 1  # the record of the deliver: sent again
    await cluster.pump()
    await delivered_once(cluster, b"v")
    assert a.runner.finished == [(RUN, b"v")]


async def test_the_runs_partition_dies_between_applying_a_deliver_and_its_delete(
    make_objects: Factory, clock: MockClock
) -> None:
    """Through inbox objects: A wakes the run (the done record rides the
    wake), then dies before deleting the object; its next owner finds the
    done record and only deletes it."""
    cl = SignalCluster(make_objects(), P, clock, direct=False)
    try:
        await cl.open_all()
        faulty = FaultyObjectStore(cl.store(A))
        await cl.drop(A)
        a = await cl.open(A, faulty)
        await waiting(cl)
        assert await cl.parts[H].runtime.signal(KEY, b"v") is SignalOutcome.DELIVERED
        await cl.parts[H].outbox.send_now()
        faulty.fail_next("delete", lost_delete())
        with pytest.raises(ObjectStoreError, match="before its delete"):
            await a.applier.apply_now()
        a = await reopen(cl, A)
        assert len(await a.inbox_objects()) == 1
        assert await a.applier.apply_now() == 0  # applied before: only deleted
        await delivered_once(cl, b"v")
    finally:
        await cl.close()


async def test_the_runs_partition_dies_with_a_give_back_staged(
    cluster: SignalCluster, clock: MockClock
) -> None:
    """The run timed out, the deliver came back to A, A staged the
    give-back and died before sending: its next owner sends it, and the
    home buffers the value once, for the next waiter."""
    await waiting(cluster)
    a, h = cluster.parts[A], cluster.parts[H]
    clock.advance(TIMEOUT)
    a.queue.promote_scheduled_now()
    end = await a.finish(RUN)
    assert end.outcome.result == b"timed out"  # type: ignore[attr-defined]
    assert await h.runtime.signal(KEY, b"v") is SignalOutcome.DELIVERED
    await h.outbox.send_now()
    await a.applier.apply_now()  # objects: applied now; direct: applied already
    assert any(a.outbox_records())  # the give-back (and the unregister)
    a = await reopen(cluster, A)
    await cluster.pump()
    assert buffer_of(h, KEY) == b"v"
    second = name_in(A, P, "second")
    await a.start_waiting(second, KEY)
    await cluster.pump()
    end = await a.finish(second)
    assert end.outcome.result == b"v"  # type: ignore[attr-defined]
    await cluster.pump()
    assert buffer_of(h, KEY) is None
    assert await cluster.in_flight() == 0


async def test_a_registration_staged_by_a_partition_that_dies_is_sent_by_the_next_owner(
    cluster: SignalCluster,
) -> None:
    """The settlement of the waiting step is durable with its register
    message; the partition dies before sending it: the next owner does,
    and a signal then reaches the run."""
    a = cluster.parts[A]
    await a.start_waiting(RUN, KEY)
    assert len(a.outbox_records()) == 1
    a = await reopen(cluster, A)
    assert len(a.outbox_records()) == 1
    await cluster.pump()
    assert index_of(cluster.parts[H], KEY) is not None
    assert await cluster.parts[H].runtime.signal(KEY, b"v") is SignalOutcome.DELIVERED
    await cluster.pump()
    await delivered_once(cluster, b"v")
