"""`CostReport`: named counters of what an item's processing cost.

A cost report holds float counters by name (``"tokens"``, ``"usd"``,
``"api_calls"``), listed in name order. A pipeline records into its item's
report (`BulkContext.record_cost`); the bulk run merges every succeeded
item's report into its own. It is stored as a MessagePack map of name to
float inside the item's result envelope (`durable.engine.bulk.codec`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from durable.errors import InvalidArgument

__all__ = ["CostReport"]


def _metric(name: object) -> str:
    if not isinstance(name, str) or not name:
        raise InvalidArgument(f"a cost metric is a non-empty str, got {name!r}")
    return name


def _amount(metric: str, amount: object) -> float:
    if isinstance(amount, bool) or not isinstance(amount, int | float):
        raise InvalidArgument(f"cost {metric!r}: the amount must be a number, got {amount!r}")
    value = float(amount)
    if not math.isfinite(value):
        raise InvalidArgument(f"cost {metric!r}: the amount must be finite, got {amount!r}")
    return value


class CostReport:
    """Float counters by name; see the module docstring.

    ``CostReport({"tokens": 120})`` starts with those counters. Two reports
    are equal when they hold the same counters with the same values.
    """

    __slots__ = ("_counters",)

    def __init__(self, counters: Mapping[str, float] | None = None) -> None:
        self._counters: dict[str, float] = {}
        for name, amount in (counters or {}).items():
            self.record(name, amount)

    def record(self, metric: str, amount: float) -> None:
        """Add ``amount`` (a finite number, negative for a refund) to ``metric``."""
        name = _metric(metric)
        self._counters[name] = self._counters.get(name, 0.0) + _amount(name, amount)

    def get(self, metric: str) -> float:
        """The counter of ``metric``; 0.0 if nothing was recorded for it."""
        return self._counters.get(metric, 0.0)

    def merge(self, other: CostReport) -> None:
        """Add every counter of ``other`` to this report."""
        if not isinstance(other, CostReport):
            raise InvalidArgument(f"merge takes a CostReport, got {other!r}")
        for name, amount in other.entries():
            self._counters[name] = self._counters.get(name, 0.0) + amount

    def entries(self) -> list[tuple[str, float]]:
        """The counters as ``(name, value)`` pairs, in name order."""
        return sorted(self._counters.items())

    def copy(self) -> CostReport:
        """An independent report with the same counters."""
        return CostReport(dict(self._counters))

    def to_map(self) -> dict[str, float]:
        """The counters as a map of name to value, in name order (how it is stored)."""
        return dict(self.entries())

    @classmethod
    def from_map(cls, counters: object) -> CostReport:
        """The report stored as ``counters``; `InvalidArgument` if it is not a
        map of non-empty names to finite numbers."""
        if not isinstance(counters, Mapping):
            raise InvalidArgument(f"a stored cost report is a map, got {counters!r:.80}")
        return cls(counters)

    def __bool__(self) -> bool:
        return bool(self._counters)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, CostReport):
            return NotImplemented
        return self._counters == other._counters

    __hash__ = None  # type: ignore[assignment]  # mutable

    def __repr__(self) -> str:
        inner = ", ".join(f"{name!r}: {value!r}" for name, value in self.entries())
        return f"CostReport({{{inner}}})"
