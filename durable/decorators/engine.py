"""`Engine`: the decorators' runtime, opened with ``async with Engine(url):``.

The engine composes what the decorators need and nothing else: the
store's `Queue`, the `Codec` of arguments and results, the clock, one
workflow runtime per workflow queue (`WorkflowQueues`) and the *services*
that start and stop with it (the ``@job`` runner is one). Starting runs,
handles and waits live in their own modules; they reach the engine through
`durable.decorators.current.current_engine`.

```python
async with Engine("file:///var/lib/app/durable") as engine:
    handle = await pipeline.start("https://example.com")
    print(await handle.result())
```

On exit the engine lets every running workflow finish its step in flight
and suspend (its next step runs in the next process), then stops its
services (in reverse order) and closes the store.

Once another process opens the same store (a second engine, a standby),
this engine is *fenced*: every wait in progress (``handle.result()``, ...)
and every later call, reads included, raises `Fenced` (an idle engine
notices within `OpenOptions.fence_check_interval`, 5 s). Exit it and open a
new one, or leave the store to the other process.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from contextvars import Token
from datetime import timedelta
from typing import TYPE_CHECKING, Any, Literal

from durable._logging import get_logger
from durable.decorators.codec import Codec
from durable.decorators.codec_record import ensure_codec_record
from durable.decorators.current import reset_engine, set_engine
from durable.decorators.progress import MAX_ATTEMPTS_WITHOUT_PROGRESS
from durable.decorators.runtimes import WorkflowQueues
from durable.decorators.services import EngineService, default_services
from durable.engine.signals import SignalOutcome
from durable.errors import Fenced, InvalidArgument, InvalidStoreUrl, NoEngine
from durable.store.clock import Clock, SystemClock
from durable.store.objects.base import ObjectStore
from durable.store.objects.url import check_writer_url
from durable.store.queue import OpenOptions, Queue

if TYPE_CHECKING:
    from durable.decorators.handles import WorkflowHandle

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


def _raise_if_fenced(queue: Queue) -> None:
    """Every use of a fenced engine fails: its memory may be stale, and it
    can commit nothing (the one place every call goes through)."""
    failure = queue.writer.failure
    if isinstance(failure, Fenced):
        raise Fenced(failure.url, failure.seq) from None


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


class Engine:
    """Runs the workflows (and, through services, the jobs) of this process.

    ``url`` is the store: a path, a ``file://``, ``s3://``, ``gs://`` or
    ``az://`` URL, ``memory://name``, or an `ObjectStore` (which the caller
    closes); None is the directory ``./.durable``, and any other value or
    scheme is refused here with `InvalidArgument`. A missing directory is
    created; a missing bucket or container raises `StoreNotFound` on enter.
    ``storage_options`` go to the backend. ``signing_key`` signs every
    pickle the codec writes and refuses unsigned ones (a list rotates keys:
    the first signs, each verifies); ``codec="msgpack"`` refuses values that
    are not plain data. The store records the codec and the fingerprints of
    the keys its payloads need: an engine that cannot read them refuses to
    open with `CodecMismatch` (``replace_codec_record=True`` records this
    engine's configuration instead, for a deliberate change; see
    `durable.decorators.codec_record`). ``concurrency`` caps the runs of each workflow queue that
    execute at once (default 8 per queue; 0 runs none of them in this
    process, for one that only starts runs). ``retention`` (seconds or a
    timedelta; None keeps them for ever) is how long a terminated run stays
    in the store: its result, archived journal and published values are
    then removed and its id reads as unknown (`RunNotFound`). ``clock`` is
    the source of all time (a `durable.store.clock.MockClock` in tests).
    ``max_attempts_without_progress`` (default 20) is how many attempts of
    a run may end in a row without journaling anything (a crash of its
    process counts) before the run fails with `RunStalled`; a run that
    journals something in each attempt is never failed by its crashes, and
    a stalled run waits longer before each attempt (1 s, doubling, at most
    5 minutes; `durable.decorators.progress`).

    Every default service (`durable.decorators.services`) is added when the
    engine is built; `add_service` adds more.
    """

    def __init__(
        self,
        url: str | os.PathLike[str] | ObjectStore | None = None,
        *,
        storage_options: Mapping[str, Any] | None = None,
        signing_key: bytes | str | Sequence[bytes | str] | None = None,
        codec: Literal["auto", "msgpack"] = "auto",
        concurrency: Mapping[str, int] | None = None,
        retention: float | timedelta | None = None,
        clock: Clock | None = None,
        max_attempts_without_progress: int = MAX_ATTEMPTS_WITHOUT_PROGRESS,
        replace_codec_record: bool = False,
    ) -> None:
        if codec not in ("auto", "msgpack"):
            raise InvalidArgument(f"codec must be 'auto' or 'msgpack', got {codec!r}")
        if clock is not None and not isinstance(clock, Clock):
            raise InvalidArgument(f"clock must provide now_ms() and sleep(), got {clock!r}")
        self._url = _check_store(url)
        self._storage_options = storage_options
        self._concurrency = _check_concurrency(concurrency)
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
        self._replace_codec_record = replace_codec_record
        #: The source of every timestamp, timeout and durable timer.
        self.clock: Clock = clock if clock is not None else SystemClock()
        self._services: list[EngineService] = []
        self._started: list[EngineService] = []
        self._queue: Queue | None = None
        self._workflows: WorkflowQueues | None = None
        self._token: Token[Engine | None] | None = None
        for factory in default_services():  # e.g. the @job runner
            self.add_service(factory())

    # -------------------------------------------------------------- parts

    @property
    def running(self) -> bool:
        """True between ``__aenter__`` and ``__aexit__``."""
        return self._queue is not None

    @property
    def queue(self) -> Queue:
        """The store's `Queue` (`NoEngine` before the engine is entered;
        `Fenced` once another writer has opened the store)."""
        if self._queue is None:
            raise NoEngine("Engine.queue")
        _raise_if_fenced(self._queue)
        return self._queue

    @property
    def workflows(self) -> WorkflowQueues:
        """The workflow runtimes, one per workflow queue (`Fenced` as for `queue`)."""
        if self._workflows is None:
            raise NoEngine("Engine.workflows")
        if self._queue is not None:
            _raise_if_fenced(self._queue)
        return self._workflows

    def concurrency_of(self, queue: str, default: int) -> int:
        """The concurrency given for ``queue`` in ``Engine(concurrency=...)``,
        else ``default`` (0: this process runs none of that queue's work)."""
        return self._concurrency.get(queue, default)

    def service_queues(self) -> frozenset[str]:
        """The queues the engine's services run (a service may name them with
        a ``queues()`` method): no workflow worker is started on those."""
        owned: set[str] = set()
        for service in self._services:
            queues = getattr(service, "queues", None)
            if callable(queues):
                owned.update(queues())
        return frozenset(owned)

    def add_service(self, service: EngineService) -> None:
        """Run ``service`` with this engine: started on enter after the store
        opens (in registration order), stopped on exit before it closes (in
        reverse order). One added while the engine runs starts at the next
        `start_services`."""
        if not callable(getattr(service, "start", None)) or not callable(
            getattr(service, "stop", None)
        ):
            raise InvalidArgument(
                f"a service needs `async def start(self, engine)` and `async def stop(self)`, "
                f"got {service!r}"
            )
        self._services.append(service)

    async def start_services(self) -> None:
        """Start the services added since the engine started (idempotent)."""
        for service in self._services:
            if service not in self._started:
                await service.start(self)
                self._started.append(service)

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

    async def signal(self, key: str, value: object = None) -> SignalOutcome:
        """Send ``value`` (through the codec) to the run waiting in
        ``durable.wait_for_signal(key)``, or buffer it for the next one;
        durable when this returns."""
        payload = self.codec.dumps(value, what=f"the signal for {key!r}")
        return await self.workflows.default.signal(key, payload)

    # ----------------------------------------------------------- lifecycle

    async def __aenter__(self) -> Engine:
        if self._queue is not None:
            raise InvalidArgument("this Engine is already running; enter it once")
        queue = await Queue.open(
            self._url, OpenOptions(clock=self.clock), storage_options=self._storage_options
        )
        self._queue = queue
        self._token = set_engine(self)
        try:
            # Before any run is read or written (durable on return).
            await ensure_codec_record(
                queue.kv.internal(), self.codec, queue.kv.url, replace=self._replace_codec_record
            )
            self._workflows = WorkflowQueues(
                self,
                {q: n for q, n in self._concurrency.items() if q not in self.service_queues()},
            )
            self._workflows.start()
            await self.start_services()
        except BaseException:
            await self._close()
            raise
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self._close()

    async def _close(self) -> None:
        errors: list[BaseException] = []
        # Workflows first: a step in flight may wait on a service (a job).
        if self._workflows is not None:
            workflows, self._workflows = self._workflows, None
            try:
                await workflows.shutdown()
            except Exception as e:  # the services and the store still close
                errors.append(e)
        for service in reversed(self._started):
            try:
                await service.stop()
            except Exception as e:  # the others still stop
                log.error("service failed to stop", service=repr(service), error=str(e))
                errors.append(e)
        self._started.clear()
        if self._queue is not None:
            await self._queue.close()
            self._queue = None
        if self._token is not None:
            reset_engine(self._token)
            self._token = None
        # A worker that stopped because the engine was fenced is no error of
        # closing: every call on the engine has raised `Fenced` since.
        errors = [e for e in errors if not isinstance(e, Fenced)]
        if errors:
            raise errors[0]

    def __repr__(self) -> str:
        url = self._url if isinstance(self._url, ObjectStore) else os.fspath(self._url)
        return f"Engine({url!r}, {'running' if self.running else 'stopped'})"
