"""The terminal hook: code that observes every terminated run, at least once.

The runtime enqueues a notification job in the same transaction that
terminates a run (when the hook `observes` the outcome); the worker then
calls `TerminalHook.on_termination` with the committed `RunOutcome`. A
`StepError` from the hook retries (transient) or dead-letters (permanent)
the notification, like a step.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from durable.engine.effects import TerminalEffects
from durable.engine.runs import RunOutcome

__all__ = ["NoopTerminalHook", "TerminalHook"]


@runtime_checkable
class TerminalHook(Protocol):
    """Observes terminated runs."""

    def observes(self, outcome: RunOutcome) -> bool:
        """Whether to enqueue a notification for ``outcome`` (default: all)."""
        ...

    async def on_termination(self, outcome: RunOutcome, effects: TerminalEffects) -> None:
        """Handle one terminated run; stage KV writes and jobs in ``effects``."""
        ...


class NoopTerminalHook:
    """A hook that observes nothing: no notification job is ever enqueued."""

    def observes(self, outcome: RunOutcome) -> bool:
        """Never."""
        return False

    async def on_termination(self, outcome: RunOutcome, effects: TerminalEffects) -> None:
        """Not called."""
