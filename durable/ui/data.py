"""What the run view shows, as JSON-ready data read through a client engine.

Three readers, one per view of the page:

- `run_page`: a page of ``engine.runs(...)`` (`RunSummary.as_dict` each,
  and the next page's cursor), from the query of ``GET /api/runs``;
- `run_detail`: one run's timeline, `durable.cli.show.describe_run` (the
  document ``durable show --json`` prints), after the client's view read
  the log once more;
- `list_groups`: the store's run groups (job ``map`` groups and bulk
  groups), each with its progress (`group_progress`).

Nothing here writes: the engine is a client (``role="client"``), which
reads through the read-only view and never fences the owner.
"""

from __future__ import annotations

import datetime as _dt
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from durable.cli.show import describe_run
from durable.decorators.base import EngineBase
from durable.decorators.engine import Engine
from durable.engine.records import MemberRecord, decode_member_record
from durable.engine.runs import RESERVED_KV_PREFIX
from durable.errors import DurableError, InvalidArgument

__all__ = [
    "GroupProgress",
    "group_progress",
    "list_groups",
    "parse_started",
    "run_detail",
    "run_page",
]

#: The runs a page shows unless the query says otherwise.
DEFAULT_LIMIT = 25
#: The most groups `list_groups` returns.
MAX_GROUPS = 50
#: Member records read per KV scan while counting groups.
_SCAN_PAGE = 1000
#: Where member records live (`durable.engine.keys.group_prefix`).
_GROUPS = RESERVED_KV_PREFIX + b"groups/"


def parse_started(text: str) -> int:
    """``started_after`` as the page sends it: epoch milliseconds, or an ISO
    8601 time (UTC unless it names its offset); `InvalidArgument` else."""
    text = text.strip()
    if text.isdigit():
        return int(text)
    try:
        when = _dt.datetime.fromisoformat(text)
    except ValueError:
        raise InvalidArgument(
            f"started_after must be epoch milliseconds or an ISO 8601 time, got {text!r}"
        ) from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=_dt.UTC)
    return int(when.timestamp() * 1000)


def _attributes(values: list[str]) -> dict[str, str] | None:
    pairs: dict[str, str] = {}
    for item in values:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise InvalidArgument(f"an attribute filter is KEY=VALUE, got {item!r}")
        pairs[key] = value
    return pairs or None


async def run_page(engine: Engine, query: Mapping[str, list[str]]) -> dict[str, Any]:
    """A page of runs for ``query`` (each name's values: ``state``,
    ``workflow``, ``attr`` as ``KEY=VALUE``, ``started_after``, ``limit``,
    ``cursor``; empty values are ignored): ``{"runs": [...], "cursor": ...}``."""

    def one(name: str) -> str | None:
        values = [v for v in query.get(name, []) if v.strip()]
        return values[-1].strip() if values else None

    limit_text = one("limit")
    if limit_text is not None and not limit_text.isdigit():
        raise InvalidArgument(f"limit must be a whole number, got {limit_text!r}")
    started = one("started_after")
    page = await engine.runs(
        state=one("state"),
        workflow=one("workflow"),
        started_after=None if started is None else parse_started(started),
        attributes=_attributes([v for v in query.get("attr", []) if v.strip()]),
        limit=DEFAULT_LIMIT if limit_text is None else int(limit_text),
        cursor=one("cursor"),
    )
    return {"runs": [run.as_dict() for run in page.runs], "cursor": page.cursor}


async def run_detail(engine: Engine, run_id: str) -> dict[str, Any]:
    """Run ``run_id``'s timeline (`describe_run`), the view refreshed first;
    `RunNotFound` if the store does not hold it."""
    await engine.for_run(run_id).workflows.default.catch_up(run_id)
    return await describe_run(engine.for_run(run_id), run_id)


@dataclass(frozen=True, slots=True)
class GroupProgress:
    """A group's members counted by state (``pending``: not terminated)."""

    group_id: str
    total: int
    pending: int
    succeeded: int
    failed: int
    cancelled: int

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready, with ``done`` (terminated members) added."""
        return {
            "group_id": self.group_id,
            "total": self.total,
            "pending": self.pending,
            "succeeded": self.succeeded,
            "failed": self.failed,
            "cancelled": self.cancelled,
            "done": self.total - self.pending,
        }


def group_progress(group_id: str, records: list[MemberRecord]) -> GroupProgress:
    """The progress of group ``group_id`` from its member records.

    The seam for the group progress API: counts by state only; rate and
    time remaining come from that API once it lands.
    """
    counts = {"succeeded": 0, "failed": 0, "cancelled": 0}
    pending = 0
    for record in records:
        if record.termination is None:
            pending += 1
        else:
            counts[record.termination.status.value] += 1
    return GroupProgress(group_id, len(records), pending, **counts)


def _partition_groups(engine: EngineBase, found: dict[str, list[MemberRecord]]) -> None:
    """Add the member records of ``engine``'s partition to ``found`` by group,
    stopping at `MAX_GROUPS` groups."""
    kv = engine.queue.kv.internal()
    start: bytes | None = None
    while True:
        page = kv.scan(_GROUPS, start, inclusive=(False, False), limit=_SCAN_PAGE)
        for key, value in page.entries:
            group_id, _, rest = key[len(_GROUPS) :].decode("utf-8", "replace").partition("/")
            if not rest.startswith("members/"):
                continue
            if group_id not in found and len(found) >= MAX_GROUPS:
                return
            what = f"member record {key.decode('utf-8', 'replace')!r}"
            try:
                record = decode_member_record(value, what)
            except DurableError:
                continue  # `durable check` names it; the view shows what it can read
            found.setdefault(group_id, []).append(record)
        if not page.more:
            return
        start = page.entries[-1][0]


async def list_groups(engine: Engine) -> list[dict[str, Any]]:
    """The store's run groups (at most `MAX_GROUPS`, by group id), each with
    its progress; a group spread over partitions is counted across them."""
    found: dict[str, list[MemberRecord]] = {}
    for partition in engine.every_partition():
        await partition.workflows.default.catch_up("")
        _partition_groups(partition, found)
    return [group_progress(g, found[g]).as_dict() for g in sorted(found)]
