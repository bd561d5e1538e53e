"""A step's attempts: its retry policy and its per-attempt timeout.

`RetryPolicy` says how often a ``@step`` runs before its error stands
(``max_attempts``), how long it waits in between (`Backoff`), which errors
are worth another attempt (``retry_on``, and `WorkerLost` always; any
other error ends the step at once) and how long one attempt may take
(``timeout``). Every wait reads the engine's clock: a `MockClock` drives
retries and timeouts in tests.

The waits happen inside the workflow's delivery, which holds its worker
meanwhile: keep backoffs short, and wait longer with ``durable.sleep``
between steps.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any, TypeVar

from durable._logging import get_logger
from durable.decorators.backoff import Backoff
from durable.errors import DecoratorError, WorkerLost
from durable.store.clock import Clock

__all__ = ["RetryPolicy", "call_with_timeout", "run_attempts"]

log = get_logger("durable.decorators")

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """How a step is attempted; see the module docstring."""

    max_attempts: int = 1
    backoff: Backoff = field(default_factory=Backoff)
    retry_on: tuple[type[BaseException], ...] = (Exception,)
    #: Seconds one attempt may take; None: no limit.
    timeout: float | None = None

    def __post_init__(self) -> None:
        n = self.max_attempts
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise DecoratorError(f"max_attempts must be an int >= 1, got {n!r}")
        if not isinstance(self.backoff, Backoff):
            raise DecoratorError(
                f"backoff must be a durable.Backoff(initial=..., factor=..., max=...), "
                f"got {self.backoff!r}"
            )
        retry_on = self.retry_on
        if not isinstance(retry_on, tuple) or not all(
            isinstance(t, type) and issubclass(t, Exception) for t in retry_on
        ):
            raise DecoratorError(
                f"retry_on must be an exception class or a tuple of them, got {retry_on!r}"
            )
        t = self.timeout
        if t is not None and (
            isinstance(t, bool) or not isinstance(t, int | float) or not math.isfinite(t) or t <= 0
        ):
            raise DecoratorError(f"timeout must be None or a positive number of seconds, got {t!r}")

    def retries(self, error: BaseException, attempt: int) -> bool:
        """Whether ``error`` from attempt ``attempt`` gets another attempt (a
        lost worker does, whatever ``retry_on``: it is no fault of the body)."""
        return attempt < self.max_attempts and isinstance(error, (*self.retry_on, WorkerLost))


async def call_with_timeout(
    clock: Clock, call: Callable[[], Coroutine[Any, Any, T]], limit: float | None, what: str
) -> T:
    """``await call()``, cancelled with `TimeoutError` after ``limit`` seconds
    of ``clock`` (None: no limit)."""
    if limit is None:
        return await call()
    task = asyncio.ensure_future(call())
    timer = asyncio.ensure_future(clock.sleep(limit))
    try:
        await asyncio.wait({task, timer}, return_when=asyncio.FIRST_COMPLETED)
    except BaseException:
        task.cancel()
        timer.cancel()
        await asyncio.gather(task, timer, return_exceptions=True)
        raise
    if task.done():
        timer.cancel()
        await asyncio.gather(timer, return_exceptions=True)
        return task.result()
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    raise TimeoutError(f"{what} did not finish within {limit} s")


async def run_attempts(
    policy: RetryPolicy,
    clock: Clock,
    call: Callable[[], Coroutine[Any, Any, T]],
    what: str,
    *,
    before: Callable[[], None] | None = None,
    on_retry: Callable[[int, float, Exception], None] | None = None,
) -> T:
    """Attempt ``call`` per ``policy``; the first result, or the last error.

    ``before()`` runs before each attempt; what it raises propagates at
    once (no retry). ``on_retry(attempt, delay, error)`` is told of each
    failed attempt that gets another."""
    attempt = 1
    while True:
        if before is not None:
            before()
        try:
            return await call_with_timeout(clock, call, policy.timeout, what)
        except Exception as error:
            if not policy.retries(error, attempt):
                raise
            delay = policy.backoff.delay(attempt)
            log.info(
                "step attempt failed", step=what, attempt=attempt, retry_in=delay, error=repr(error)
            )
            if on_retry is not None:
                on_retry(attempt, delay, error)
        await clock.sleep(delay)
        attempt += 1
