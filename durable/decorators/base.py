"""`EngineBase`: what the parts of the decorators' runtime reach of an engine.

The runtimes, the runner, the terminal hook, the run contexts and the
engine's services are built with an engine and use only this: the
engine's configuration (codec, clock, limits, retention), its store *for
a run* (`EngineBase.mode`, `EngineBase.queue`, `EngineBase.workflows`),
routing (`EngineBase.for_run`, `EngineBase.co_located`,
`EngineBase.new_run_id`) and its services. Two classes implement it:

- `durable.decorators.engine.Engine`, the user's engine: on an
  unpartitioned store its mode is the store's and ``for_run`` is itself;
  on a partitioned one ``for_run(run_id)`` is the run's partition.
- `durable.decorators.partitioned.PartitionEngine`, one partition of a
  partitioned engine: its own mode, runtimes and service instances; the
  configuration and routing are its engine's.

So a part built with a partition's `PartitionEngine` reaches its own
partition without routing, and a part built with the `Engine` routes by
run id.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from durable._logging import get_logger

if TYPE_CHECKING:
    from durable.decorators.codec import Codec
    from durable.decorators.executors import StepExecutor
    from durable.decorators.handles import WorkflowHandle
    from durable.decorators.modes import Mode
    from durable.decorators.runtimes import WorkflowQueues
    from durable.decorators.services import EngineService
    from durable.decorators.session import Role, StoreSession
    from durable.decorators.threads import SyncThreads
    from durable.engine.access import RunQueue
    from durable.store.clock import Clock
    from durable.store.queue.worker import Slots

__all__ = ["EngineBase"]

log = get_logger("durable.decorators")


class EngineBase:
    """The engine as its parts see it; see the module docstring.

    Subclasses set the configuration attributes and implement the store
    and routing members (this class raises `NotImplementedError` there).
    """

    #: ``"worker"`` or ``"client"`` (`durable.decorators.engine.Engine`).
    role: Role
    #: How arguments, results, errors and signals are encoded.
    codec: Codec
    #: The source of every timestamp, timeout and durable timer.
    clock: Clock
    #: Seconds a terminated run is kept (None: for ever).
    retention: float | None
    #: Attempts of a run that may end in a row without progress.
    max_attempts_without_progress: int
    #: Record this engine's codec as the store's instead of checking it.
    replace_codec_record: bool
    #: The executors of step and job bodies by name (``"inline"`` is implicit).
    executors: dict[str, StepExecutor]
    #: The thread pool of plain ``def`` step and job bodies (`durable.decorators.threads`).
    threads: SyncThreads

    def __init__(self, concurrency: dict[str, int], services: list[EngineService]) -> None:
        self._concurrency = concurrency
        self._services = services
        self._started: list[EngineService] = []

    # ------------------------------------------------------- the store

    @property
    def mode(self) -> Mode:
        """What this engine runs on now for its runs (`durable.decorators.modes`)."""
        raise NotImplementedError

    @property
    def store_session(self) -> StoreSession | None:
        """The session whose mode this engine's runs use now (None when not
        running, or for an engine whose runs are in partitions: ask
        `for_run`); what `durable.decorators.moves` follows across a move."""
        raise NotImplementedError

    @property
    def queue(self) -> RunQueue:
        """The store (of this engine's runs) as this engine reaches it now."""
        return self.mode.queue

    @property
    def workflows(self) -> WorkflowQueues:
        """The workflow runtimes, one per workflow queue."""
        raise NotImplementedError

    # --------------------------------------------------------- routing

    @property
    def partition_count(self) -> int | None:
        """The store's partition count while running on a partitioned store, else None."""
        raise NotImplementedError

    @property
    def partitioned(self) -> bool:
        """True while the engine runs on a partitioned store."""
        return self.partition_count is not None

    def for_run(self, run_id: str) -> EngineBase:
        """The engine as the partition of ``run_id`` (a run, job, key,
        group or schedule id) sees it."""
        raise NotImplementedError

    def for_key(self, key: str) -> EngineBase:
        """The engine as the home partition of signal key ``key`` sees it
        (`durable.decorators.partitioned.signal_home`)."""
        raise NotImplementedError

    def co_located(self, base: str, with_run: str) -> str:
        """``base`` as an id in ``with_run``'s partition (``base`` itself
        unless partitioned; `durable.cluster.manifest.co_located_id`)."""
        raise NotImplementedError

    def new_run_id(self) -> str:
        """A new run id."""
        raise NotImplementedError

    def handle(self, run_id: str) -> WorkflowHandle[Any]:
        """A handle on run ``run_id``."""
        raise NotImplementedError

    def record_errors(self, errors: list[BaseException]) -> None:
        """Errors of stopping a mode, raised when the engine exits."""
        raise NotImplementedError

    # ------------------------------------------------------------ limits

    def concurrency_of(self, queue: str, default: int) -> int:
        """The concurrency given for ``queue`` in ``Engine(concurrency=...)``,
        else ``default`` (0: this process runs none of that queue's work)."""
        return self._concurrency.get(queue, default)

    def workflow_limits(self) -> dict[str, int]:
        """The concurrency limits of the workflow queues (not the services')."""
        owned = self.service_queues()
        return {q: n for q, n in self._concurrency.items() if q not in owned}

    def service_queues(self) -> frozenset[str]:
        """The queues the engine's services run (a service may name them with
        a ``queues()`` method): no workflow worker is started on those."""
        owned: set[str] = set()
        for service in self._services:
            queues = getattr(service, "queues", None)
            if callable(queues):
                owned.update(queues())
        return frozenset(owned)

    def slots_for(self, queue: str, limit: int) -> Slots | None:
        """The slots every partition's worker of ``queue`` shares in this
        process (at most ``limit`` of its runs or jobs at once, whatever
        number of partitions this process owns); None on an unpartitioned
        store (the runtime's own limit)."""
        raise NotImplementedError

    # ---------------------------------------------------------- services

    def _runnable_services(self) -> list[EngineService]:
        """The services `start_services` starts (here: every one added)."""
        return self._services

    def started_services(self) -> list[EngineService]:
        """The services running now, in start order."""
        return list(self._started)

    async def start_services(self) -> None:
        """Start the services added since the engine started (idempotent)."""
        for service in self._runnable_services():
            if service not in self._started:
                await service.start(self)
                self._started.append(service)

    async def stop_services(self, *, abort: bool = False) -> list[BaseException]:
        """Stop the running services in reverse order (``abort``: as a crash
        would, where a service can: its ``abort()``); the errors they raised."""
        errors: list[BaseException] = []
        for service in reversed(self._started):
            stop = getattr(service, "abort", None) if abort else None
            try:
                await (stop() if callable(stop) else service.stop())
            except Exception as e:  # the others still stop
                log.error("service failed to stop", service=repr(service), error=str(e))
                errors.append(e)
        self._started.clear()
        return errors
