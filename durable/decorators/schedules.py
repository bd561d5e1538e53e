"""Schedules for workflows: ``@workflow(schedule=...)`` and ``engine.schedule(...)``.

A schedule starts a run of a workflow each time a cron expression fires,
in a time zone, on the engine's clock. It is a record in the store
(`durable.engine.schedules.ScheduleRecord`, in the partition its id hashes
to), so it survives restarts and every process of the store sees it:

- ``await engine.schedule(wf, "0 9 * * mon-fri", *args, schedule_id="standup",
  timezone="Europe/Paris", **kwargs)`` creates or updates one (the
  arguments are checked against the workflow's signature and encoded once);
- ``@workflow(schedule="*/5 * * * *", schedule_timezone="UTC")`` declares
  one for a workflow callable without arguments; an engine that knows the
  workflow registers it when it opens the store as its owner (its id:
  `decorator_schedule_id` of the workflow's name). Removing ``schedule=``
  from a workflow removes its schedule once an owner that knows the
  workflow opens the store.
- ``engine.schedules()`` lists them (`ScheduleInfo`); ``unschedule``,
  ``pause_schedule``, ``resume_schedule``, ``trigger_schedule`` (a run
  now) and ``backfill_schedule(id, start, end)`` (a run per fire in a past
  window) act on one.

**Firing.** The store's owner runs a scheduler (`ScheduleService`, a
default engine service, per partition). At each fire it starts a run with
an id derived from the schedule id and the fire instant
(`durable.engine.schedules.fire_run_id`; on a partitioned store placed in
the schedule's partition), then records the fire as the schedule's last.
Starting a run id that exists starts nothing, so a fire started twice (a
crash between the two commits, a new owner, a backfill over fires that ran)
is one run. After downtime the schedule fires once, late, for the latest
instant it missed, then goes on from now: no other backfill unless asked.

**From a client** (``role="client"``): ``schedules()`` reads the client's
view; ``schedule``, ``unschedule``, ``pause_schedule`` and
``resume_schedule`` are requests through the store's inbox (each returns
once the owner applied it, and waits while no owner runs);
``trigger_schedule`` and ``backfill_schedule`` start their runs as any
client start does.
"""

from __future__ import annotations

import asyncio
import datetime as _dt
import hashlib
import re
import weakref
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from durable._logging import get_logger
from durable.cluster.client import ClientRuntime
from durable.cluster.operations import change_schedule
from durable.decorators.invocation import bind_arguments, encode_invocation
from durable.decorators.registry import REGISTRY, WorkflowDefinition
from durable.decorators.services import register_default_service
from durable.decorators.submit import submit_run
from durable.engine.cron import validate_expression
from durable.engine.schedules import (
    MAX_SCHEDULE_ID_LEN,
    SCHEDULE_PREFIX,
    SCHEDULES_CHANGED_KEY,
    ScheduleRecord,
    check_timezone,
    due_fire,
    fire_run_id,
    fires_between,
    schedule_key,
    validate_schedule_id,
)
from durable.errors import (
    DecoratorError,
    Fenced,
    InvalidSchedule,
    RequestFailed,
    ScheduleNotFound,
    StoreClosed,
)
from durable.store.queue.wakeups import wait_or_sleep

if TYPE_CHECKING:
    from durable.decorators.base import EngineBase
    from durable.decorators.handles import WorkflowHandle
    from durable.store.clock import Clock

__all__ = [
    "DECORATOR_SCHEDULES",
    "SCHEDULE_ATTRIBUTE",
    "ScheduleInfo",
    "ScheduleService",
    "backfill_schedule",
    "change",
    "create_schedule",
    "decorator_schedule_id",
    "declare_schedule",
    "list_schedules",
    "trigger_schedule",
]

log = get_logger("durable.schedules")

#: The attribute every run a schedule starts carries: the schedule's id
#: (``engine.runs(attributes={"schedule": "nightly"})``).
SCHEDULE_ATTRIBUTE = "schedule"

#: Workflow name -> (cron, time zone) of each ``@workflow(schedule=...)``.
DECORATOR_SCHEDULES: dict[str, tuple[str, str]] = {}

_services: weakref.WeakKeyDictionary[EngineBase, ScheduleService] = weakref.WeakKeyDictionary()


def decorator_schedule_id(workflow_name: str) -> str:
    """The id of a ``@workflow(schedule=...)``'s schedule (and the default of
    ``engine.schedule``): the workflow's name with every character outside
    ``[A-Za-z0-9_-]`` replaced by ``_`` (``app.jobs.report`` gives
    ``app_jobs_report``), shortened with a hash beyond 64 characters."""
    sid = re.sub(r"[^A-Za-z0-9_-]", "_", workflow_name)
    if len(sid) > MAX_SCHEDULE_ID_LEN:
        digest = hashlib.sha256(workflow_name.encode()).hexdigest()[:16]
        sid = f"{sid[: MAX_SCHEDULE_ID_LEN - 17]}-{digest}"
    return sid


def declare_schedule(definition: WorkflowDefinition, cron: object, timezone: object) -> None:
    """Record ``@workflow(schedule=cron, schedule_timezone=timezone)`` for
    ``definition`` (None: no schedule); checked now, at decoration time:
    `InvalidCronExpression`, `InvalidSchedule` (the zone) or `DecoratorError`
    (the workflow needs arguments) naming the schedule."""
    name = definition.name
    if cron is None:
        DECORATOR_SCHEDULES.pop(name, None)
        return
    sid = decorator_schedule_id(name)
    validate_expression(sid, cron)  # type: ignore[arg-type]
    check_timezone(sid, timezone)
    try:
        bind_arguments(definition.fn, "workflow", name, (), {})
    except TypeError as e:
        raise DecoratorError(
            f"@workflow(schedule=...) on {name!r}: each fire calls the workflow without "
            f"arguments, but {e}; give its parameters defaults, or schedule it with "
            "`await engine.schedule(wf, cron, *args)`"
        ) from None
    DECORATOR_SCHEDULES[name] = (str(cron), str(timezone))


@dataclass(frozen=True, slots=True)
class ScheduleInfo:
    """A schedule as ``engine.schedules()`` reports it."""

    #: The schedule's id.
    schedule_id: str
    #: The name of the workflow each fire starts.
    workflow: str
    #: The five-field cron expression.
    cron: str
    #: The IANA time zone the expression is read in.
    timezone: str
    #: The next fire (UTC; None: the expression never fires again). A
    #: paused schedule shows where it would fire.
    next_fire: _dt.datetime | None
    #: The latest fire started (UTC; None: none yet).
    last_fire: _dt.datetime | None
    #: True while paused: no fire starts a run.
    paused: bool
    #: ``"api"`` (``engine.schedule``) or ``"decorator"`` (``@workflow(schedule=...)``).
    origin: str

    @classmethod
    def of(cls, record: ScheduleRecord) -> ScheduleInfo:
        """The info of stored ``record``."""
        return cls(
            record.schedule_id,
            record.workflow,
            record.cron,
            record.timezone,
            _when(record.next_fire_ms()),
            _when(record.last_fire_ms),
            record.paused,
            record.origin,
        )


def _when(ms: int | None) -> _dt.datetime | None:
    return None if ms is None else _dt.datetime.fromtimestamp(ms / 1000, tz=_dt.UTC)


def _to_ms(value: int | _dt.datetime, what: str) -> int:
    if isinstance(value, _dt.datetime):
        if value.tzinfo is None:
            raise InvalidSchedule("-", f"{what} must be an aware datetime or epoch ms")
        return round(value.timestamp() * 1000)
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidSchedule("-", f"{what} must be an aware datetime or epoch ms, got {value!r}")
    return value


# ---------------------------------------------------------------- reading


async def _read(engine: EngineBase, schedule_id: str, what: str) -> ScheduleRecord:
    part = engine.for_run(schedule_id)
    runtime = part.workflows.default
    raw = part.queue.kv.internal().get(schedule_key(schedule_id))
    if raw is None and isinstance(runtime, ClientRuntime):
        await runtime.catch_up("")
        raw = part.queue.kv.internal().get(schedule_key(schedule_id))
    if raw is None:
        raise ScheduleNotFound(schedule_id, what)
    return ScheduleRecord.decode(raw, f"the record of schedule {schedule_id!r}")


async def list_schedules(partitions: list[EngineBase]) -> list[ScheduleInfo]:
    """Every schedule in ``partitions``, by id (a client's view polls first)."""
    found: list[ScheduleInfo] = []
    for part in partitions:
        runtime = part.workflows.default
        if isinstance(runtime, ClientRuntime):
            await runtime.catch_up("")
        for key, raw in part.queue.kv.internal().snapshot(SCHEDULE_PREFIX):
            found.append(ScheduleInfo.of(ScheduleRecord.decode(raw, f"schedule record {key!r}")))
    return sorted(found, key=lambda info: info.schedule_id)


# ---------------------------------------------------------------- changes


async def change(engine: EngineBase, schedule_id: str, op: str, record: bytes | None) -> bool:
    """Apply change ``op`` to schedule ``schedule_id``: in the owner at once,
    from a client through the inbox (returns once applied); True if the
    schedule existed before (a client: if its view showed it)."""
    validate_schedule_id(schedule_id)
    part = engine.for_run(schedule_id)
    runtime = part.workflows.default
    now = engine.clock.now_ms()
    if not isinstance(runtime, ClientRuntime):
        return await change_schedule(part.queue, schedule_id, op, record, now)
    await runtime.catch_up("")
    existed = part.queue.kv.internal().get(schedule_key(schedule_id)) is not None
    if op == "delete" and not existed:
        return False
    posted = await runtime.post_schedule(schedule_id, op, now, record)
    done = await runtime.wait_done(posted, None)
    if done is not None and done.error is not None:
        if done.error_type == "ScheduleNotFound":
            raise ScheduleNotFound(schedule_id, f"{op}_schedule")
        raise RequestFailed(f"{op} of schedule {schedule_id!r}", done.error_type, done.error)
    return existed


async def create_schedule(
    engine: EngineBase,
    definition: WorkflowDefinition,
    cron: str,
    args: tuple[Any, ...],
    kwargs: Mapping[str, Any],
    *,
    schedule_id: str | None,
    timezone: str,
    origin: str = "api",
) -> ScheduleInfo:
    """Create or update a schedule of ``definition``; see the module docstring."""
    sid = validate_schedule_id(
        schedule_id if schedule_id is not None else decorator_schedule_id(definition.name)
    )
    validate_expression(sid, cron)
    check_timezone(sid, timezone)
    bind_arguments(definition.fn, "workflow", definition.name, args, kwargs)
    payload = encode_invocation(engine.codec, definition.name, args, kwargs)
    record = ScheduleRecord(
        sid,
        definition.name,
        definition.queue,
        cron,
        timezone,
        payload,
        engine.clock.now_ms(),
        origin=origin,
    )
    await change(engine, sid, "put", record.encode())
    _wake_owner(engine, sid)
    return ScheduleInfo.of(await _read(engine, sid, "engine.schedule()"))


def _wake_owner(engine: EngineBase, schedule_id: str) -> None:
    service = _services.get(engine.for_run(schedule_id))
    if service is not None:
        service.wake()


# ------------------------------------------------------------------ fires


async def _start_fire(
    part: EngineBase, record: ScheduleRecord, fire_ms: int, *, manual: bool = False
) -> str:
    """Start the run of ``record``'s fire at ``fire_ms``; its run id."""
    sid = record.schedule_id
    run_id = part.co_located(fire_run_id(sid, fire_ms, manual=manual), sid)
    definition = REGISTRY.get(record.workflow)
    if definition is None or definition.queue != record.queue:
        definition = WorkflowDefinition(record.workflow, _unknown, record.queue)
    return await submit_run(
        part, definition, record.payload, run_id=run_id, attributes={SCHEDULE_ATTRIBUTE: sid}
    )


async def _unknown() -> None:  # pragma: no cover - a stand-in: never called
    """The function of a workflow this process does not know (its runs find theirs)."""


async def trigger_schedule(engine: EngineBase, schedule_id: str) -> WorkflowHandle[Any]:
    """Start a run of schedule ``schedule_id`` now (paused or not); its handle."""
    record = await _read(engine, validate_schedule_id(schedule_id), "trigger_schedule")
    run_id = await _start_fire(engine, record, engine.clock.now_ms(), manual=True)
    return engine.handle(run_id)


async def backfill_schedule(
    engine: EngineBase, schedule_id: str, start: int | _dt.datetime, end: int | _dt.datetime
) -> list[WorkflowHandle[Any]]:
    """Start a run for each fire of ``schedule_id`` with ``start <= fire <
    end`` (a past window); their handles, in fire order."""
    start_ms, end_ms = _to_ms(start, "start"), _to_ms(end, "end")
    if end_ms <= start_ms:
        raise InvalidSchedule(schedule_id, "a backfill window needs start < end")
    if end_ms > engine.clock.now_ms() + 1:
        raise InvalidSchedule(
            schedule_id, "a backfill window must end by now: later fires run on their own"
        )
    record = await _read(engine, validate_schedule_id(schedule_id), "backfill_schedule")
    try:
        fires = fires_between(record.cron, record.zone, start_ms, end_ms)
    except InvalidSchedule as e:
        raise InvalidSchedule(schedule_id, e.reason) from None
    return [engine.handle(await _start_fire(engine, record, fire)) for fire in fires]


# ---------------------------------------------------------------- service


class ScheduleService:
    """The scheduler of one engine (of one partition, when partitioned): in
    the store's owner it registers the ``@workflow(schedule=...)`` schedules
    it knows and fires every schedule of its store; see the module docstring."""

    def __init__(self) -> None:
        self._engine: EngineBase | None = None
        self._task: asyncio.Task[None] | None = None
        self._wake: asyncio.Event | None = None

    def __repr__(self) -> str:
        return f"<ScheduleService running={self._task is not None}>"

    async def start(self, engine: EngineBase) -> None:
        """In the owner: register decorator schedules, then fire schedules."""
        mode = engine.mode
        if not mode.owner:
            return
        self._engine = engine
        _services[engine] = self
        await self._register(engine)
        self._wake = asyncio.Event()
        self._task = asyncio.create_task(self._run(engine), name="durable-schedules")

    async def stop(self) -> None:
        """Stop firing (a fire in progress is cancelled: its run id makes a
        repeat by the next owner start nothing new)."""
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        if self._engine is not None:
            _services.pop(self._engine, None)
            self._engine = None

    def wake(self) -> None:
        """Replan now (a schedule changed)."""
        if self._wake is not None:
            self._wake.set()

    async def _register(self, engine: EngineBase) -> None:
        """Put each known ``@workflow(schedule=...)`` of this partition in the
        store; drop the decorator schedules of known workflows without one."""
        kv = engine.queue.kv.internal()
        now = engine.clock.now_ms()
        for definition in REGISTRY:
            sid = decorator_schedule_id(definition.name)
            if engine.for_run(sid) is not engine:
                continue  # another partition's
            raw = kv.get(schedule_key(sid))
            stored = None if raw is None else ScheduleRecord.decode(raw)
            declared = DECORATOR_SCHEDULES.get(definition.name)
            if declared is None:
                if stored is not None and stored.origin == "decorator":
                    await change_schedule(engine.queue, sid, "delete", None, now)
                continue
            cron, tz = declared
            payload = encode_invocation(engine.codec, definition.name, (), {})
            record = ScheduleRecord(
                sid, definition.name, definition.queue, cron, tz, payload, now, origin="decorator"
            )
            if stored is not None and replace(
                stored, anchor_ms=now, paused=False, last_fire_ms=None
            ) == replace(record, paused=False):
                continue
            await change_schedule(engine.queue, sid, "put", record.encode(), now)

    async def _run(self, engine: EngineBase) -> None:
        clock = engine.clock
        assert self._wake is not None
        while True:
            kv = engine.queue.kv.internal()
            changed = kv.watch(SCHEDULES_CHANGED_KEY)
            waits: set[asyncio.Future[Any]] = {changed, asyncio.ensure_future(self._wake.wait())}
            try:
                soonest = await self._tick(engine)
                if soonest is not None:
                    waits.add(asyncio.ensure_future(_sleep_until(clock, soonest)))
                await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
                if changed.done() and not changed.cancelled() and changed.exception() is not None:
                    return  # the store closed under us
            except (Fenced, StoreClosed):
                return  # the engine leaves this mode: the next one restarts us
            except asyncio.CancelledError:
                raise
            except Exception as e:  # logged; replan at the next change or in a second
                log.error("schedules: a pass failed", error=str(e) or repr(e))
                await wait_or_sleep(clock, changed, 1.0)
            finally:
                kv.unwatch(SCHEDULES_CHANGED_KEY, changed)
                for fut in waits:
                    if fut is not changed:
                        fut.cancel()
                self._wake.clear()

    async def _tick(self, engine: EngineBase) -> int | None:
        """Start every due fire; the soonest fire still to come (None: none)."""
        kv = engine.queue.kv.internal()
        soonest: int | None = None
        for key, raw in kv.snapshot(SCHEDULE_PREFIX):
            record = ScheduleRecord.decode(raw, f"schedule record {key!r}")
            fire = due_fire(record, engine.clock.now_ms())
            if fire is not None:
                run_id = await _start_fire(engine, record, fire)
                record = await self._record_fire(engine, record.schedule_id, fire) or record
                log.info("schedule fired", schedule=record.schedule_id, run_id=run_id)
            if record.paused:
                continue
            upcoming = record.next_fire_ms()
            if upcoming is not None and (soonest is None or upcoming < soonest):
                soonest = upcoming
        return soonest

    async def _record_fire(
        self, engine: EngineBase, schedule_id: str, fire_ms: int
    ) -> ScheduleRecord | None:
        """Set the schedule's last fire to ``fire_ms`` (unless later already);
        the record now (None: removed meanwhile)."""
        key = schedule_key(schedule_id)
        kv = engine.queue.kv.internal()
        while True:
            raw = kv.get(key)
            if raw is None:
                return None
            record = ScheduleRecord.decode(raw)
            if record.last_fire_ms is not None and record.last_fire_ms >= fire_ms:
                return record
            new = replace(record, last_fire_ms=fire_ms)
            effects = _put(key, new.encode())
            if await engine.queue.kv_compare_commit(key, raw, effects) is not None:
                return new


async def _sleep_until(clock: Clock, deadline_ms: int) -> None:
    """Sleep on ``clock`` until ``deadline_ms``, the time left read when this
    starts (no time moved between the read and the sleep is lost)."""
    await clock.sleep(max(0, deadline_ms - clock.now_ms()) / 1000)


def _put(key: bytes, value: bytes) -> Any:
    from durable.engine.transitions import internal_effects

    return internal_effects({key: value})


register_default_service(ScheduleService)
