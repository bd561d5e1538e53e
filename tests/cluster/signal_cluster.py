"""Helpers of the signal-across-partitions tests: P partitions of one store,
each opened like its owner (a `Queue`, a `WorkflowRuntime` whose signals
take a `PartitionSignalRoute`, an `InboxApplier`, an `Outbox`), in one
process or in a child process (`signal_child.py`).

Runs wait on the key their input names: step 0 returns
``continue_on_signal`` on it (`TIMEOUT`), step 1 succeeds with the signal,
or ``timed out``. Tests move the messages by hand (`SignalCluster.pump`),
or let the outbox and applier loops run (`SignalCluster.start_loops`).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from dataclasses import dataclass, field

from durable.cluster.applier import InboxApplier
from durable.cluster.manifest import partition_of, partition_prefix
from durable.cluster.outbox import OUTBOX_PREFIX, Destination, Outbox
from durable.cluster.requests import INBOX_PREFIX
from durable.cluster.signal_route import PartitionSignalRoute
from durable.engine import (
    HEADER_SIGNAL_WAIT,
    RunSpec,
    RuntimeOptions,
    Step,
    StepOutcome,
    Succeed,
    WorkflowRuntime,
)
from durable.engine import keys as engine_keys
from durable.errors import StoreError
from durable.store.clock import Clock
from durable.store.objects.base import ObjectStore
from durable.store.objects.prefixed import PrefixedObjectStore
from durable.store.queue import JobRecord, JobStatus, OpenOptions, Queue, QueueConfig
from durable.testing import SimulatedCrash

#: The runtimes' queue.
QUEUE = "workflow-steps"
#: How long a run waits for its signal (seconds).
TIMEOUT = 60.0
#: Interval of the queues' background tasks: tests drive them by hand.
HOUR = 3600.0


def name_in(partition: int, partitions: int, stem: str) -> str:
    """The first ``{stem}-{i}`` whose partition is ``partition``."""
    return next(
        f"{stem}-{i}"
        for i in itertools.count()
        if partition_of(f"{stem}-{i}", partitions) == partition
    )


class Waiter:
    """Step 0 waits on the key its input names; step 1 succeeds with the
    signal (``timed out`` without one). Counts the step-1 deliveries."""

    def __init__(self) -> None:
        self.finished: list[tuple[str, bytes | None]] = []

    async def run_step(self, step: Step) -> StepOutcome:
        """The two steps."""
        if step.step_number == 0:
            return StepOutcome.continue_on_signal(b"", step.payload.decode(), TIMEOUT)
        self.finished.append((step.run_id, step.signal))
        return Succeed(step.signal if step.signal is not None else b"timed out")


@dataclass
class Part:
    """One partition opened by its owner."""

    number: int
    objects: ObjectStore
    queue: Queue
    runtime: WorkflowRuntime
    applier: InboxApplier
    outbox: Outbox
    runner: Waiter

    def signal_records(self) -> dict[bytes, bytes]:
        """Every signal record of the partition (buffers, index, delivered)."""
        return dict(self.queue.kv.scan(b"workflow/signal-", limit=100).entries)

    def outbox_records(self) -> list[bytes]:
        """The keys of the outbox records not sent yet."""
        return [k for k, _ in self.queue.kv.scan(OUTBOX_PREFIX, limit=1000).entries]

    async def inbox_objects(self) -> list[str]:
        """The request objects in the partition's inbox."""
        return await self.objects.list(INBOX_PREFIX)

    def waiting_job(self, run_id: str) -> JobRecord:
        """The scheduled step job of ``run_id`` waiting for a signal."""
        pointer = self.runtime.view.pointer(run_id)
        assert pointer is not None, run_id
        job = self.queue.job_record(pointer.job_id)
        assert job is not None
        assert job.status is JobStatus.SCHEDULED, job
        assert HEADER_SIGNAL_WAIT in job.headers
        return job

    async def start_waiting(self, run_id: str, key: str) -> JobRecord:
        """Submit ``run_id`` waiting on ``key``; run step 0; the waiting job."""
        sub = await self.runtime.submit(RunSpec(key.encode(), run_id=run_id))
        worker = self.runtime.spawn()
        try:
            await asyncio.wait_for(self.queue.wait_for_completion(sub.job_id, None), 30)
        finally:
            await worker.shutdown()
        return self.waiting_job(run_id)

    async def finish(self, run_id: str) -> object:
        """Run a worker until ``run_id`` terminates; its `RunEnd`."""
        worker = self.runtime.spawn()
        try:
            return await asyncio.wait_for(self.runtime.wait(run_id), 30)
        finally:
            await worker.shutdown()


@dataclass
class SignalCluster:
    """P partitions of ``root``; see the module docstring. ``direct``: an
    outbox applies requests to partitions opened here at once (as an engine
    owning them does); False: always through the target's inbox objects."""

    root: ObjectStore
    partitions: int
    clock: Clock
    direct: bool = True
    parts: dict[int, Part] = field(default_factory=dict)
    stores: dict[int, ObjectStore] = field(default_factory=dict)
    abandoned: list[Queue] = field(default_factory=list)

    def store(self, p: int) -> ObjectStore:
        """Partition ``p``'s store (the root below its prefix)."""
        if p not in self.stores:
            self.stores[p] = PrefixedObjectStore(self.root, partition_prefix(p))
        return self.stores[p]

    def destination(self, p: int) -> Destination:
        """How the outboxes reach partition ``p``."""
        part = self.parts.get(p)
        applier = part.applier if part is not None and self.direct else None
        return Destination(self.store(p), applier)

    def part_of(self, run_id: str) -> Part:
        """The partition of ``run_id`` (or the home of a key)."""
        return self.parts[partition_of(run_id, self.partitions)]

    async def open(self, p: int, objects: ObjectStore | None = None) -> Part:
        """Open partition ``p`` as its owner (over ``objects``, by default
        its prefixed store), fencing an earlier owner; nothing started."""
        objects = objects if objects is not None else self.store(p)
        queue = await Queue.open(
            objects,
            OpenOptions(
                clock=self.clock,
                reaper_interval=HOUR,
                scheduler_interval=HOUR,
                fence_check_interval=HOUR,
                queue_configs={QUEUE: QueueConfig(retry_backoff_base=0.0)},
            ),
        )
        runner = Waiter()
        runtime = WorkflowRuntime(queue, runner, options=RuntimeOptions(queue_name=QUEUE))
        applier = InboxApplier(objects, queue.kv, {QUEUE: runtime}.get, self.clock)
        outbox = Outbox(queue, self.destination, self.clock)
        runtime.signals.route = PartitionSignalRoute(p, self.partitions, outbox)
        part = Part(p, objects, queue, runtime, applier, outbox, runner)
        self.parts[p] = part
        return part

    async def open_all(self) -> None:
        """Open every partition."""
        for p in range(self.partitions):
            await self.open(p)

    def start_loops(self) -> None:
        """Run every partition's outbox and applier loops."""
        for part in self.parts.values():
            part.outbox.start()
            part.applier.start()

    async def pump(self, rounds: int = 20) -> None:
        """Send and apply every message until none is left."""
        for _ in range(rounds):
            for part in list(self.parts.values()):
                await part.outbox.send_now()
            for part in list(self.parts.values()):
                await part.applier.apply_now()
            if not await self.in_flight():
                return
        raise AssertionError(f"messages still in flight after {rounds} rounds")

    async def in_flight(self) -> int:
        """Outbox records and inbox objects left in every opened partition."""
        n = 0
        for part in self.parts.values():
            n += len(part.outbox_records()) + len(await part.inbox_objects())
        return n

    async def drop(self, p: int) -> None:
        """Forget partition ``p`` as a crash would (its loops stopped, its
        queue left as it is: the next `open` fences it)."""
        part = self.parts.pop(p)
        part.outbox.abort()
        await part.applier.stop()
        self.abandoned.append(part.queue)

    async def close(self) -> None:
        """Stop and close every partition."""
        for p in list(self.parts):
            part = self.parts.pop(p)
            await part.outbox.stop()
            await part.applier.stop()
            await part.queue.close()
        for queue in self.abandoned:
            with contextlib.suppress(StoreError, SimulatedCrash):
                await queue.close()
        self.abandoned.clear()


def index_of(part: Part, key: str) -> bytes | None:
    """The waiter index value of ``key`` in ``part``."""
    return part.queue.kv.get(engine_keys.signal_wait_key(key))


def buffer_of(part: Part, key: str) -> bytes | None:
    """The signal buffered under ``key`` in ``part``."""
    return part.queue.kv.get(engine_keys.signal_buffer_key(key))
