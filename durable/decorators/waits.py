"""Durable waits: ``durable.sleep`` and ``durable.wait_for_signal``.

Both take the next journal position when called, like a step, and run on
the engine's clock. A wait that cannot complete at once *parks* (see
`durable.decorators.parking`): the rest of the workflow goes on (steps
gathered with the wait run and are journaled), and once nothing else is
running the delivery ends with a trigger that wakes the run (a waiting
run holds no worker).

- ``sleep(seconds)`` journals its wake-up time. A replay after that time
  returns at once; before it, the wait parks for the remainder.
- ``wait_for_signal(key, timeout)`` journals its deadline and parks until
  ``engine.signal(key, value)`` delivers a value (a signal sent before the
  wait is buffered and taken) or ``timeout`` seconds pass. The delivery
  that the signal resumes journals it before the workflow runs
  (`resolve_signal`), so every later replay returns the same; a timeout
  journals None.

Gathered waits wait together: ``asyncio.gather(durable.sleep(10),
durable.sleep(20))`` takes 20 s, and a signal wait gathered with a sleep
returns when the signal comes or when its own timeout passes, whichever is
first. A suspended run waits on one signal key at a time: the signals sent
meanwhile to its other waits' keys are buffered, and each is taken when the
run waits on its key (nothing is lost).
"""

from __future__ import annotations

import datetime as _dt
import math
from collections.abc import Coroutine
from typing import Any, TypeVar, overload

from durable.decorators.context import RunContext, current_run
from durable.decorators.journal import SIGNAL, SLEEP, Entry
from durable.decorators.parking import FOREVER
from durable.decorators.typed import from_plain
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
T = TypeVar("T")
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
        if entry.time > run.clock.now_ms():
            await run.park(position, entry.time)  # returns once that time has passed
    finally:
        run.untrack(task)


@overload
def wait_for_signal(
    key: str, timeout: float | _dt.timedelta | None = None
) -> Coroutine[Any, Any, Any]: ...
@overload
def wait_for_signal(key: str, timeout: None = None, *, type: type[T]) -> Coroutine[Any, Any, T]: ...
@overload
def wait_for_signal(
    key: str, timeout: float | _dt.timedelta, *, type: type[T]
) -> Coroutine[Any, Any, T | None]: ...
def wait_for_signal(
    key: str, timeout: float | _dt.timedelta | None = None, *, type: Any = Any
) -> Coroutine[Any, Any, Any]:
    """Wait durably for the value sent by ``engine.signal(key, value)``, at
    most ``timeout`` seconds (None: without limit); returns the value, or
    None at the timeout. Only in a workflow; one waiting run per key.

    ``type=T`` validates the value into ``T`` (a dataclass, a Pydantic
    model, ``list[Model]``, ``int``...; `durable.decorators.typed`), on the
    first run as on a replay: a value that does not fit raises
    `TypeMismatch` naming the run and the key. With a ``timeout`` the
    result may also be None (the timeout)."""
    run = current_run("durable.wait_for_signal()")
    if not isinstance(key, str) or not key:
        raise InvalidArgument(f"a signal key must be a non-empty str, got {key!r}")
    limit = (
        FOREVER if timeout is None else _seconds("wait_for_signal timeout", timeout, positive=True)
    )
    waited = _wait(run, run.next_position(), key, limit)
    if type is Any:
        return waited
    return _typed_signal(waited, type, run.run_id, key, timeout is not None)


async def _typed_signal(
    waited: Coroutine[Any, Any, Any], expected: Any, run_id: str, key: str, may_time_out: bool
) -> Any:
    value = await waited
    if value is None and may_time_out:
        return None
    what = f"the signal {key!r} run {run_id!r} waited for"
    return from_plain(value, expected, what, strict=True)


async def _wait(run: RunContext, position: int, key: str, limit: float) -> Any:
    task = run.track()
    try:
        new = f"{SIGNAL_NAME}({key!r})"
        entry = run.entry_at(position, _SIGNAL, SIGNAL_NAME, new)
        if entry is not None and entry.key != key:
            raise run.nondeterministic(position, f"{SIGNAL_NAME}({entry.key!r})", new)
        if entry is not None and entry.resolved:
            return await run.replay(position, entry)
        if entry is None:  # the first time: journal the deadline, like a sleep's wake-up
            deadline = run.clock.now_ms() + round(limit * 1000)
            entry = await run.record(position, Entry(SIGNAL_NAME, SIGNAL, time=deadline, key=key))
        if entry.time > run.clock.now_ms() or run.signal_buffered(key):
            pending = entry.replace(suspended=run.delivery.step_number)
            await run.park(position, entry.time, key=key, pending=pending)
        # The deadline has passed with no signal for the key: the wait timed out.
        recorded = await resolve_signal(run, position, entry.replace(suspended=None), None)
        return await run.replay(position, recorded)
    finally:
        run.untrack(task)


async def resolve_signal(
    run: RunContext, position: int, entry: Entry, signal: bytes | None
) -> Entry:
    """Journal what ended the wait at ``position``: ``signal``, or None (a
    timeout). The runner calls it when the delivery that the wait resumed
    starts, before the workflow runs (the delivery's signal is gone after
    it); the wait itself, when its deadline passes while the run is in a
    delivery."""
    ok = signal if signal is not None else run.codec.dumps(None, what="a signal timeout")
    return await run.record(position, entry.replace(ok=ok))
