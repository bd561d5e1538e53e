"""Durable waits: ``durable.sleep`` and ``durable.wait_for_signal``.

Both take the next journal position when called, like a step, and end the
delivery while they wait (`Suspend`): a waiting run holds no worker, and
all time is the engine's clock.

- ``sleep(seconds)`` journals its wake-up time. A replay after that time
  returns at once; before it, the run suspends again for the remainder.
- ``wait_for_signal(key, timeout)`` suspends until ``engine.signal(key,
  value)`` delivers a value (a signal sent before the wait is buffered and
  taken at once) or ``timeout`` seconds pass. The delivery that resumes the
  run journals what ended the wait (the value, or None for the timeout)
  before the workflow runs, so every later replay returns the same.

A run waits for one thing at a time: when several waits are gathered, the
first that suspends ends the delivery and the others wait in turn on
replay.
"""

from __future__ import annotations

import datetime as _dt
import math
from collections.abc import Coroutine
from typing import Any

from durable.decorators.context import RunContext, current_run
from durable.decorators.journal import SIGNAL, SLEEP, Entry
from durable.decorators.suspend import Suspend
from durable.engine.outcomes import After, OnSignal
from durable.errors import InvalidArgument

__all__ = [
    "FOREVER",
    "SIGNAL_NAME",
    "SLEEP_NAME",
    "resolve_signal",
    "sleep",
    "wait_for_signal",
]

SLEEP_NAME = "durable.sleep"
SIGNAL_NAME = "durable.wait_for_signal"
#: The timeout of a wait without one: ten years.
FOREVER = 10 * 365 * 86400.0
_SLEEP = frozenset({SLEEP})
_SIGNAL = frozenset({SIGNAL})


def _seconds(what: str, value: object, *, positive: bool = False) -> float:
    if isinstance(value, _dt.timedelta):
        value = value.total_seconds()
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise InvalidArgument(f"{what} takes seconds (a number) or a timedelta, got {value!r}")
    if value < 0 or (positive and value == 0):
        raise InvalidArgument(f"{what} must be {'positive' if positive else '>= 0'}, got {value!r}")
    return float(value)


def sleep(seconds: float | _dt.timedelta) -> Coroutine[Any, Any, None]:
    """Wait ``seconds`` (or a timedelta) of the engine's clock, durably: the
    run holds no worker meanwhile and survives restarts. Only in a workflow."""
    run = current_run("durable.sleep()")
    delay = _seconds("durable.sleep()", seconds)
    return _sleep(run, run.next_position(), delay)


async def _sleep(run: RunContext, position: int, delay: float) -> None:
    task = run.track()
    try:
        entry = run.entry_at(position, _SLEEP, SLEEP_NAME, SLEEP_NAME)
        if entry is None:
            wake = run.clock.now_ms() + round(delay * 1000)
            entry = await run.record(position, Entry(SLEEP_NAME, SLEEP, time=wake))
        remaining = entry.time - run.clock.now_ms()
        if remaining > 0:
            raise Suspend(After(remaining / 1000))
    finally:
        run.untrack(task)


def wait_for_signal(
    key: str, timeout: float | _dt.timedelta | None = None
) -> Coroutine[Any, Any, Any]:
    """Wait durably for the value sent by ``engine.signal(key, value)``, at
    most ``timeout`` seconds (None: without limit); returns the value, or
    None at the timeout. Only in a workflow; one waiting run per key."""
    run = current_run("durable.wait_for_signal()")
    if not isinstance(key, str) or not key:
        raise InvalidArgument(f"a signal key must be a non-empty str, got {key!r}")
    limit = (
        FOREVER if timeout is None else _seconds("wait_for_signal timeout", timeout, positive=True)
    )
    return _wait(run, run.next_position(), key, limit)


async def _wait(run: RunContext, position: int, key: str, limit: float) -> Any:
    task = run.track()
    try:
        new = f"{SIGNAL_NAME}({key!r})"
        entry = run.entry_at(position, _SIGNAL, SIGNAL_NAME, new)
        if entry is not None and entry.key != key:
            raise run.nondeterministic(position, f"{SIGNAL_NAME}({entry.key!r})", new)
        if entry is not None and entry.resolved:
            return await run.replay(position, entry)
        now = run.clock.now_ms()
        deadline = entry.time if entry is not None else now + round(limit * 1000)
        if deadline <= now:  # timed out while the run was not waiting on it
            pending = Entry(SIGNAL_NAME, SIGNAL, key=key)
            recorded = await resolve_signal(run, position, pending, None)
            return await run.replay(position, recorded)
        step = run.delivery.step_number
        pending = Entry(SIGNAL_NAME, SIGNAL, time=deadline, key=key, suspended=step)
        raise Suspend(OnSignal(key, (deadline - now) / 1000), position, pending)
    finally:
        run.untrack(task)


async def resolve_signal(
    run: RunContext, position: int, entry: Entry, signal: bytes | None
) -> Entry:
    """Journal what ended the wait at ``position``: ``signal``, or None (a
    timeout). The runner calls it when the delivery that the wait resumed
    starts, before the workflow runs (the delivery's signal is gone after it)."""
    ok = signal if signal is not None else run.codec.dumps(None, what="a signal timeout")
    return await run.record(position, entry.replace(ok=ok))
