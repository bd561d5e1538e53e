"""Point 10: in a process that stays up, an n-step workflow costs O(n).

Counted, not timed: the workflow function is entered once, the run takes
one delivery, its journal is loaded once, and the store operations a run
performs grow linearly with its steps (4x the steps: about 4x the
operations, where a replay per step would cost 16x). The timed comparison
(one 1,000-step workflow against 1,000 one-step workflows) is
`benchmarks/bench_decorators.py`.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest
from decorator_helpers import Factory, make_engine, result

import durable
from durable.decorators import archive
from durable.decorators.journal import Journal
from durable.store.clock import MockClock
from durable.store.kv import KvNamespace
from durable.store.log.writer import LogWriter

entered: Counter[int] = Counter()


@pytest.fixture(autouse=True)
def _fresh() -> None:
    entered.clear()


@durable.step
async def inc(value: int) -> int:
    return value + 1


@durable.workflow
async def counter(n: int) -> int:
    entered[n] += 1
    value = 0
    for _ in range(n):
        value = await inc(value)
    return value


class Ops:
    """Counts journal loads and writes, KV reads and the rows they return,
    and the store's commits, while installed."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.counts: Counter[str] = Counter()
        for owner, name in (
            (Journal, "write_later"),  # `Journal.write` too: it calls it
            (KvNamespace, "get"),
            (KvNamespace, "scan"),
            (KvNamespace, "snapshot"),
            (LogWriter, "commit"),
        ):
            self._count(monkeypatch, owner, name)
        load = Journal.load.__func__  # type: ignore[attr-defined]

        def counted_load(cls: type[Journal], *args: Any) -> Journal:
            self.counts["Journal.load"] += 1
            return load(cls, *args)  # type: ignore[no-any-return]

        monkeypatch.setattr(Journal, "load", classmethod(counted_load))

    def _count(self, monkeypatch: pytest.MonkeyPatch, owner: type, name: str) -> None:
        original = getattr(owner, name)
        counts, label = self.counts, f"{owner.__name__}.{name}"

        def counted(*args: Any, **kwargs: Any) -> Any:
            counts[label] += 1
            value = original(*args, **kwargs)
            rows = getattr(value, "entries", value)  # a scan's page, a snapshot's list
            if isinstance(rows, list):
                counts["rows read"] += len(rows)
            return value

        monkeypatch.setattr(owner, name, counted)


async def _run(engine: durable.Engine, ops: Ops, n: int) -> Counter[str]:
    ops.counts.clear()
    handle = await counter.start(n)
    assert await result(handle) == n
    counts = Counter(ops.counts)
    # The engine's: deliveries.
    status = engine.for_run(handle.run_id).workflows.default.status(handle.run_id)
    assert status is not None
    assert status.current_step == 0
    return counts


async def test_an_n_step_workflow_costs_o_of_n(
    make_objects: Factory, clock: MockClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Neither run is archived (archiving is O(n) too, tested on its own): the
    # counts are the runs' alone, whenever the terminal hook runs.
    monkeypatch.setattr(archive, "ARCHIVE_MIN_BYTES", 1 << 30)
    async with make_engine(make_objects, clock) as engine:
        ops = Ops(monkeypatch)
        small = await _run(engine, ops, 50)
        large = await _run(engine, ops, 200)
    assert entered == {50: 1, 200: 1}  # the function ran once: no replay per step
    assert small["Journal.load"] == large["Journal.load"] == 1
    assert (small["Journal.write_later"], large["Journal.write_later"]) == (50, 200)
    # A step costs one commit, its journal entry (the run's progress mark
    # rides the first one): 150 more steps, 150 more commits.
    assert large["LogWriter.commit"] - small["LogWriter.commit"] == 150
    for op in ("KvNamespace.get", "KvNamespace.scan", "KvNamespace.snapshot", "rows read"):
        # Linear: 4x the steps, at most about 4x the reads (a replay per step: 16x).
        assert large[op] <= 4 * small[op] + 8, (op, small[op], large[op])
    reads = sum(large[op] for op in ("KvNamespace.get", "KvNamespace.scan"))
    assert reads <= 4 * 200, reads  # a few reads per step, not per step per step
