"""Durable schedules: the stored record of a cron schedule that starts runs.

A schedule is one KV record under the reserved prefix (`SCHEDULE_PREFIX`)
in the store (on a partitioned store: in the partition its id hashes to).
It names what to start (a workflow name, its queue and the encoded
invocation) and when: a five-field cron expression
(`durable.engine.cron.validate_expression`) read in an IANA time zone. The
store's owner fires it (`durable.decorators.schedules`); this module holds
the record, its encoding and the time arithmetic, without I/O.

**When it fires.** A schedule fires at each instant of its expression
strictly after its *anchor* (its creation, or its last resume or change of
expression or zone) and after its last fire. `due_fire` is the one fire
to start now: the latest instant at or before now, so after downtime a
schedule fires once, late, for the instants it missed, and then goes on
from now (no backfill: `fires_between` lists a window for an explicit one).

**Time zones.** Expressions are read in the schedule's zone (`zoneinfo`,
default UTC). On a daylight-saving change a wall-clock time that does not
exist (02:30 when clocks jump from 02:00 to 03:00) fires at the first
instant after the gap (03:00), once; a wall-clock time that happens twice
(01:30 when clocks fall back from 02:00 to 01:00) fires at its first
occurrence only. So ``30 2 * * *`` fires once every day, and ``*/30 * *
* *`` skips the repeated hour's second pass: use UTC for an even interval.

**Run ids.** The run of a fire has an id derived from the schedule id and
the fire instant (`fire_run_id`), so starting the same fire twice (two
processes, a restart, a backfill over fires that already ran) starts one run.
"""

from __future__ import annotations

import datetime as _dt
import re
from dataclasses import dataclass, replace
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import msgpack

from durable.engine.runs import RESERVED_KV_PREFIX
from durable.errors import CorruptEngineRecord, InvalidSchedule

__all__ = [
    "MAX_BACKFILL",
    "MAX_SCHEDULE_ID_LEN",
    "SCHEDULES_CHANGED_KEY",
    "SCHEDULE_FORMAT_VERSION",
    "SCHEDULE_PREFIX",
    "ScheduleRecord",
    "apply_change",
    "check_timezone",
    "due_fire",
    "fire_run_id",
    "fires_between",
    "next_fire",
    "schedule_key",
    "validate_schedule_id",
]

#: Where schedule records live in the KV namespace (``+ schedule id``).
SCHEDULE_PREFIX = RESERVED_KV_PREFIX + b"schedule/"
#: Written with every change of a schedule (not with its fires): the
#: owner's scheduler watches it to replan.
SCHEDULES_CHANGED_KEY = RESERVED_KV_PREFIX + b"schedules-changed"
#: The newest record format this code writes and reads.
SCHEDULE_FORMAT_VERSION = 1
#: The longest schedule id: room left in a run id for the fire's instant.
MAX_SCHEDULE_ID_LEN = 64
#: The most fires one backfill starts.
MAX_BACKFILL = 10_000

_ID = re.compile(r"[A-Za-z0-9_-]+")
_OPS = frozenset({"put", "pause", "resume", "delete"})


def validate_schedule_id(schedule_id: object) -> str:
    """``schedule_id`` if it is 1 to `MAX_SCHEDULE_ID_LEN` characters of
    ``[A-Za-z0-9_-]``; `InvalidSchedule` naming it if not."""
    if not isinstance(schedule_id, str) or not _ID.fullmatch(schedule_id):
        raise InvalidSchedule(str(schedule_id), "an id is 1 or more characters of [A-Za-z0-9_-]")
    if len(schedule_id) > MAX_SCHEDULE_ID_LEN:
        raise InvalidSchedule(schedule_id, f"an id is at most {MAX_SCHEDULE_ID_LEN} characters")
    return schedule_id


def check_timezone(schedule_id: str, timezone: object) -> ZoneInfo:
    """The zone named ``timezone`` (an IANA name: ``"Europe/Paris"``,
    ``"UTC"``); `InvalidSchedule` naming the schedule if it is unknown."""
    if not isinstance(timezone, str) or not timezone:
        raise InvalidSchedule(schedule_id, f"timezone must be an IANA zone name, got {timezone!r}")
    try:
        return ZoneInfo(timezone)
    except (ZoneInfoNotFoundError, ValueError):
        raise InvalidSchedule(
            schedule_id, f"unknown time zone {timezone!r} (an IANA name, e.g. 'Europe/Paris')"
        ) from None


def schedule_key(schedule_id: str) -> bytes:
    """The KV key of schedule ``schedule_id``'s record."""
    return SCHEDULE_PREFIX + schedule_id.encode()


# ------------------------------------------------------------------ time


def _local(ms: int, zone: ZoneInfo) -> _dt.datetime:
    return _dt.datetime.fromtimestamp(ms / 1000, tz=_dt.UTC).astimezone(zone)


def _ms(d: _dt.datetime) -> int:
    return round(d.timestamp() * 1000)


def _repeated(d: _dt.datetime) -> bool:
    """True for the second occurrence of a wall-clock time (a fall-back)."""
    local = d.replace(tzinfo=None)
    zone = d.tzinfo
    first = local.replace(tzinfo=zone, fold=0)
    return _ms(first) != _ms(d) and _ms(first) < _ms(d)


def next_fire(cron: str, zone: ZoneInfo, after_ms: int) -> int | None:
    """The first fire of ``cron`` in ``zone`` strictly after ``after_ms``
    (epoch ms); None if it never fires. See the module docstring for DST."""
    from croniter import CroniterBadDateError, croniter  # imported when first used

    at = _local(after_ms, zone)
    try:
        it = croniter(cron, at)
        for _ in range(4):
            fire: _dt.datetime = it.get_next(_dt.datetime)
            if _ms(fire) > after_ms and not _repeated(fire):
                return _ms(fire)
    except CroniterBadDateError:
        return None
    return None  # pragma: no cover - a repeated time recurs at most twice


def _prev_fire(cron: str, zone: ZoneInfo, at_ms: int) -> int | None:
    """The latest fire of ``cron`` at or before ``at_ms`` (None: none found)."""
    from croniter import CroniterBadDateError, croniter

    start = _local(at_ms + 1000, zone)
    try:
        it = croniter(cron, start)
        for _ in range(6):
            fire: _dt.datetime = it.get_prev(_dt.datetime)
            if _ms(fire) <= at_ms and not _repeated(fire):
                return _ms(fire)
    except CroniterBadDateError:
        return None
    return None  # pragma: no cover


def fires_between(cron: str, zone: ZoneInfo, start_ms: int, end_ms: int) -> list[int]:
    """The fires of ``cron`` in ``zone`` with ``start_ms <= fire < end_ms``,
    at most `MAX_BACKFILL` (`InvalidSchedule` beyond: a narrower window)."""
    fires: list[int] = []
    fire = next_fire(cron, zone, start_ms - 1)
    while fire is not None and fire < end_ms:
        if len(fires) == MAX_BACKFILL:
            raise InvalidSchedule(
                "-", f"the window holds more than {MAX_BACKFILL} fires: backfill a narrower one"
            )
        fires.append(fire)
        fire = next_fire(cron, zone, fire)
    return fires


# ---------------------------------------------------------------- record


@dataclass(frozen=True, slots=True)
class ScheduleRecord:
    """A stored schedule; see the module docstring.

    ``payload``: the encoded invocation each fire starts a run with;
    ``anchor_ms``: fires are strictly after it (creation, resume, a change
    of ``cron`` or ``timezone``); ``last_fire_ms``: the latest fire started
    (None: none yet); ``origin``: ``"api"`` (``engine.schedule``) or
    ``"decorator"`` (``@workflow(schedule=...)``).
    """

    schedule_id: str
    workflow: str
    queue: str
    cron: str
    timezone: str
    payload: bytes
    anchor_ms: int
    paused: bool = False
    last_fire_ms: int | None = None
    origin: str = "api"

    def __post_init__(self) -> None:
        from durable.engine.cron import validate_expression  # croniter, when first used

        validate_schedule_id(self.schedule_id)
        validate_expression(self.schedule_id, self.cron)
        check_timezone(self.schedule_id, self.timezone)

    @property
    def zone(self) -> ZoneInfo:
        """The schedule's time zone."""
        return ZoneInfo(self.timezone)

    def next_fire_ms(self) -> int | None:
        """The next fire instant after the anchor and the last fire (None:
        the expression never fires again). A paused schedule still has one:
        it is where it would fire."""
        after = max(self.anchor_ms, self.last_fire_ms or self.anchor_ms)
        return next_fire(self.cron, self.zone, after)

    def encode(self) -> bytes:
        """The record's stored bytes (MessagePack, versioned)."""
        m: dict[str, Any] = {
            "v": SCHEDULE_FORMAT_VERSION,
            "id": self.schedule_id,
            "workflow": self.workflow,
            "queue": self.queue,
            "cron": self.cron,
            "tz": self.timezone,
            "payload": self.payload,
            "anchor": self.anchor_ms,
            "paused": self.paused,
            "last": self.last_fire_ms,
            "origin": self.origin,
        }
        return bytes(msgpack.packb(m, use_bin_type=True))

    @classmethod
    def decode(cls, raw: bytes, what: str = "a schedule record") -> ScheduleRecord:
        """The record stored as ``raw``; `CorruptEngineRecord` naming ``what``."""
        try:
            m = msgpack.unpackb(raw, raw=False)
            version = m["v"]
            if not isinstance(version, int) or version > SCHEDULE_FORMAT_VERSION:
                raise ValueError(f"format version {version!r} is not one this durable reads")
            return cls(
                m["id"],
                m["workflow"],
                m["queue"],
                m["cron"],
                m["tz"],
                m["payload"],
                m["anchor"],
                bool(m.get("paused", False)),
                m.get("last"),
                m.get("origin", "api"),
            )
        except Exception as e:  # msgpack, KeyError, TypeError, InvalidSchedule
            raise CorruptEngineRecord(what, f"{type(e).__name__}: {e}") from None


def due_fire(record: ScheduleRecord, now_ms: int) -> int | None:
    """The fire to start at ``now_ms``: the latest instant at or before now
    that is after the anchor and the last fire (None: nothing is due, or
    the schedule is paused). One, however many were missed."""
    if record.paused:
        return None
    first = record.next_fire_ms()
    if first is None or first > now_ms:
        return None
    latest = _prev_fire(record.cron, record.zone, now_ms)
    return latest if latest is not None and latest >= first else first


def fire_run_id(schedule_id: str, fire_ms: int, *, manual: bool = False) -> str:
    """The run id of the fire of ``schedule_id`` at ``fire_ms``:
    ``<id>-<UTC yyyymmddThhmmssZ>`` (a fire of the expression) or
    ``<id>-now-<UTC yyyymmddThhmmssfffZ>`` (``manual``: a trigger)."""
    at = _dt.datetime.fromtimestamp(fire_ms / 1000, tz=_dt.UTC)
    if manual:
        return f"{schedule_id}-now-{at:%Y%m%dT%H%M%S}{fire_ms % 1000:03d}Z"
    return f"{schedule_id}-{at:%Y%m%dT%H%M%S}Z"


def apply_change(
    current: bytes | None, op: str, record: bytes | None, at_ms: int, schedule_id: str
) -> bytes | None:
    """The record of ``schedule_id`` after change ``op`` made at ``at_ms``
    (None: deleted, or absent). ``put`` (``record``: the new definition)
    creates the schedule, or replaces its definition keeping its last fire
    and paused state (a new ``cron`` or ``timezone`` re-anchors it at
    ``at_ms``); ``pause``; ``resume`` (re-anchored: nothing missed while
    paused fires); ``delete``. `ScheduleNotFound` for a pause or resume of
    an absent schedule."""
    from durable.errors import ScheduleNotFound

    if op not in _OPS:
        raise InvalidSchedule(schedule_id, f"unknown change {op!r}")
    what = f"the record of schedule {schedule_id!r}"
    old = None if current is None else ScheduleRecord.decode(current, what)
    if op == "delete":
        return None
    if op == "put":
        if record is None:
            raise InvalidSchedule(schedule_id, "a put needs the schedule's record")
        new = ScheduleRecord.decode(record, what)
        if old is None:
            return new.encode()
        moved = (new.cron, new.timezone) != (old.cron, old.timezone)
        kept = replace(
            new,
            anchor_ms=at_ms if moved else old.anchor_ms,
            paused=old.paused,
            last_fire_ms=old.last_fire_ms,
        )
        return kept.encode()
    if old is None:
        raise ScheduleNotFound(schedule_id, f"{op}_schedule")
    if op == "pause":
        return replace(old, paused=True).encode()
    if not old.paused:
        return old.encode()
    return replace(old, paused=False, anchor_ms=max(at_ms, old.anchor_ms)).encode()
