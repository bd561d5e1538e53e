"""``engine.runs(...)``: find workflow runs, newest first, a page at a time.

```python
page = await engine.runs(state="failed", workflow="shop.checkout",
                         attributes={"customer": "c-17"}, limit=50)
for run in page.runs:
    print(run.run_id, run.state, run.error_type, run.error)
if page.cursor is not None:
    page = await engine.runs(state="failed", cursor=page.cursor)  # the next page
```

Runs come from the run index (`durable.decorators.index`) in the store's
memory, newest first (by start time, then run id). Every filter given must
hold: ``state``, ``workflow`` and ``version`` (the workflow's version,
`durable.decorators.versions`) take one value or a collection of them;
``started_after <= started < started_before`` (epoch ms or an aware
datetime; these bound the scan of the index); ``attributes`` matches
exactly on every pair given. A page holds at most ``limit`` runs;
``cursor`` (from the previous page, with the same filters) continues after
its last run, so runs started meanwhile (which sort before it) do not shift
later pages. On a partitioned store every partition's index is read and
the pages merged in the same order; the cursor is the position in that
order, so it is stable too.

What a page costs: no object read and no write; an in-memory walk of the
index from the cursor until ``limit`` runs match, reading each candidate's
run records (its state) from memory. A client engine (``role="client"``)
reads its followed view after one refresh (a poll), and never fences the
owner. A run started by a durable older than the index is not listed.
"""

from __future__ import annotations

import datetime as _dt
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from durable.decorators.index import ORDER_PREFIX, decode_entry, order_suffix, run_id_of
from durable.decorators.journal import journal_prefix
from durable.decorators.status import WorkflowState, ended, where_active
from durable.decorators.waiting import Waiting
from durable.engine.runs import Terminated
from durable.errors import InvalidArgument

if TYPE_CHECKING:
    from durable.decorators.base import EngineBase
    from durable.decorators.index import IndexEntry

__all__ = ["MAX_LIMIT", "RunFilter", "RunPage", "RunSummary", "list_runs"]

#: The most runs one page holds.
MAX_LIMIT = 1000


def _utc(ms: int) -> _dt.datetime:
    return _dt.datetime.fromtimestamp(ms / 1000, _dt.UTC)


@dataclass(frozen=True, slots=True)
class RunSummary:
    """One run as ``engine.runs()`` lists it."""

    #: The run's id.
    run_id: str
    #: The workflow's name.
    workflow: str
    #: pending, running, waiting, succeeded, failed or cancelled.
    state: WorkflowState
    #: When the run was started (UTC).
    started: _dt.datetime
    #: When it terminated (UTC); None while active.
    ended: _dt.datetime | None
    #: The positions its journal holds (finished steps, waits, child runs).
    steps: int
    #: RUNNING: the step whose body runs; WAITING: what it waits on.
    current_step: str | None = None
    #: WAITING: the signal key it waits on and when it wakes anyway.
    waiting: Waiting | None = None
    #: FAILED: the exception's type name.
    error_type: str | None = None
    #: FAILED: the exception's message; CANCELLED: the reason, if any.
    error: str | None = None
    #: The run's attributes.
    attributes: Mapping[str, str] = field(default_factory=dict)
    #: A cancellation was asked and the run has not terminated yet.
    cancel_requested: bool = False
    #: The workflow's version in the code that started the run (None: not recorded).
    version: str | None = None
    #: How many times the run has continued as new (0: never).
    incarnation: int = 0

    def as_dict(self) -> dict[str, Any]:
        """The summary as JSON-ready data (times in ISO 8601, ``state`` its
        lowercase string)."""
        waiting = self.waiting
        return {
            "run_id": self.run_id,
            "workflow": self.workflow,
            "state": self.state.value,
            "started": self.started.isoformat(),
            "ended": None if self.ended is None else self.ended.isoformat(),
            "steps": self.steps,
            "current_step": self.current_step,
            "waiting": None
            if waiting is None
            else {
                "signal_key": waiting.signal_key,
                "until": _utc(waiting.until_ms).isoformat(),
                "since": _utc(waiting.since_ms).isoformat(),
            },
            "error_type": self.error_type,
            "error": self.error,
            "attributes": dict(self.attributes),
            "cancel_requested": self.cancel_requested,
            "version": self.version,
            "incarnation": self.incarnation,
        }


@dataclass(frozen=True, slots=True)
class RunPage:
    """A page of ``engine.runs()``: its runs, and the cursor of the next page
    (None: this is the last)."""

    runs: list[RunSummary]
    cursor: str | None = None


def _ms(value: object, name: str) -> int | None:
    if value is None:
        return None
    if isinstance(value, _dt.datetime):
        if value.tzinfo is None:
            raise InvalidArgument(f"{name} must be timezone-aware, got {value!r}")
        return max(0, round(value.timestamp() * 1000))
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise InvalidArgument(f"{name} must be epoch milliseconds or an aware datetime")
    return value


def _names(value: object, name: str) -> frozenset[str] | None:
    if value is None:
        return None
    if isinstance(value, str):
        return frozenset({value})
    if isinstance(value, Collection) and all(isinstance(v, str) for v in value):
        return frozenset(value)
    raise InvalidArgument(f"{name} must be a str or a collection of str, got {value!r:.80}")


@dataclass(frozen=True, slots=True)
class RunFilter:
    """The filters of ``engine.runs()``, checked (`InvalidArgument`)."""

    states: frozenset[WorkflowState] | None = None
    workflows: frozenset[str] | None = None
    started_after_ms: int | None = None
    started_before_ms: int | None = None
    attributes: Mapping[str, str] = field(default_factory=dict)
    versions: frozenset[str] | None = None

    @classmethod
    def of(
        cls,
        *,
        state: object = None,
        workflow: object = None,
        started_after: object = None,
        started_before: object = None,
        attributes: object = None,
        version: object = None,
    ) -> RunFilter:
        """The filter of ``engine.runs()``'s keyword arguments."""
        states = _names(state, "state")
        try:
            parsed = None if states is None else frozenset(WorkflowState(s.lower()) for s in states)
        except ValueError:
            raise InvalidArgument(
                f"state must be among {', '.join(s.value for s in WorkflowState)}, got {state!r}"
            ) from None
        if attributes is not None and (
            not isinstance(attributes, Mapping)
            or not all(isinstance(k, str) and isinstance(v, str) for k, v in attributes.items())
        ):
            raise InvalidArgument(f"attributes must map str to str, got {attributes!r:.80}")
        return cls(
            parsed,
            _names(workflow, "workflow"),
            _ms(started_after, "started_after"),
            _ms(started_before, "started_before"),
            dict(attributes or {}),
            _names(version, "version"),
        )

    def admits(self, entry: IndexEntry) -> bool:
        """Whether the index entry passes every filter but the state."""
        if self.workflows is not None and entry.workflow not in self.workflows:
            return False
        if self.versions is not None and entry.version not in self.versions:
            return False
        return all(entry.attributes.get(k) == v for k, v in self.attributes.items())


def _cursor_key(cursor: object) -> bytes | None:
    if cursor is None:
        return None
    try:
        if not isinstance(cursor, str):
            raise ValueError
        return ORDER_PREFIX + bytes.fromhex(cursor)
    except ValueError:
        raise InvalidArgument(f"not a cursor of engine.runs(): {cursor!r:.80}") from None


async def summarize(engine: EngineBase, entry: IndexEntry) -> RunSummary | None:
    """The summary of the run ``entry`` indexes, in ``engine``'s partition
    (None if its records are gone: forgotten or retained out meanwhile)."""
    run_id = entry.run_id
    runtime = engine.workflows.default
    kv = engine.queue.kv.internal()
    status = runtime.status(run_id)
    if status is None:
        return None
    steps = kv.count(journal_prefix(run_id))
    started = _utc(entry.started_ms)
    if isinstance(status.state, Terminated):
        t = status.state.termination
        state, error_type, error = ended(t)
        if steps == 0 and entry.steps is not None:
            steps = entry.steps  # archived
        return RunSummary(
            run_id,
            entry.workflow,
            state,
            started,
            _utc(t.terminated_at_ms),
            steps,
            error_type=error_type,
            error=error,
            attributes=entry.attributes,
            version=entry.version,
            incarnation=entry.incarnation,
        )
    active = await where_active(engine, run_id)
    return RunSummary(
        run_id,
        entry.workflow,
        active.state,
        started,
        None,
        steps,
        current_step=active.current_step,
        waiting=active.waiting,
        attributes=entry.attributes,
        cancel_requested=active.cancel_requested,
        version=entry.version,
        incarnation=entry.incarnation,
    )


async def _partition_page(
    engine: EngineBase, f: RunFilter, after: bytes | None, limit: int
) -> list[tuple[bytes, RunSummary]]:
    """Up to ``limit`` matching runs of one partition after order key ``after``."""
    kv = engine.queue.kv.internal()
    start = None
    if f.started_before_ms is not None:
        if f.started_before_ms == 0:
            return []
        start = ORDER_PREFIX + order_suffix(f.started_before_ms - 1, "")
    inclusive_start = True
    if after is not None and (start is None or after >= start):
        start, inclusive_start = after, False
    end = None
    if f.started_after_ms:
        end = ORDER_PREFIX + order_suffix(f.started_after_ms - 1, "")
    found: list[tuple[bytes, RunSummary]] = []
    async for rows in kv.entries(
        ORDER_PREFIX, start, end, inclusive=(inclusive_start, False), page_size=256
    ):
        for key, value in rows:
            entry = decode_entry(run_id_of(key), value)
            if not f.admits(entry):
                continue
            summary = await summarize(engine, entry)
            if summary is None or (f.states is not None and summary.state not in f.states):
                continue
            found.append((key, summary))
            if len(found) >= limit:
                return found
    return found


async def list_runs(
    engine: EngineBase,
    partitions: list[EngineBase],
    f: RunFilter,
    *,
    limit: int = 50,
    cursor: str | None = None,
    refresh: bool = True,
) -> RunPage:
    """A page of the runs ``f`` admits across ``partitions``; see the module
    docstring. ``refresh``: a client's view polls the log first."""
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_LIMIT:
        raise InvalidArgument(f"limit must be an int from 1 to {MAX_LIMIT}, got {limit!r}")
    after = _cursor_key(cursor)
    found: list[tuple[bytes, RunSummary]] = []
    for p in partitions:
        if refresh:
            await p.workflows.default.catch_up("")
        found += await _partition_page(p, f, after, limit + 1)
    found.sort(key=lambda pair: pair[0])
    page = found[:limit]
    more = len(found) > limit
    next_cursor = page[-1][0][len(ORDER_PREFIX) :].hex() if more and page else None
    return RunPage([s for _, s in page], next_cursor)
