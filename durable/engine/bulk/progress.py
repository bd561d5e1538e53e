"""What a bulk run counts: `BulkProgress` while it runs, `BulkReport` at the end.

`BulkTally` is the fold over the run group's results that a bulk run keeps:
it counts each terminated item once (a run id seen again is ignored, so a
result delivered twice is not counted twice), merges the cost of the
succeeded items, collects the failed ones, and turns each result into the
`OutputRecord` the sink receives. Time comes from the injected clock.

Counts cover the items this bulk run processes (``total``): every item
that had not succeeded before it, whether newly submitted or still active
from an earlier run that stopped. Items that succeeded before are
``skipped``: their output records are written again, but they are neither
run nor counted as completed.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, fields

from durable._logging import get_logger
from durable.engine.bulk.codec import decode_result
from durable.engine.bulk.cost import CostReport
from durable.engine.bulk.sinks import OutputRecord
from durable.engine.groups import MemberResult
from durable.engine.runs import TerminalStatus
from durable.errors import CorruptEngineRecord
from durable.store.clock import Clock

__all__ = ["BulkProgress", "BulkReport", "BulkTally"]

log = get_logger("durable.engine.bulk")

#: A succeeded item's output record when its result is not stored.
NO_OUTPUT = "the output is not stored (removed by memo retention, or the run was reaped)"


@dataclass(frozen=True, slots=True)
class BulkProgress:
    """Where a bulk run is.

    ``completed`` = ``succeeded + failed + cancelled``, out of ``total``;
    ``elapsed`` is in seconds since the run started (the run's clock);
    ``rate_per_sec`` is completed items per second (0.0 until one has
    completed in measurable time); ``time_remaining`` is the estimate in
    seconds, None until the rate is known or when nothing remains. ``cost``
    sums the succeeded items' cost reports.
    """

    total: int
    completed: int
    succeeded: int
    failed: int
    cancelled: int
    skipped: int
    elapsed: float
    rate_per_sec: float
    time_remaining: float | None
    cost: CostReport


@dataclass(frozen=True, slots=True)
class BulkReport(BulkProgress):
    """How a bulk run ended: its last `BulkProgress`, plus the run group it
    used and its failed items (run ids and keys, in input order)."""

    group_id: str
    failed_run_ids: tuple[str, ...]
    failed_keys: tuple[str, ...]


class BulkTally:
    """The counters of one bulk run; see the module docstring."""

    __slots__ = (
        "_clock",
        "_cost",
        "_counts",
        "_failed",
        "_order",
        "_seen",
        "_skipped",
        "_started_ms",
        "group_id",
        "total",
    )

    def __init__(self, clock: Clock, group_id: str = "") -> None:
        self._clock = clock
        self._started_ms = clock.now_ms()
        #: The run group of the batch ("" before the batch is known).
        self.group_id = group_id
        #: Items this run processes.
        self.total = 0
        self._order: dict[str, int] = {}
        self._skipped: set[str] = set()
        self._seen: set[str] = set()
        self._counts = dict.fromkeys(TerminalStatus, 0)
        self._failed: dict[str, str] = {}  # run id -> key
        self._cost = CostReport()

    def begin(self, group_id: str, keys: Iterable[tuple[str, str]], skipped: set[str]) -> None:
        """The batch: its group, its ``(key, run_id)`` pairs in input order, and
        the run ids of the items that had succeeded already."""
        self.group_id = group_id
        self._order = {run_id: i for i, (_, run_id) in enumerate(keys)}
        self._skipped = skipped & self._order.keys()
        self.total = len(self._order) - len(self._skipped)

    def observe(self, result: MemberResult) -> OutputRecord | None:
        """Count ``result`` and return its output record; None (nothing counted)
        for a run id already observed."""
        run_id = result.run_id
        if run_id in self._seen:
            return None
        self._seen.add(run_id)
        termination = result.termination
        status = termination.status
        output, cost, error = None, CostReport(), termination.error
        if status is TerminalStatus.SUCCEEDED:
            output, cost, error = self._output(result)
        if run_id not in self._skipped:
            self._counts[status] += 1
            self._cost.merge(cost)
            if status is TerminalStatus.FAILED:
                self._failed[run_id] = result.key
        return OutputRecord(run_id, result.key, status.as_str(), output, error)

    @staticmethod
    def _output(result: MemberResult) -> tuple[object, CostReport, str | None]:
        outcome = result.outcome
        if outcome is None or outcome.result is None:
            return None, CostReport(), NO_OUTPUT
        try:
            output, cost = decode_result(outcome.result, result.run_id)
        except CorruptEngineRecord as e:
            log.warning("bulk result undecodable", run_id=result.run_id, error=str(e))
            return None, CostReport(), str(e)
        return output, cost, None

    @property
    def completed(self) -> int:
        """Items of this run that terminated."""
        return sum(self._counts.values())

    def progress(self) -> BulkProgress:
        """The counts now."""
        elapsed = max(0, self._clock.now_ms() - self._started_ms) / 1000
        completed = self.completed
        rate = completed / elapsed if completed and elapsed > 0 else 0.0
        remaining = self.total - completed
        return BulkProgress(
            total=self.total,
            completed=completed,
            succeeded=self._counts[TerminalStatus.SUCCEEDED],
            failed=self._counts[TerminalStatus.FAILED],
            cancelled=self._counts[TerminalStatus.CANCELLED],
            skipped=len(self._skipped),
            elapsed=elapsed,
            rate_per_sec=rate,
            time_remaining=remaining / rate if rate > 0 and remaining > 0 else None,
            cost=self._cost.copy(),
        )

    def report(self) -> BulkReport:
        """The counts now, with the failed items in input order."""
        p = self.progress()
        failed = sorted(self._failed.items(), key=lambda item: self._order.get(item[0], -1))
        return BulkReport(
            **{f.name: getattr(p, f.name) for f in fields(p)},
            group_id=self.group_id,
            failed_run_ids=tuple(run_id for run_id, _ in failed),
            failed_keys=tuple(key for _, key in failed),
        )
