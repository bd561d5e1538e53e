"""Cron schedules: enqueue a job each time a cron expression fires (semantics 3.3).

A `CronScheduler` holds named schedules (in memory: register them in code
at every start) and, while running, enqueues each schedule's payload on its
target queue at every fire instant:

- Expressions are five-field POSIX cron (minute hour day-of-month month
  day-of-week, with ``*``, lists, ranges, steps and month/day names), parsed
  by croniter, evaluated in UTC on the scheduler's clock: the wall clock by
  default, not the queue's.
- Each fire is enqueued with the dedup key ``cron:{name}:{fire_ms}``, so two
  schedulers (or a restarted one) firing the same instant enqueue one job
  while it is still queued: at most once per fire instant and schedule.
- No backfill: a scheduler plans the first fire strictly after it starts.
  After an oversleep (a suspended process, a blocked loop) it enqueues the
  one fire it had planned, late, and drops the occurrences it slept through.

On a partitioned store a schedule lives in the partition of its name: give
the scheduler a function instead of a queue, ``schedule name -> the Queue
of its partition while this process owns it, else None`` (an `Engine`'s
``owned_queue``). A fire whose partition this process does not own is not
enqueued here: its owner's scheduler enqueues it, so a pool of processes
running the same schedules fires each once per instant.

```python
scheduler = CronScheduler(queue)
scheduler.schedule("nightly-report", "0 2 * * *", "reports", b"{}")
async with scheduler:  # start() ... stop()
    ...
```
"""

from __future__ import annotations

import asyncio
import datetime as _dt
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from durable._logging import get_logger
from durable.engine._checks import U32_MAX, check_bytes, check_headers, check_int, check_str
from durable.errors import DuplicateScheduleName, InvalidArgument, InvalidCronExpression
from durable.store.clock import Clock, SystemClock
from durable.store.queue import EnqueueOptions, Queue
from durable.store.queue.options import validate_queue_name
from durable.store.queue.wakeups import wait_or_sleep

__all__ = ["CronSchedule", "CronScheduler", "next_fire_ms", "validate_expression"]

log = get_logger("durable.cron")

_NUMBER = r"\d+"
_NAMES = {
    3: "jan|feb|mar|apr|may|jun|jul|aug|sep|oct|nov|dec",
    4: "sun|mon|tue|wed|thu|fri|sat",
}
_FIELDS = ("minute", "hour", "day of month", "month", "day of week")


def _item_pattern(index: int) -> re.Pattern[str]:
    value = _NUMBER if index not in _NAMES else f"(?:{_NUMBER}|{_NAMES[index]})"
    return re.compile(rf"(?:\*|{value}(?:-{value})?)(?:/{_NUMBER})?", re.IGNORECASE)


_ITEMS = [_item_pattern(i) for i in range(5)]


def validate_expression(name: str, expression: str) -> str:
    """``expression`` if it is a well-formed five-field POSIX cron expression
    (which may still never fire: see `next_fire_ms`); `InvalidCronExpression`
    naming schedule ``name`` if not.

    croniter also reads six- and seven-field forms, ``@hourly`` aliases and
    extensions (``L``, ``W``, ``#``, ``?``, ``H``); they are refused here.
    """
    if not isinstance(expression, str):
        raise InvalidCronExpression(name, repr(expression), "it must be a str")
    fields = expression.split()
    if len(fields) != 5:
        raise InvalidCronExpression(name, expression, f"it has {len(fields)} fields, not 5")
    for i, text in enumerate(fields):
        for item in text.split(","):
            if not _ITEMS[i].fullmatch(item):
                raise InvalidCronExpression(
                    name, expression, f"the {_FIELDS[i]} field {text!r} is not POSIX cron syntax"
                )
    from croniter import CroniterError, croniter  # on first use: most processes never parse one

    try:
        croniter(expression)
    except CroniterError as e:
        raise InvalidCronExpression(name, expression, str(e)) from None
    return expression


def next_fire_ms(expression: str, after_ms: int) -> int | None:
    """The first fire instant of ``expression`` strictly after ``after_ms``
    (epoch milliseconds, UTC); None if it never fires (``0 0 30 2 *``)."""
    from croniter import CroniterBadDateError, croniter

    start = _dt.datetime.fromtimestamp(after_ms / 1000, tz=_dt.UTC)
    try:
        fire = croniter(expression, start).get_next(_dt.datetime)
    except CroniterBadDateError:
        return None
    fire_ms = round(fire.timestamp() * 1000)
    # croniter works to the second; the result is strictly later than `start`.
    return fire_ms if fire_ms > after_ms else None


@dataclass(frozen=True, slots=True)
class CronSchedule:
    """One named schedule: what to enqueue where, and when (``expression``).

    ``headers``, ``priority`` and ``max_attempts`` are the enqueued jobs'
    (None: the target queue's defaults).
    """

    name: str
    expression: str
    target_queue: str
    payload: bytes
    headers: Mapping[str, str] = field(default_factory=dict)
    priority: int | None = None
    max_attempts: int | None = None

    def __post_init__(self) -> None:
        check_str("CronSchedule.name", self.name, non_empty=True)
        validate_expression(self.name, self.expression)
        validate_queue_name(self.target_queue)
        object.__setattr__(self, "payload", check_bytes("CronSchedule.payload", self.payload))
        object.__setattr__(self, "headers", check_headers("CronSchedule.headers", self.headers))
        if self.priority is not None:
            check_int("CronSchedule.priority", self.priority, 0, U32_MAX)
        if self.max_attempts is not None:
            check_int("CronSchedule.max_attempts", self.max_attempts, 0, U32_MAX)

    def dedup_key(self, fire_ms: int) -> str:
        """The dedup key of the fire at ``fire_ms``: ``cron:{name}:{fire_ms}``."""
        return f"cron:{self.name}:{fire_ms}"

    def enqueue_options(self, fire_ms: int) -> EnqueueOptions:
        """The options of the job enqueued by the fire at ``fire_ms``."""
        return EnqueueOptions(
            max_attempts=self.max_attempts,
            priority=self.priority,
            dedup_key=self.dedup_key(fire_ms),
            headers=self.headers,
        )


@dataclass(slots=True)
class _Entry:
    schedule: CronSchedule
    planned_ms: int | None = None


class CronScheduler:
    """Enqueues the jobs of named cron schedules on a `Queue`; see the module docstring.

    Register schedules with `schedule`, then run it: `start` / `stop`, an
    ``async with`` block, or ``await run(shutdown_event)``.
    """

    def __init__(
        self, queue: Queue | Callable[[str], Queue | None], clock: Clock | None = None
    ) -> None:
        """``queue``: the queue every fire is enqueued on, or (partitioned)
        a function of the schedule's name giving its partition's queue while
        this process owns it, None otherwise (see the module docstring)."""
        #: The queue of every fire (None when given a function).
        self.queue: Queue | None = queue if isinstance(queue, Queue) else None
        self._route: Callable[[str], Queue | None] = (
            (lambda _name: queue) if isinstance(queue, Queue) else queue
        )
        self.clock: Clock = clock if clock is not None else SystemClock()
        self._entries: dict[str, _Entry] = {}
        self._running = False
        self._stop: asyncio.Event | None = None
        self._task: asyncio.Task[None] | None = None

    # ------------------------------------------------------------ schedules

    def schedule(
        self,
        name: str,
        expression: str,
        target_queue: str,
        payload: bytes,
        *,
        headers: Mapping[str, str] | None = None,
        priority: int | None = None,
        max_attempts: int | None = None,
    ) -> CronSchedule:
        """Register schedule ``name``: enqueue ``payload`` on ``target_queue``
        whenever ``expression`` fires.

        `DuplicateScheduleName` if ``name`` is taken, `InvalidCronExpression`
        if ``expression`` is not five-field cron. Keep names stable across
        restarts: they make the dedup keys. Register before running.
        """
        if self._running:
            raise InvalidArgument(
                f"cron schedule {name!r}: register schedules before the scheduler runs"
            )
        if name in self._entries:
            raise DuplicateScheduleName(name)
        sched = CronSchedule(
            name, expression, target_queue, payload, dict(headers or {}), priority, max_attempts
        )
        self._entries[name] = _Entry(sched)
        return sched

    @property
    def schedules(self) -> list[CronSchedule]:
        """Every registered schedule, in registration order."""
        return [e.schedule for e in self._entries.values()]

    def planned(self, name: str) -> int | None:
        """The next fire instant planned for schedule ``name`` (epoch ms), or None."""
        entry = self._entries.get(name)
        return None if entry is None else entry.planned_ms

    # ------------------------------------------------------------------ run

    async def run(self, shutdown: asyncio.Event) -> None:
        """Fire schedules until ``shutdown`` is set; see the module docstring."""
        if self._running:
            raise InvalidArgument("this CronScheduler is already running")
        self._running = True
        stop = asyncio.ensure_future(shutdown.wait())
        try:
            if not self._entries:
                log.info("no cron schedules registered; waiting for shutdown")
                await stop
                return
            while not shutdown.is_set():
                soonest = await self._tick(self.clock.now_ms())
                if soonest is None:
                    log.warning(
                        "every cron expression is unsatisfiable; nothing will fire",
                        schedules=list(self._entries),
                    )
                    await stop
                    return
                delay = (soonest - self.clock.now_ms()) / 1000
                await wait_or_sleep(self.clock, stop, delay)
        finally:
            stop.cancel()
            await asyncio.gather(stop, return_exceptions=True)
            for entry in self._entries.values():
                entry.planned_ms = None  # a later run starts cold: no backfill
            self._running = False

    async def _tick(self, now_ms: int) -> int | None:
        """Fire every entry planned at or before ``now_ms``, plan the rest;
        the soonest planned fire (None: no expression can fire)."""
        soonest: int | None = None
        for entry in self._entries.values():
            if entry.planned_ms is not None and entry.planned_ms <= now_ms:
                await self._fire(entry.schedule, entry.planned_ms)
                entry.planned_ms = None
            if entry.planned_ms is None:
                # Strictly after now: what was slept through is dropped.
                entry.planned_ms = next_fire_ms(entry.schedule.expression, now_ms)
            if entry.planned_ms is not None and (soonest is None or entry.planned_ms < soonest):
                soonest = entry.planned_ms
        return soonest

    async def _fire(self, sched: CronSchedule, fire_ms: int) -> None:
        queue = self._route(sched.name)
        if queue is None:  # another process owns the schedule's partition: it fires
            log.debug("cron fire left to its partition's owner", schedule=sched.name)
            return
        try:
            result = await queue.enqueue_with(
                sched.target_queue, sched.payload, sched.enqueue_options(fire_ms)
            )
        except Exception as e:  # logged: the schedule goes on to its next fire
            log.error(
                "cron enqueue failed", schedule=sched.name, fire_ms=fire_ms, error=str(e) or repr(e)
            )
            return
        log.debug(
            "cron fired", schedule=sched.name, fire_ms=fire_ms, job=result.id, new=result.is_new
        )

    # ------------------------------------------------------------ lifecycle

    def start(self) -> None:
        """Run in a task on this event loop until `stop`."""
        if self._running or (self._task is not None and not self._task.done()):
            raise InvalidArgument("this CronScheduler is already running")
        self._stop = asyncio.Event()
        self._task = asyncio.create_task(self.run(self._stop), name="durable-cron")

    async def stop(self) -> None:
        """Stop the task `start` began (an enqueue in progress completes first). Idempotent."""
        task, stop = self._task, self._stop
        if task is None or stop is None:
            return
        stop.set()
        try:
            await task
        finally:
            self._task = self._stop = None

    @property
    def running(self) -> bool:
        """True while `run` is running (in `start`'s task or the caller's)."""
        return self._running

    async def __aenter__(self) -> CronScheduler:
        self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()
