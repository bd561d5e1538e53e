"""Control flow out of a workflow delivery: `Suspend` and `Abort`.

Both derive from `BaseException`, like `asyncio.CancelledError`, so a
workflow's ``except Exception:`` cannot swallow them; the runner catches
them where the delivery ends.

- `Suspend`: the delivery ends with a ``Continue`` whose trigger wakes the
  run; the next delivery replays the workflow up to there and goes on. A
  step raises it when the engine drains (``Immediate``: go on in the next
  process). Durable waits do not raise it: they park, and the delivery's
  `Parking` returns one (not raised) once the delivery is quiescent, with
  the one trigger for all its parked waits (`durable.decorators.parking`).
- `Abort`: the delivery cannot go on (its journal could not be written).
  The runner fails the delivery transiently; the queue redelivers it, and
  the replay repeats only what was not journaled.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from durable.engine.outcomes import Trigger

if TYPE_CHECKING:
    from durable.decorators.journal import Entry

__all__ = ["Abort", "Suspend"]


class Suspend(BaseException):
    """End the delivery and wake the run on ``trigger``.

    ``entry`` (at ``position``) is journaled by the runner when this
    suspension ends the delivery (the pending entry of the signal wait it
    suspends on), so the next delivery knows which wait it resumes.
    """

    def __init__(
        self, trigger: Trigger, position: int | None = None, entry: Entry | None = None
    ) -> None:
        super().__init__(f"workflow suspended until {trigger!r}")
        self.trigger = trigger
        self.position = position
        self.entry = entry


class Abort(BaseException):
    """End the delivery as a transient failure (the queue redelivers it)."""

    def __init__(self, reason: str, cause: BaseException | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.__cause__ = cause
