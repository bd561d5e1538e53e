"""`RunTerminalHook`: what happens once a workflow run has terminated.

The terminal hook of every workflow runtime of an `Engine`
(`durable.engine.TerminalHook`). It observes the runs that have something
to do when they terminate (a child run, or a run whose records are large
enough to archive: `durable.decorators.archive.needs_archive`, checked in
the terminating transaction); for each, at least once:

1. archive the run if it is large (`durable.decorators.archive.archive_run`):
   its invocation, journal and published values leave the store's memory
   for one object in the run's memo;
2. if the run was started with a concurrency key, free its slot and wake
   the runs waiting for one (`durable.decorators.keyed_concurrency`);
3. if the run is a child workflow, wake its parent: signal the child's key
   (`durable.decorators.children.child_key`); a signal sent before the
   parent waits is buffered.

Both steps are idempotent, in this order: a notification redelivered after
a crash archives nothing twice and the parent's key takes the signal
again only if the first attempt did not finish.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from durable.decorators.archive import archive_run, needs_archive
from durable.decorators.children import HEADER_PARENT, child_key
from durable.decorators.keyed_concurrency import HEADER_CONCURRENCY_KEY, release
from durable.engine.effects import TerminalEffects
from durable.engine.runs import RunOutcome

if TYPE_CHECKING:
    from durable.decorators.base import EngineBase

__all__ = ["RunTerminalHook"]


class RunTerminalHook:
    """Archives large terminated runs and wakes the parents of child runs."""

    def __init__(self, engine: EngineBase) -> None:
        self._engine = engine

    def observes(self, outcome: RunOutcome) -> bool:
        """Child runs, and runs large enough to archive."""
        headers = outcome.headers
        return (
            HEADER_PARENT in headers
            or HEADER_CONCURRENCY_KEY in headers
            or needs_archive(self._engine, outcome.run_id)
        )

    async def on_termination(self, outcome: RunOutcome, effects: TerminalEffects) -> None:
        """Archive the run if it is large, then wake its parent if it has one."""
        engine = self._engine
        if needs_archive(engine, outcome.run_id):
            await archive_run(engine, outcome.run_id)
        if HEADER_CONCURRENCY_KEY in outcome.headers:  # free its slot for a waiting run
            await release(engine.for_run(outcome.run_id), outcome.run_id, outcome.headers)
        if HEADER_PARENT in outcome.headers:
            parent = outcome.headers[HEADER_PARENT]  # co-located: the same partition
            await engine.for_run(parent).workflows.default.signal(
                child_key(outcome.run_id), b"terminated"
            )
