"""`WorkflowQueues`: the engine's workflow runtimes, one per workflow queue.

Every ``@workflow`` names a queue (``"workflows"`` unless ``queue=`` says
otherwise); the runs of a workflow are runs of the `WorkflowRuntime` on
that queue, and the engine's ``concurrency`` caps how many of its
deliveries execute at once (8 by default; 0 runs none in this process, for
a process that only starts runs and waits for them). Runtimes of every
queue known when the engine starts are spawned then; a queue first met
later (a workflow decorated after the engine started) is spawned when its
first run starts.

All runtimes share one memo prefix, so any of them reads the outcome of any
run (`WorkflowQueues.default`).

The runtimes are the engine's current mode's (`durable.decorators.modes`):
an engine that owns its store runs workflows on them; one that does not
(a client, a standby) builds runtimes that read and send requests, and
spawns no worker.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Mapping
from typing import TYPE_CHECKING

from durable.decorators.archive import run_keys
from durable.decorators.registry import DEFAULT_QUEUE, REGISTRY
from durable.decorators.runner import WorkflowRunner
from durable.decorators.terminal import RunTerminalHook
from durable.engine.runtime import RuntimeOptions, WorkerHandle, WorkflowRuntime

if TYPE_CHECKING:
    from durable.decorators.base import EngineBase
    from durable.decorators.modes import Mode

__all__ = ["DEFAULT_CONCURRENCY", "MEMO_PREFIX", "WorkflowQueues"]

#: Deliveries of one workflow queue that run at once in one process, unless
#: configured: async workflows mostly wait (on the store, on their steps'
#: I/O), and the store's group commit amortises each log write over the runs
#: in flight (at 8, a partitioned store wrote one log object per transition
#: per partition). Lower it per queue to protect a downstream service.
DEFAULT_CONCURRENCY = 100
#: The memo prefix of every workflow runtime of an engine.
MEMO_PREFIX = "workflows-memo"


async def forget_applied(engine: EngineBase, run_id: str, internal: Mapping[bytes, bytes]) -> bool:
    """``engine.forget`` of run ``run_id`` in the owner, committing
    ``internal`` (an inbox request's done record) with its deletes."""
    from durable.decorators.control import forget_run

    return await forget_run(engine, run_id, internal)


class WorkflowQueues:
    """The workflow runtimes of one running `Engine`, by queue name."""

    def __init__(self, engine: EngineBase, concurrency: Mapping[str, int], mode: Mode) -> None:
        self._engine = engine
        self._mode = mode
        self._limits = dict(concurrency)
        self._runtimes: dict[str, WorkflowRuntime] = {}
        self._workers: dict[str, WorkerHandle] = {}
        #: Set on shutdown: running workflows suspend before their next new step.
        self.draining = asyncio.Event()
        self.runner = WorkflowRunner(engine, self.draining)
        self.hook = RunTerminalHook(engine)

    def start(self) -> None:
        """Spawn the runtime of every queue a registered workflow names, and of
        every queue given a concurrency limit."""
        for queue in sorted({DEFAULT_QUEUE, *REGISTRY.queues(), *self._limits}):
            self.runtime_for(queue)

    @property
    def default(self) -> WorkflowRuntime:
        """The runtime of the default queue (any runtime reads any run)."""
        return self.runtime_for(DEFAULT_QUEUE)

    def runtime_for(self, queue: str, *, spawn: bool = True) -> WorkflowRuntime:
        """The runtime of workflow queue ``queue``; its worker runs in this
        process when ``spawn`` and its concurrency is not 0."""
        runtime = self._runtimes.get(queue)
        if runtime is None:
            limit = self._limits.get(queue, DEFAULT_CONCURRENCY)
            runtime = self._mode.runtime(
                self.runner,
                self.hook,
                RuntimeOptions(
                    queue_name=queue,
                    memo_prefix=MEMO_PREFIX,
                    memo_retention=self._engine.retention,
                    max_concurrent_steps=max(limit, 1),
                    clock=self._engine.clock,
                    slots=self._engine.slots_for(queue, limit),
                ),
            )
            runtime.run_keys = functools.partial(run_keys, self._engine)
            runtime.forget_run = functools.partial(forget_applied, self._engine)
            self._runtimes[queue] = runtime
        runs_here = self._mode.owner and self._limits.get(queue) != 0 and not self.draining.is_set()
        if spawn and runs_here and queue not in self._workers:
            self._workers[queue] = runtime.spawn()
        return runtime

    def runtime_of(self, run_id: str) -> WorkflowRuntime:
        """The runtime of the queue run ``run_id``'s current step is on (the
        default one for a terminated or unknown run)."""
        default = self.default
        pointer = default.view.pointer(run_id)
        if pointer is not None:
            job = self._mode.queue.job_record(pointer.job_id)
            if job is not None:
                return self.runtime_for(job.queue, spawn=False)
        return default

    async def abort(self) -> None:
        """Stop every worker at once, as a crash would: deliveries in flight
        keep their claims (requeued when the store is next opened)."""
        self.draining.set()
        workers, self._workers = list(self._workers.values()), {}
        await asyncio.gather(*(w.abort() for w in workers))

    async def shutdown(self) -> None:
        """Let running workflows suspend at their next new step, then stop
        every worker once its deliveries have settled."""
        self.draining.set()
        workers, self._workers = list(self._workers.values()), {}
        await asyncio.gather(*(w.shutdown() for w in workers))
