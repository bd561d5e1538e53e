"""Fail fast on a `MockClock` nothing advances: ``handle.result()`` in tests.

A test that starts a run which sleeps (or waits for a signal with a
timeout) and then awaits ``handle.result()`` without moving the mock clock
would hang until the test's timeout: the run waits for a time that never
comes. When the engine's clock is a `MockClock` whose ``stall_after`` is
set (the default), ``result()`` runs a watchdog beside its wait
(`wait_or_stall`):

- it follows where the run waits (`wait_until_waiting`, a watch on the
  run's step pointer: no polling), and for a run waiting on a child, where
  that child waits;
- while a run waits for a time ahead of the clock, it waits for the first
  of: the run moving on, the clock moving (`MockClock.wait_moved`), or
  ``stall_after`` seconds of real time; only the last raises
  `ClockNotAdvanced`, whose message says to advance the clock (or to skip
  time with `durable.testing.run_until_settled`).

A run waiting for a signal without a timeout, or running a step, is not a
wait on the clock: the watchdog says nothing about it. Real time only
bounds the check; nothing waits on it when the clock moves.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable
from typing import TYPE_CHECKING, TypeVar

from durable.decorators.waiting import Waiting, wait_until_waiting
from durable.errors import ClockNotAdvanced
from durable.store.clock import MockClock

if TYPE_CHECKING:
    from durable.decorators.base import EngineBase

__all__ = ["NO_TIMEOUT_MS", "clock_wait", "wait_or_stall"]

T = TypeVar("T")

#: A signal wait whose deadline lies this far after its start has no timeout
#: (the engine records ten years for one without).
NO_TIMEOUT_MS = 5 * 365 * 24 * 3600 * 1000


def clock_wait(waiting: Waiting) -> bool:
    """True when only a time of the clock can end ``waiting`` on its own (a
    sleep, a signal wait with a timeout); False for a signal wait without one."""
    return waiting.signal_key is None or waiting.until_ms - waiting.since_ms < NO_TIMEOUT_MS


async def wait_or_stall(engine: EngineBase, run_id: str, wait: Awaitable[T]) -> T:
    """``await wait`` (the wait for run ``run_id``'s end), or `ClockNotAdvanced`
    when the run waits on a `MockClock` nothing advances; see the module
    docstring. Without such a clock, just ``await wait``."""
    clock = engine.clock
    if not isinstance(clock, MockClock) or clock.stall_after is None:
        return await wait
    waiter = asyncio.ensure_future(wait)
    watchdog = asyncio.ensure_future(_watch(engine, run_id, clock, clock.stall_after))
    try:
        await asyncio.wait({waiter, watchdog}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in (waiter, watchdog):
            if not task.done():
                task.cancel()
        for task in (waiter, watchdog):
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.gather(task, return_exceptions=True)
    if waiter.done() and not waiter.cancelled():
        return waiter.result()
    watchdog.result()  # raises ClockNotAdvanced
    raise AssertionError("unreachable: the watchdog only ends by raising")


async def _watch(engine: EngineBase, run_id: str, clock: MockClock, stall_after: float) -> None:
    """Raise `ClockNotAdvanced` once run ``run_id`` (or a child it waits on)
    waits on ``clock`` for ``stall_after`` real seconds with the clock still."""
    try:
        await _follow(engine, run_id, clock, stall_after)
    except ClockNotAdvanced:
        raise
    except Exception:
        pass  # the run is gone or unreadable: the wait for its end says so
    await asyncio.Event().wait()  # the run ended: its waiter completes


async def _follow(engine: EngineBase, run_id: str, clock: MockClock, stall_after: float) -> None:
    after: Waiting | None = None
    while True:
        waiting = await wait_until_waiting(engine, run_id, after=after)
        if waiting is None:
            return  # terminated
        moved = asyncio.ensure_future(wait_until_waiting(engine, run_id, after=waiting))
        try:
            child = waiting.child_run_id
            if child is not None:
                watch_child = asyncio.ensure_future(_follow(engine, child, clock, stall_after))
                try:
                    await asyncio.wait({moved, watch_child}, return_when=asyncio.FIRST_COMPLETED)
                finally:
                    watch_child.cancel()
                    await asyncio.gather(watch_child, return_exceptions=True)
                if watch_child.done() and not watch_child.cancelled():
                    watch_child.result()  # ClockNotAdvanced of the child
            while not moved.done() and clock_wait(waiting) and waiting.until_ms > clock.now_ms():
                ticked = asyncio.ensure_future(clock.wait_moved())
                try:
                    done, _ = await asyncio.wait(
                        {moved, ticked}, timeout=stall_after, return_when=asyncio.FIRST_COMPLETED
                    )
                finally:
                    ticked.cancel()
                if not done:
                    raise ClockNotAdvanced(run_id, waiting.until_ms, clock.now_ms(), stall_after)
            await moved
        finally:
            moved.cancel()
            await asyncio.gather(moved, return_exceptions=True)
        after = waiting
