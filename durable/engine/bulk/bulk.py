"""`Bulk`: one pipeline over many inputs, each item one single-step run.

A bulk run is a thin layer over a run group (`durable.engine.groups`):
`Bulk.run` encodes every input as a group member, starts a worker of the
bulk runtime, submits the members, folds the group's results into a
`BulkTally` (counts, cost, output records to the sink) until every item
has terminated, stops the worker, flushes the sink and returns the
`BulkReport`. Running the same batch again (the same keys and inputs)
finds the same group: items that succeeded are skipped, failed and
cancelled ones run again with their memos, active ones (left by a run that
stopped or crashed) are waited for.

On a partitioned store a batch lives in the partition of its group id:
build the `Bulk` with a function instead of a queue, ``group id -> the
Queue of its partition while this process owns it, else None`` (an
`Engine`'s ``owned_queue``); `Bulk.run` then runs the batch on that
partition, and raises `InvalidArgument` naming the group when this process
does not own it.
"""

from __future__ import annotations

import asyncio
import hashlib
import struct
from collections.abc import AsyncIterable, AsyncIterator, Callable, Iterable, Sequence
from typing import Any

from durable._logging import get_logger
from durable.engine.bulk.codec import encode_item
from durable.engine.bulk.options import BulkOptions
from durable.engine.bulk.pipeline import BulkStepRunner, PipelineLike
from durable.engine.bulk.progress import BulkProgress, BulkReport, BulkTally
from durable.engine.bulk.sinks import NullSink, Sink
from durable.engine.groups import GroupMember, RunGroup
from durable.engine.memo_codec import normalize_prefix
from durable.engine.progress import DEFAULT_WINDOW, Progress
from durable.engine.runs import TerminalStatus, default_memo_prefix
from durable.engine.runtime import WorkerHandle, WorkflowRuntime
from durable.errors import BulkFailureThreshold, InvalidArgument, StoreError
from durable.store.clock import SystemClock
from durable.store.queue import Queue

__all__ = ["Bulk", "batch_group_id"]

log = get_logger("durable.engine.bulk")


def batch_group_id(queue_name: str, memo_prefix: str, members: Sequence[GroupMember]) -> str:
    """The run group of a batch when `BulkOptions.group_id` is None:
    ``"bulk-"`` + hex SHA-256 of the queue, the memo prefix and every
    member's key and stored input, in order."""
    digest = hashlib.sha256()
    parts: list[bytes] = [queue_name.encode(), memo_prefix.encode()]
    for member in members:
        parts += [member.key.encode(), member.input]
    for part in parts:
        digest.update(struct.pack(">Q", len(part)))
        digest.update(part)
    return "bulk-" + digest.hexdigest()


async def _each(inputs: Iterable[Any] | AsyncIterable[Any]) -> AsyncIterator[Any]:
    if isinstance(inputs, AsyncIterable):
        async for item in inputs:
            yield item
    elif isinstance(inputs, Iterable) and not isinstance(inputs, str | bytes):
        for item in inputs:
            yield item
    else:
        raise InvalidArgument(
            f"bulk inputs are an iterable or an async iterable of items, got {inputs!r:.80}"
        )


class Bulk:
    """One pipeline over many inputs; see the module docstring.

    ``Bulk(queue, pipeline, options)`` builds the bulk runtime on ``queue``
    (nothing runs until `run`); `output` sets the sink.
    """

    def __init__(
        self,
        queue: Queue | Callable[[str], Queue | None],
        pipeline: PipelineLike,
        options: BulkOptions | None = None,
    ) -> None:
        if options is not None and not isinstance(options, BulkOptions):
            raise InvalidArgument(f"options must be BulkOptions, got {options!r:.80}")
        self.options = options if options is not None else BulkOptions()
        self._runner = BulkStepRunner(pipeline)
        self._route = None if isinstance(queue, Queue) else queue
        #: The runtime the items run on (its queue is `BulkOptions.queue_name`):
        #: given a function (partitioned), the last batch's partition's (None before).
        self.runtime: WorkflowRuntime | None = (
            self._runtime_on(queue) if isinstance(queue, Queue) else None
        )
        self._sink: Sink = NullSink()
        clock = self.runtime.clock if self.runtime is not None else self.options.clock
        self._tally = BulkTally(clock if clock is not None else SystemClock())
        self._running = False

    def __repr__(self) -> str:
        return f"Bulk(queue_name={self.options.queue_name!r}, sink={self._sink!r})"

    def output(self, sink: Sink) -> Bulk:
        """Write each item's output record to ``sink`` (default: `NullSink`); returns self."""
        if not isinstance(sink, Sink):
            raise InvalidArgument(f"a sink has async write(record) and flush(), got {sink!r:.80}")
        self._sink = sink
        return self

    def progress(self) -> BulkProgress:
        """Where the current (or last) run is; all zeros before the first."""
        return self._tally.progress()

    async def group_progress(self, window: float = DEFAULT_WINDOW) -> Progress:
        """The current (or last) batch as every run group reports it: its items
        counted by state (pending, running, waiting and the terminations),
        the completion rate over the last ``window`` seconds and the time
        remaining (`durable.engine.progress.Progress`, read from the member
        records, as ``engine.group_progress(report.group_id)`` from any
        process). Unlike `progress`, it counts every item of the batch, those
        that succeeded in an earlier run too. `InvalidArgument` before the
        first run."""
        group_id = self._tally.group_id
        if not group_id:
            raise InvalidArgument("this Bulk has not run a batch yet: no progress to report")
        return await self.group(group_id).progress(window)

    def _runtime_on(self, queue: Queue) -> WorkflowRuntime:
        return WorkflowRuntime(queue, self._runner, options=self.options.runtime_options())

    def _runtime_for(self, group_id: str) -> WorkflowRuntime:
        """The runtime of batch ``group_id``: on the given queue, or on the
        queue of its partition (`InvalidArgument` if this process does not
        own it)."""
        if self._route is None:
            assert self.runtime is not None
            return self.runtime
        queue = self._route(group_id)
        if queue is None:
            raise InvalidArgument(
                f"bulk batch {group_id!r}: this process does not own the partition the "
                "batch lives in; run it in the worker that owns it (or on one store)"
            )
        if self.runtime is None or self.runtime.queue is not queue:
            self.runtime = self._runtime_on(queue)
        return self.runtime

    def group(self, group_id: str) -> RunGroup:
        """The run group of a batch (`BulkReport.group_id`): to inspect it, or
        to `RunGroup.forget` it once its outputs are consumed."""
        return self._runtime_for(group_id).group(group_id)

    async def run(
        self,
        inputs: Iterable[Any] | AsyncIterable[Any],
        *,
        shutdown: asyncio.Event | None = None,
    ) -> BulkReport:
        """Run the pipeline over ``inputs`` and wait until every item terminated
        (or ``shutdown`` is set); the report.

        Inputs are plain data, or `InvalidItem` (such an item fails). Bad input
        (not plain data, a key twice, a batch unlike the one stored under an
        explicit `BulkOptions.group_id`) raises before any item is submitted.
        When ``shutdown`` is set the worker stops claiming, the items in
        flight finish, and the report counts what terminated until then;
        the rest stays queued for the next run of the batch. Raises
        `BulkFailureThreshold` (with the report) when too many items failed.

        An error on the way (the store failing, the sink failing) is raised
        after the worker stopped; on a store error or a cancellation the
        worker stops at once, as a crash would, and the items in flight run
        again later. One run at a time per `Bulk`.
        """
        if self._running:
            raise InvalidArgument("this Bulk is already running a batch; await that run first")
        self._running = True
        try:
            return await self._run(inputs, shutdown)
        finally:
            self._running = False

    async def _run(
        self, inputs: Iterable[Any] | AsyncIterable[Any], shutdown: asyncio.Event | None
    ) -> BulkReport:
        members = [
            GroupMember(key, encode_item(key, item)) async for key, item in self._keyed(inputs)
        ]
        memo_prefix = normalize_prefix(
            self.options.memo_prefix or default_memo_prefix(self.options.queue_name)
        )
        group_id = self.options.group_id or batch_group_id(
            self.options.queue_name, memo_prefix, members
        )
        runtime = self._runtime_for(group_id)
        tally = self._tally = BulkTally(runtime.clock)
        group = runtime.group(group_id)
        keys = [(m.key, group.run_id(m.key)) for m in members]
        tally.begin(group_id, keys, {run_id for key, run_id in keys if _succeeded(group, key)})
        if members:
            worker = runtime.spawn()
            try:
                await group.submit(members, self.options.run_options())
                await self._consume(group, tally, shutdown)
            except BaseException as e:
                await self._stop_after(worker, e)
                raise
            await worker.shutdown()
        await self._sink.flush()
        report = tally.report()
        log.info(
            "bulk run finished",
            group_id=group_id,
            total=report.total,
            succeeded=report.succeeded,
            failed=report.failed,
            cancelled=report.cancelled,
            skipped=report.skipped,
        )
        threshold = self.options.fail_threshold
        if (
            threshold is not None
            and report.total
            and report.failed * 100 / report.total > threshold
        ):
            raise BulkFailureThreshold(report.failed, report.total, threshold, report)
        return report

    async def _keyed(
        self, inputs: Iterable[Any] | AsyncIterable[Any]
    ) -> AsyncIterator[tuple[str, Any]]:
        index = 0
        async for item in _each(inputs):
            yield self.options.key(index, item), item
            index += 1

    async def _consume(
        self, group: RunGroup, tally: BulkTally, shutdown: asyncio.Event | None
    ) -> None:
        """Fold the group's results into ``tally`` and the sink until every
        item terminated, or ``shutdown`` is set."""

        async def drain() -> None:
            async for result in group.results():
                record = tally.observe(result)
                if record is not None:
                    await self._sink.write(record)

        if shutdown is None:
            await drain()
            return
        draining = asyncio.ensure_future(drain())
        stopping = asyncio.ensure_future(shutdown.wait())
        try:
            await asyncio.wait({draining, stopping}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stopping.cancel()
            draining.cancel()  # a no-op once it finished
            await asyncio.gather(draining, stopping, return_exceptions=True)
        if not draining.cancelled():
            draining.result()  # its error, if it failed

    async def _stop_after(self, worker: WorkerHandle, error: BaseException) -> None:
        """Stop ``worker`` after ``error`` and flush what the sink holds; their
        own failures are logged (``error`` is the one raised)."""
        try:
            if isinstance(error, asyncio.CancelledError | StoreError):
                await worker.abort()
            else:
                await worker.shutdown()
        except Exception as e:
            log.warning("bulk run: stopping the worker after an error failed", error=str(e))
        try:
            await self._sink.flush()
        except Exception as e:
            log.warning("bulk run: flushing the sink after an error failed", error=str(e))


def _succeeded(group: RunGroup, key: str) -> bool:
    record = group.member_record(key)
    return (
        record is not None
        and record.termination is not None
        and record.termination.status is TerminalStatus.SUCCEEDED
    )
