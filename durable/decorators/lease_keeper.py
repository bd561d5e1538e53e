"""`LeaseKeeper`: keeps a workflow delivery's lease ahead, on a timer.

A delivery may run for a long time (its steps, its waits); its lease is
renewed every third of `LEASE` seconds to stay `LEASE` seconds ahead. The
renewal is in memory (`LeaseHandle.ensure_at_least`), so a timer of the
run's clock serves, not a task: a delivery that ends before the first
renewal leaves nothing to cancel and wait for.
"""

from __future__ import annotations

from collections.abc import Callable

from durable._logging import get_logger
from durable.decorators.context import RunContext
from durable.errors import CancelRequested, ClaimLost
from durable.store.clock import call_later

__all__ = ["LEASE", "LeaseKeeper"]

log = get_logger("durable.decorators")

#: A delivery's lease is kept this many seconds ahead, renewed every third of it.
LEASE = 60.0


class LeaseKeeper:
    """Renews ``run``'s delivery lease now and every `LEASE` / 3 seconds of
    the run's clock until `stop`; calls ``lost()`` once if the lease is lost
    (or cannot be renewed). A run asked to cancel is not renewed further:
    its cancellation token ends the delivery."""

    __slots__ = ("_cancel", "_lost", "_run", "_stopped")

    def __init__(self, run: RunContext, lost: Callable[[], object]) -> None:
        self._run = run
        self._lost = lost
        self._cancel: Callable[[], None] | None = None
        self._stopped = False
        self._renew()

    def _renew(self) -> None:
        self._cancel = None
        if self._stopped:  # its timer had fired, its call not yet made
            return
        run = self._run
        try:
            run.delivery.lease.ensure_at_least(LEASE)
        except CancelRequested:
            return
        except ClaimLost:
            log.warning("workflow delivery lost its lease", run_id=run.run_id)
            self._lost()
            return
        except Exception as e:
            log.error("delivery lease not renewed", run_id=run.run_id, error=str(e))
            self._lost()
            return
        self._cancel = call_later(run.clock, LEASE / 3, self._renew)

    def stop(self) -> None:
        """Renew no more (idempotent)."""
        self._stopped = True
        if self._cancel is not None:
            self._cancel()
            self._cancel = None
