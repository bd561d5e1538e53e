"""Waits that follow a run across a move of its partition (or its store).

A handle waits on the mode its run's store runs in now: an owner's queue,
or a client's followed view. In a pool of workers that mode ends under the
wait, routinely: a partition is handed over to a joiner (drained, then
served as a client), taken by this member from another, or lost after a
pause; an unpartitioned standby takes the store over. The wait then fails
with `StoreClosed` (the queue or view it watched closed) or `NoEngine`
(between two modes), although the run goes on elsewhere.

`across_moves` runs such a wait again on the mode that follows, so a
caller's ``await handle.result()`` does not care which process owns the
run: the error reaches the caller only when the engine itself closed, or
when the mode the wait used is still the current one (a real failure, not
a move). A timeout is one deadline of the engine's clock across the tries.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, TypeVar

from durable._logging import get_logger
from durable.errors import NoEngine, StoreClosed
from durable.store.queue.wakeups import wait_or_sleep

if TYPE_CHECKING:
    from durable.decorators.base import EngineBase
    from durable.decorators.modes import Mode
    from durable.decorators.session import StoreSession

__all__ = ["across_moves"]

log = get_logger("durable.decorators")

T = TypeVar("T")


async def across_moves(
    engine: EngineBase,
    run_id: str,
    timeout: float | None,  # noqa: ASYNC109
    attempt: Callable[[EngineBase, float | None], Awaitable[T]],
) -> T:
    """``await attempt(part, left)`` with ``part`` the engine as run
    ``run_id``'s partition sees it now and ``left`` what remains of
    ``timeout`` (seconds of the engine's clock; None: no limit); again on
    the next mode when the run's store changed hands under it (see the
    module docstring). `TimeoutError` naming the run if the next mode is
    not reached within what remains."""
    clock = engine.clock
    deadline = None if timeout is None else clock.now_ms() + round(timeout * 1000)

    def left() -> float | None:
        return None if deadline is None else max(0.0, (deadline - clock.now_ms()) / 1000)

    first = True
    while True:
        part = engine.for_run(run_id)
        session = part.store_session
        mode = session.mode if session is not None else None
        try:
            # The first try takes ``timeout`` as given: the wait checks it.
            return await attempt(part, timeout if first else left())
        except (StoreClosed, NoEngine) as e:
            if session is None or not _left(session, mode):
                raise  # not running, or the mode the wait used still runs
            log.debug("run's store changed hands under a wait", run_id=run_id, error=repr(e))
            nxt = asyncio.ensure_future(session.next_mode(mode))
            try:
                if not await wait_or_sleep(clock, nxt, left()):
                    raise TimeoutError(
                        f"run {run_id!r}: its store was handed over and no new mode "
                        f"came within {timeout} s"
                    ) from e
            finally:
                if not nxt.done():
                    nxt.cancel()
            if not nxt.result():
                raise  # the engine closed
            first = False


def _left(session: StoreSession, mode: Mode | None) -> bool:
    """True when ``session`` has left ``mode`` or is leaving it (its runtimes
    stop first: the mode stays current while its deliveries drain)."""
    return mode is None or session.mode is not mode or session.workflows is None
