"""`Engine`: the decorators' runtime, opened with ``async with Engine(url):``.

The engine composes what the decorators need and nothing else: its hold on
the store in its role (`durable.decorators.session.StoreSession`: the
store's `Queue` when it owns the store, a client view and the store's inbox
when it does not), the `Codec` of arguments and results, the clock, one
workflow runtime per workflow queue (`WorkflowQueues`) and the *services*
that start and stop with it (the ``@job`` runner is one). Starting runs,
handles and waits live in their own modules; they reach the engine through
`durable.decorators.current.current_engine`.

```python
async with Engine("file:///var/lib/app/durable") as engine:       # a worker
    await engine.serve()          # until SIGTERM/SIGINT: drain, hand over

async with Engine("s3://bucket/app", role="client") as engine:    # a web server
    handle = await pipeline.start("https://example.com")
    print(await handle.result())
```

Any number of processes use one store: one *owner* at a time runs the
work; other worker-role engines wait as *standbys* (serving as clients
meanwhile) and take over when the owner dies or leaves; clients never own
it. On exit the engine lets every running workflow finish its step in
flight and suspend (its next step runs in the next owner), stops its
services (in reverse order), closes the store and, as the owner, hands it
over to a standby.
"""

from __future__ import annotations

import asyncio
import os
import signal as _signal
from collections.abc import AsyncIterator, Collection, Mapping, Sequence
from contextvars import Token
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Literal

from durable._logging import get_logger
from durable.cluster.manifest import check_partitions, co_located_id, open_manifest, partition_of
from durable.cluster.owner import DEFAULT_HEARTBEAT, DEFAULT_TTL, check_timing
from durable.decorators.base import EngineBase
from durable.decorators.codec import Codec
from durable.decorators.context import journaled_here
from durable.decorators.current import reset_engine, set_engine
from durable.decorators.executors import check_executors
from durable.decorators.heap import freeze_startup_heap
from durable.decorators.modes import OwnerMode
from durable.decorators.partitioned import PartitionedSession
from durable.decorators.progress import MAX_ATTEMPTS_WITHOUT_PROGRESS
from durable.decorators.services import EngineService, default_services
from durable.decorators.session import Role, StoreSession
from durable.decorators.threads import DEFAULT_SYNC_THREADS, SyncThreads
from durable.engine.signals import SignalOutcome
from durable.errors import Fenced, InvalidArgument, InvalidStoreUrl, NoEngine, SelfFenced
from durable.store.clock import Clock, SystemClock
from durable.store.objects.base import ObjectStore
from durable.store.objects.url import check_writer_url, resolve_store
from durable.store.queue import Queue
from durable.store.queue.worker import Slots

if TYPE_CHECKING:
    from durable.decorators.handles import WorkflowHandle
    from durable.decorators.listing import RunPage
    from durable.decorators.modes import Mode
    from durable.decorators.runtimes import WorkflowQueues
    from durable.decorators.schedules import ScheduleInfo
    from durable.decorators.status import WorkflowState
    from durable.engine.access import RunQueue
    from durable.engine.progress import Progress

__all__ = ["DEFAULT_STORE", "Engine"]

log = get_logger("durable.decorators")

#: Where ``Engine()`` keeps its store without a URL: a directory in the cwd.
DEFAULT_STORE = ".durable"


def _check_store(
    url: str | os.PathLike[str] | ObjectStore | None,
) -> str | os.PathLike[str] | ObjectStore:
    if url is None:
        return DEFAULT_STORE
    if isinstance(url, ObjectStore):
        return url
    try:
        check_writer_url(url)
    except InvalidStoreUrl as e:
        raise InvalidArgument(f"Engine: {e}") from None
    return url


def _check_concurrency(concurrency: Mapping[str, int] | None) -> dict[str, int]:
    limits = dict(concurrency or {})
    for queue, limit in limits.items():
        if not isinstance(queue, str):
            raise InvalidArgument(f"concurrency keys are queue names (str), got {queue!r}")
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 0:
            raise InvalidArgument(
                f"concurrency[{queue!r}] must be an int >= 0 (runs of that queue at once), "
                f"got {limit!r}"
            )
    return limits


def _check_stall_limit(limit: int) -> int:
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        raise InvalidArgument(
            "max_attempts_without_progress must be an int >= 1 (attempts of a run that may "
            f"end in a row without journaling anything before it fails), got {limit!r}"
        )
    return limit


def _check_retention(retention: float | timedelta | None) -> float | None:
    if isinstance(retention, timedelta):
        retention = retention.total_seconds()
    if retention is None:
        return None
    if isinstance(retention, bool) or not isinstance(retention, int | float) or retention <= 0:
        raise InvalidArgument(
            f"retention must be None, a number of seconds > 0 or a timedelta, got {retention!r}"
        )
    return float(retention)


def _check_role(role: object) -> Role:
    if role not in ("worker", "client"):
        raise InvalidArgument(
            f"role must be 'worker' (owns the store or stands by) or 'client' (never owns "
            f"it), got {role!r}"
        )
    return role


def _raise_if_fenced(mode: Mode) -> None:
    """A call on an owner whose writer was fenced fails at once (its memory
    may be stale) until the engine serves as a standby."""
    if not mode.owner:
        return
    failure = getattr(mode.queue.writer, "failure", None)
    if isinstance(failure, SelfFenced):
        raise SelfFenced(failure.url, failure.reason, failure.seq) from None
    if isinstance(failure, Fenced):
        raise Fenced(failure.url, failure.seq) from None


class Engine(EngineBase):
    """Runs the workflows (and, through services, the jobs) of this process.

    ``url`` is the store: a path, a ``file://``, ``s3://``, ``gs://`` or
    ``az://`` URL, ``memory://name``, or an `ObjectStore` (which the caller
    closes); None is the directory ``./.durable``, and any other value or
    scheme is refused here with `InvalidArgument`. A missing directory is
    created; a missing bucket or container raises `StoreNotFound` on enter.
    ``storage_options`` go to the backend.

    ``role="worker"`` (the default) owns the store when no live process
    does, or waits as a standby (serving as a client meanwhile) and takes
    over when the owner dies (within ``ttl`` + 2 ``heartbeat`` seconds; at
    once on a local directory) or leaves (within one heartbeat); it never
    fences a live owner unless ``takeover=True``. ``role="client"`` never
    owns the store nor fences anyone: a web server, a script, a notebook.
    ``ttl`` (15 s) and ``heartbeat`` (3 s) time the membership
    (`durable.cluster.owner`). See `durable.decorators.session`.

    ``signing_key`` signs every pickle the codec writes and refuses
    unsigned ones (a list rotates keys: the first signs, each verifies);
    ``codec="msgpack"`` refuses values that are not plain data. The store
    records the codec and the fingerprints of the keys its payloads need: an
    engine that cannot read them refuses to open with `CodecMismatch`
    (``replace_codec_record=True`` records this engine's configuration
    instead, for a deliberate change; see `durable.decorators.codec_record`).
    ``concurrency`` caps the runs of each workflow queue that execute at
    once (default 100 per queue, per process; 0 runs none of them in this process).
    ``retention`` (seconds or a timedelta; None keeps them for ever) is how
    long a terminated run stays in the store: its result, archived journal
    and published values are then removed and its id reads as unknown
    (`RunNotFound`). ``clock`` is the source of all time (a
    `durable.store.clock.MockClock` in tests; the membership heartbeats run
    on real time). ``max_attempts_without_progress`` (default 20) is how
    many attempts of a run may end in a row without journaling anything (a
    crash of its process counts) before the run fails with `RunStalled`; a
    run that journals something in each attempt is never failed by its
    crashes, and a stalled run waits longer before each attempt (1 s,
    doubling, at most 5 minutes; `durable.decorators.progress`).

    ``partitions`` (1 to `durable.cluster.manifest.MAX_PARTITIONS`) opens
    or creates a partitioned store: P stores below the URL, the count
    recorded at creation in ``cluster.json`` (another count is refused with
    `PartitionMismatch`; without ``partitions=`` the stored count is used).
    Each run lives in the partition its id hashes to; worker engines on one
    store share the partitions as a pool (`durable.decorators.partitioned`),
    and a lone one owns them all at once. Route per-run store access with
    `for_run`. ``concurrency`` stays per process and per queue, whatever
    number of partitions the process owns (their workers share one limit).

    ``executors`` maps names to the executors that ``@step(executor=name)``
    and ``@job(executor=name)`` bodies run on: a ``distributed.Client``
    (wrapped in `durable.executors.dask.DaskExecutor`) or any
    `durable.decorators.executors.StepExecutor`; ``"inline"`` (the default,
    in this process) is reserved. The caller owns and closes them. Not with
    ``codec="msgpack"`` (bodies and arguments travel by pickle): refused
    here with `InvalidArgument`, as is a bad name or value.

    ``sync_threads`` (default 16) is how many plain ``def`` step and job
    bodies run at once, each in a thread of the engine's pool (the next
    waits for a thread); see `durable.decorators.threads`.

    ``freeze_gc`` (default True): at the first engine start in the
    process, collect garbage once and freeze the objects alive then (the
    imports, the application's setup), so that the collector's full passes
    stop re-scanning them; False leaves the collector alone. See
    `durable.decorators.heap`.

    Every default service (`durable.decorators.services`) is added when the
    engine is built; `add_service` adds more.
    """

    def __init__(
        self,
        url: str | os.PathLike[str] | ObjectStore | None = None,
        *,
        role: Role = "worker",
        ttl: float = DEFAULT_TTL,
        heartbeat: float = DEFAULT_HEARTBEAT,
        takeover: bool = False,
        storage_options: Mapping[str, Any] | None = None,
        signing_key: bytes | str | Sequence[bytes | str] | None = None,
        codec: Literal["auto", "msgpack"] = "auto",
        concurrency: Mapping[str, int] | None = None,
        retention: float | timedelta | None = None,
        clock: Clock | None = None,
        max_attempts_without_progress: int = MAX_ATTEMPTS_WITHOUT_PROGRESS,
        replace_codec_record: bool = False,
        partitions: int | None = None,
        executors: Mapping[str, object] | None = None,
        sync_threads: int = DEFAULT_SYNC_THREADS,
        freeze_gc: bool = True,
    ) -> None:
        if codec not in ("auto", "msgpack"):
            raise InvalidArgument(f"codec must be 'auto' or 'msgpack', got {codec!r}")
        #: The executors of step and job bodies by name (`durable.decorators.executors`).
        self.executors = check_executors(executors)
        #: The thread pool of plain ``def`` step and job bodies (`durable.decorators.threads`).
        self.threads = SyncThreads(sync_threads)
        if codec == "msgpack" and self.executors:
            raise InvalidArgument(
                f"codec='msgpack' refuses pickles, but executors {sorted(self.executors)} send "
                "each body and its arguments by pickle: use codec='auto' (with a signing_key) "
                "or run the steps inline"
            )
        if clock is not None and not isinstance(clock, Clock):
            raise InvalidArgument(f"clock must provide now_ms() and sleep(), got {clock!r}")
        self._url = _check_store(url)
        #: The partition count asked for (None: the store's, or unpartitioned).
        self._partitions = None if partitions is None else check_partitions(partitions)
        self._storage_options = storage_options
        super().__init__(_check_concurrency(concurrency), [])
        #: ``"worker"`` or ``"client"``; see the class doc.
        self.role = _check_role(role)
        self._ttl, self._heartbeat = check_timing(ttl, heartbeat)
        if not isinstance(takeover, bool):
            raise InvalidArgument(f"takeover must be True or False, got {takeover!r}")
        if takeover and role == "client":
            raise InvalidArgument("takeover=True is for a worker: a client never owns the store")
        self._takeover = takeover
        if not isinstance(freeze_gc, bool):
            raise InvalidArgument(f"freeze_gc must be True or False, got {freeze_gc!r}")
        self._freeze_gc = freeze_gc
        #: Seconds a terminated run is kept (None: for ever); see the class doc.
        self.retention = _check_retention(retention)
        #: Attempts of a run that may end in a row without progress; see the class doc.
        self.max_attempts_without_progress = _check_stall_limit(max_attempts_without_progress)
        #: How arguments, results, errors and signals are encoded.
        self.codec = Codec(signing_key=signing_key, mode=codec)
        if not isinstance(replace_codec_record, bool):
            raise InvalidArgument(
                f"replace_codec_record must be True or False, got {replace_codec_record!r}"
            )
        #: Record this engine's codec as the store's instead of checking it.
        self.replace_codec_record = replace_codec_record
        #: The source of every timestamp, timeout and durable timer.
        self.clock = clock if clock is not None else SystemClock()
        self._session: StoreSession | PartitionedSession | None = None
        self._slots: dict[str, Slots] = {}
        self._token: Token[Engine | None] | None = None
        self._errors: list[BaseException] = []
        #: The default services' instances (per partition when partitioned).
        self._defaults: list[EngineService] = [factory() for factory in default_services()]
        for service in self._defaults:  # e.g. the @job runner
            self.add_service(service)

    # -------------------------------------------------------------- parts

    @property
    def running(self) -> bool:
        """True between ``__aenter__`` and ``__aexit__``."""
        return self._session is not None

    @property
    def owner(self) -> bool:
        """True while this engine owns its store (runs its work)."""
        return self._session is not None and self._session.owner

    @property
    def partition_count(self) -> int | None:
        """The store's partition count while running on a partitioned store, else None."""
        session = self._session
        return session.partitions if isinstance(session, PartitionedSession) else None

    @property
    def store_session(self) -> StoreSession | None:
        """The store's session on an unpartitioned store while running, else None."""
        session = self._session
        return session if isinstance(session, StoreSession) else None

    def for_run(self, run_id: str) -> EngineBase:
        """The engine as the partition of ``run_id`` (a run, job, key or
        group id) sees it: this engine itself on an unpartitioned store,
        else that partition's `PartitionEngine` (its mode, queue, runtimes)."""
        session = self._session
        if isinstance(session, PartitionedSession):
            return session.facade_of(run_id)
        return self

    def slots_for(self, queue: str, limit: int) -> Slots | None:
        """Partitioned: the one `Slots` of ``queue`` that every partition's
        worker shares (per process per queue, whatever P); else None."""
        if not isinstance(self._session, PartitionedSession):
            return None
        slots = self._slots.get(queue)
        if slots is None:
            slots = self._slots[queue] = Slots(max(limit, 1))
        return slots

    def owned_queue(self, key: str) -> Queue | None:
        """The `Queue` of ``key``'s partition (a schedule name, a batch's group
        id) while this engine owns it, else None: the store a
        `durable.engine.cron.CronScheduler` fires a schedule on, or a
        `durable.engine.bulk.Bulk` runs a batch on, in the one process that
        owns it. On an unpartitioned store: the store's queue while this
        engine owns it."""
        try:
            mode = self.for_run(key).mode
        except (NoEngine, Fenced):
            return None
        return mode.queue if isinstance(mode, OwnerMode) else None

    def every_partition(self) -> list[EngineBase]:
        """The engine as each partition sees it, in partition order (this
        engine alone on an unpartitioned store): to gather what every
        partition holds."""
        session = self._session
        if isinstance(session, PartitionedSession):
            return list(session.facades)
        return [self]

    def for_key(self, key: str) -> EngineBase:
        """The engine as the home partition of signal key ``key`` sees it
        (`durable.decorators.partitioned.signal_home`): this engine itself
        on an unpartitioned store."""
        session = self._session
        if isinstance(session, PartitionedSession):
            return session.facade_of_key(key)
        return self

    def new_run_id(self) -> str:
        """A new run id (the store's generator; a ULID when partitioned)."""
        session = self._session
        if isinstance(session, PartitionedSession):
            return session.new_id()
        return self.queue.next_job_id()

    def co_located(self, base: str, with_run: str) -> str:
        """``base`` as an id in ``with_run``'s partition (``base`` itself
        unless partitioned; `durable.cluster.manifest.co_located_id`)."""
        session = self._session
        if isinstance(session, PartitionedSession):
            partitions = session.partitions
            return co_located_id(base, partition_of(with_run, partitions), partitions)
        return base

    @property
    def mode(self) -> Mode:
        """What the engine runs on now (`durable.decorators.modes`): the
        owner's queue, or a client's view and inbox."""
        session = self._session
        if isinstance(session, PartitionedSession):
            raise InvalidArgument("a partitioned engine has a mode per partition: use for_run()")
        mode = session.mode if session is not None else None
        if mode is None:
            raise NoEngine("Engine.mode")
        _raise_if_fenced(mode)
        return mode

    @property
    def queue(self) -> RunQueue:
        """The store as this engine reaches it now: the store's `Queue` when
        it owns the store, else a `durable.cluster.client.ClientQueue`
        (`NoEngine` before the engine is entered; `Fenced` while an owner
        whose store another process took has not yet become a standby)."""
        return self.mode.queue

    @property
    def workflows(self) -> WorkflowQueues:
        """The workflow runtimes, one per workflow queue (`Fenced` as for `queue`)."""
        session = self._session
        if isinstance(session, PartitionedSession):
            raise InvalidArgument("a partitioned engine has runtimes per partition: use for_run()")
        workflows = session.workflows if session is not None else None
        if workflows is None:
            raise NoEngine("Engine.workflows")
        self.mode  # noqa: B018  (raises Fenced for a fenced owner)
        return workflows

    def add_service(self, service: EngineService) -> None:
        """Run ``service`` with this engine: started on enter after the store
        opens (in registration order), stopped on exit before it closes (in
        reverse order); started again when the engine becomes or stops
        being the store's owner (`mode`). One added while the engine runs
        starts at the next `start_services`.

        On a partitioned store (``partitions=``) a service added here runs
        once per engine, not per partition: started once every partition is
        reached (owned or as a client), stopped before any closes, and not
        restarted when partitions move between processes; it reaches a
        run's store with ``engine.for_run(run_id)`` (``engine.queue`` is
        per partition). The default services (the ``@job`` runner) run per
        partition, each partition its own instance."""
        if not callable(getattr(service, "start", None)) or not callable(
            getattr(service, "stop", None)
        ):
            raise InvalidArgument(
                f"a service needs `async def start(self, engine)` and `async def stop(self)`, "
                f"got {service!r}"
            )
        self._services.append(service)

    def concurrency_limits(self) -> dict[str, int]:
        """The per-queue limits given in ``Engine(concurrency=...)``."""
        return dict(self._concurrency)

    def _runnable_services(self) -> list[EngineService]:
        """Every service added; on a partitioned store only those added
        with `add_service` (each partition runs its own default services)."""
        if isinstance(self._session, PartitionedSession):
            return [s for s in self._services if s not in self._defaults]
        return self._services

    def record_errors(self, errors: list[BaseException]) -> None:
        """Errors of stopping a mode, raised when the engine exits."""
        self._errors.extend(errors)

    # ---------------------------------------------------------------- runs

    def handle(self, run_id: str) -> WorkflowHandle[Any]:
        """A handle on run ``run_id`` (started by this process or another)."""
        from durable.decorators.handles import WorkflowHandle

        return WorkflowHandle(self, run_id)

    async def fork(
        self, run_id: str, from_step: int, *, new_run_id: str | None = None
    ) -> WorkflowHandle[Any]:
        """Start a new run of run ``run_id``'s workflow and arguments that
        reuses the journaled results of its positions before ``from_step``
        (they do not run again; the rest do). The source may be active or
        terminated; `RunNotFound` for an unknown run, `InvalidArgument`
        naming the run for a ``from_step`` out of range. The copied journal
        commits with the new run's submission. See `durable.decorators.fork`."""
        from durable.decorators.fork import fork_run

        return await fork_run(self, run_id, from_step, new_run_id)

    async def runs(
        self,
        *,
        state: WorkflowState | str | Collection[WorkflowState | str] | None = None,
        workflow: str | Collection[str] | None = None,
        started_after: int | datetime | None = None,
        started_before: int | datetime | None = None,
        attributes: Mapping[str, str] | None = None,
        version: str | Collection[str] | None = None,
        limit: int = 50,
        cursor: str | None = None,
    ) -> RunPage:
        """A page of the store's workflow runs, newest first: at most
        ``limit`` `RunSummary` values and the ``cursor`` of the next page
        (None on the last). Every filter given must hold: ``state`` and
        ``workflow`` one value or a collection; ``started_after <= started <
        started_before`` (epoch ms or aware datetimes); ``attributes`` exact
        on every pair; ``version`` one workflow version or a collection (runs
        started under that code: `durable.decorators.versions`). Read from
        the run index in memory (no object read); works on a client engine
        and across partitions. See
        `durable.decorators.listing`."""
        from durable.decorators.listing import RunFilter, list_runs

        f = RunFilter.of(
            state=state,
            workflow=workflow,
            started_after=started_after,
            started_before=started_before,
            attributes=attributes,
            version=version,
        )
        return await list_runs(self, self.every_partition(), f, limit=limit, cursor=cursor)

    async def group_progress(self, group_id: str, *, window: float = 60.0) -> Progress:
        """How far run group ``group_id`` has come (a ``@job`` ``map``, a bulk
        batch, any `durable.engine.RunGroup`): its members counted by state,
        the completion rate over the last ``window`` seconds and the time
        remaining. Found by the id alone, read from the member records in
        memory (no object read); works on a client engine and across
        partitions; `GroupNotFound` for an unknown id. See
        `durable.decorators.group_progress`."""
        from durable.decorators.group_progress import group_progress

        return await group_progress(self, group_id, window=window)

    def group_progress_updates(
        self, group_id: str, *, interval: float = 1.0, window: float = 60.0
    ) -> AsyncIterator[Progress]:
        """`group_progress` at once, then after each change and at least every
        ``interval`` seconds of the engine's clock, until every member
        terminated (the last value yielded): what a progress bar follows."""
        from durable.decorators.group_progress import group_progress_updates

        return group_progress_updates(self, group_id, interval=interval, window=window)

    async def resume(self, run_id: str) -> WorkflowHandle[Any]:
        """Continue failed or cancelled run ``run_id`` under its id from its
        last journaled step: the positions that succeeded answer from the
        journal, the one that failed runs again. `WrongRunState` for a run
        in another state, `RunNotFound` for an unknown one. See
        `durable.decorators.control`."""
        from durable.decorators.control import resume_run

        return await resume_run(self, run_id)

    async def forget(self, run_id: str) -> bool:
        """Delete terminated run ``run_id`` and everything it stored (records,
        journal, memo, archive, published values, index entry); False if
        the store does not know it, `WrongRunState` for an active run. From
        a client engine, a request through the store's inbox: this returns
        once the owner applied it. See `durable.decorators.control`."""
        from durable.decorators.control import forget_run

        return await forget_run(self, run_id)

    # ------------------------------------------------------------ schedules

    async def schedule(
        self,
        workflow: Any,
        cron: str,
        /,
        *args: Any,
        schedule_id: str | None = None,
        timezone: str = "UTC",
        **kwargs: Any,
    ) -> ScheduleInfo:
        """Start a run of ``workflow(*args, **kwargs)`` each time ``cron`` (five
        fields, read in IANA zone ``timezone``) fires; the schedule, durable
        when this returns. ``schedule_id`` (``[A-Za-z0-9_-]``, at most 64
        characters; default: from the workflow's name) names it: scheduling
        an id again replaces its definition (keeping its last fire and pause).
        `InvalidCronExpression`, `InvalidSchedule` (id, zone) or
        `ArgumentMismatch` naming it for bad input. From a client, a request
        through the inbox. See `durable.decorators.schedules`."""
        from durable.decorators.schedules import create_schedule

        definition = getattr(workflow, "definition", None)
        if definition is None:
            raise InvalidArgument(f"engine.schedule() takes a @workflow, got {workflow!r}")
        return await create_schedule(
            self, definition, cron, args, kwargs, schedule_id=schedule_id, timezone=timezone
        )

    async def schedules(self) -> list[ScheduleInfo]:
        """Every schedule in the store (`ScheduleInfo`), by id; works on a
        client engine and across partitions."""
        from durable.decorators.schedules import list_schedules

        return await list_schedules(self.every_partition())

    async def unschedule(self, schedule_id: str) -> bool:
        """Remove schedule ``schedule_id`` (runs it started stay); False if
        the store has no such schedule."""
        from durable.decorators.schedules import change

        return await change(self, schedule_id, "delete", None)

    async def pause_schedule(self, schedule_id: str) -> None:
        """Pause schedule ``schedule_id``: no fire starts a run until
        `resume_schedule`. `ScheduleNotFound` for an unknown id."""
        from durable.decorators.schedules import change

        await change(self, schedule_id, "pause", None)

    async def resume_schedule(self, schedule_id: str) -> None:
        """Resume paused schedule ``schedule_id`` from now: fires missed while
        paused do not run (`backfill_schedule` runs them). `ScheduleNotFound`
        for an unknown id."""
        from durable.decorators.schedules import change

        await change(self, schedule_id, "resume", None)

    async def trigger_schedule(self, schedule_id: str) -> WorkflowHandle[Any]:
        """Start a run of schedule ``schedule_id`` now, paused or not (its
        run id: ``<id>-now-<UTC time to the ms>``); its handle."""
        from durable.decorators.schedules import trigger_schedule

        return await trigger_schedule(self, schedule_id)

    async def backfill_schedule(
        self, schedule_id: str, start: int | datetime, end: int | datetime
    ) -> list[WorkflowHandle[Any]]:
        """Start a run for each fire of schedule ``schedule_id`` with ``start
        <= fire < end`` (epoch ms or aware datetimes; the window ends by
        now); their handles. Fires that already ran start nothing new."""
        from durable.decorators.schedules import backfill_schedule

        return await backfill_schedule(self, schedule_id, start, end)

    async def cancel_runs(self, *, dry_run: bool = False, **filters: Any) -> int:
        """Cancel every active run matching ``filters`` (those of `runs`, but
        ``limit`` and ``cursor``); how many (``dry_run``: count only)."""
        return await self._bulk("cancel", dry_run, filters)

    async def resume_runs(self, *, dry_run: bool = False, **filters: Any) -> int:
        """`resume` every failed or cancelled run matching ``filters`` (those
        of `runs`); how many (``dry_run``: count only)."""
        return await self._bulk("resume", dry_run, filters)

    async def forget_runs(self, *, dry_run: bool = False, **filters: Any) -> int:
        """`forget` every terminated run matching ``filters`` (those of
        `runs`); how many (``dry_run``: count only)."""
        return await self._bulk("forget", dry_run, filters)

    async def _bulk(self, action: str, dry_run: bool, filters: dict[str, Any]) -> int:
        from durable.decorators.control import bulk
        from durable.decorators.listing import RunFilter

        f = RunFilter.of(**filters)
        return await bulk(self, self.every_partition(), action, f, dry_run=dry_run)

    async def signal(self, key: str, value: object = None) -> SignalOutcome:
        """Send ``value`` (through the codec) to the run waiting in
        ``durable.wait_for_signal(key)``, or buffer it for the next one;
        durable when this returns. `SignalOutcome.SENT` from an engine that
        does not own the store: the request is in the store's inbox."""
        payload = self.codec.dumps(value, what=f"the signal for {key!r}")
        await journaled_here()  # from a run: what it journaled is durable first
        session = self._session
        if isinstance(session, PartitionedSession):
            # What this process committed first (a wait's registration, a
            # timeout's unregister) reaches the key's home before the signal,
            # which forwards it to a waiter in another partition.
            await session.send_pending()
        return await self.for_key(key).workflows.default.signal(key, payload)

    async def wait_owner(self, owner: bool = True, timeout: float | None = None) -> None:  # noqa: ASYNC109
        """Wait until this worker owns its store (a standby: until it takes
        over), or with ``owner=False`` until it serves as a standby (an owner
        that lost its store to another process); `TimeoutError` after
        ``timeout`` seconds (real time)."""
        if self._session is None:
            raise NoEngine("Engine.wait_owner()")
        if owner and self.role == "client":
            raise InvalidArgument("a client engine never owns its store")
        async with asyncio.timeout(timeout):
            await self._session.wait_for_owner(owner)

    # ----------------------------------------------------------- serving

    async def serve(self) -> None:
        """Run this worker until SIGTERM or SIGINT (or until cancelled).

        The engine does its work (as the owner, or as a standby ready to
        take over) while this waits; it returns on the signal, and leaving
        ``async with`` then drains (deliveries in flight finish their step
        or suspend; job workers finish their jobs), closes the store with a
        final checkpoint and hands it over to a standby, which takes over
        within one heartbeat. `InvalidArgument` for a client engine, which
        has nothing to serve. Signal handlers are installed only where the
        event loop supports them (the main thread on Unix); elsewhere this
        waits until cancelled.
        """
        if self._session is None:
            raise NoEngine("Engine.serve()")
        if self.role == "client":
            raise InvalidArgument(
                "a client engine serves nothing: run a worker with Engine(url) (role='worker')"
            )
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        installed: list[_signal.Signals] = []
        for sig in (_signal.SIGTERM, _signal.SIGINT):
            try:
                loop.add_signal_handler(sig, stop.set)
            except (NotImplementedError, RuntimeError, ValueError):
                continue
            installed.append(sig)
        try:
            await stop.wait()
            log.info("engine stopping on a signal", owner=self.owner)
        finally:
            for sig in installed:
                loop.remove_signal_handler(sig)

    # ----------------------------------------------------------- lifecycle

    async def __aenter__(self) -> Engine:
        if self._session is not None:
            raise InvalidArgument("this Engine is already running; enter it once")
        if self._freeze_gc:
            freeze_startup_heap()
        self._token = set_engine(self)
        try:
            objects, owned = await resolve_store(self._url, self._storage_options)
        except BaseException:
            await self._close()
            raise
        try:
            manifest = await open_manifest(objects, self._partitions)
        except BaseException:
            if owned:
                await objects.close()
            await self._close()
            raise
        if manifest is None:
            self._session = StoreSession(
                self,
                self._url,
                self._storage_options,
                role=self.role,
                ttl=self._ttl,
                heartbeat=self._heartbeat,
                takeover=self._takeover,
                resolved=(objects, owned),
            )
        else:
            self._session = PartitionedSession(
                self,
                objects,
                owned,
                manifest,
                role=self.role,
                ttl=self._ttl,
                heartbeat=self._heartbeat,
            )
        try:
            await self._session.open()
        except BaseException:
            await self._close()
            raise
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self._close()

    async def _close(self) -> None:
        session = self._session
        if session is not None:
            try:  # the session stays current while its deliveries drain
                await session.close()
            except Exception as e:
                self._errors.append(e)
            self._session = None
        self.threads.shutdown()
        if self._token is not None:
            reset_engine(self._token)
            self._token = None
        # A worker that stopped because the engine was fenced is no error of
        # closing: every call on the engine has raised `Fenced` since.
        errors = [e for e in self._errors if not isinstance(e, Fenced)]
        self._errors = []
        if errors:
            raise errors[0]

    def __repr__(self) -> str:
        url = self._url if isinstance(self._url, ObjectStore) else os.fspath(self._url)
        state = "stopped" if self._session is None else ("owner" if self.owner else self.role)
        return f"Engine({url!r}, {state})"
