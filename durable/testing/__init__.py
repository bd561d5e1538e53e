"""Test doubles for code built on `durable`, shipped in the box.

- `MemoryObjectStore`: an in-process object store with atomic `create`.
- `FaultyObjectStore`: wraps a store to add latency, failures, timeouts and
  a simulated crash (`SimulatedCrash`) after the N-th write.
- `MockClock`: a clock that moves only when a test advances it.
- `capture_logs`: collect the structured events `durable` logs in a block.
- `ObjectStoreConformance`: the pytest suite every object-store backend
  passes; importing it needs pytest and pytest-asyncio, the rest does not.
- `run_until_settled`: skip a `MockClock` through every timer of a run.
- `replay`: today's workflow code against the journal of a recorded run
  (`RunHistory`, `fetch_history`, ``durable export``), reporting the first
  `Divergence`.
- The pytest plugin (`durable.testing.pytest_plugin`, entry point
  ``durable``): fixtures ``durable_clock``, ``durable_engine``,
  ``durable_local_engine``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from durable._logging import capture_logs
from durable.store.clock import MockClock
from durable.store.objects.faults import FaultyObjectStore, SimulatedCrash
from durable.store.objects.memory import MemoryObjectStore
from durable.testing.replay import Divergence, ReplayResult, RunHistory, fetch_history, replay
from durable.testing.time_skipping import Settled, run_until_settled

__all__ = [
    "Divergence",
    "FaultyObjectStore",
    "MemoryObjectStore",
    "MockClock",
    "ObjectStoreConformance",
    "ReplayResult",
    "RunHistory",
    "Settled",
    "SimulatedCrash",
    "capture_logs",
    "fetch_history",
    "replay",
    "run_until_settled",
]

if TYPE_CHECKING:
    from durable.testing.conformance import ObjectStoreConformance
else:

    def __getattr__(name: str) -> object:
        # Imported on first use, so that the rest works without pytest. Hidden
        # from type checkers, which then still catch misspelt names.
        if name == "ObjectStoreConformance":
            from durable.testing.conformance import ObjectStoreConformance

            return ObjectStoreConformance
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
