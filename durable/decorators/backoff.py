"""`Backoff`: how long a ``@step`` waits between attempts.

The delay before attempt ``n + 1`` (after attempt ``n`` failed) is
``min(max, initial * factor ** (n - 1))``, then, with ``jitter`` ``j``
between 0 and 1, shortened by a random share of up to ``j`` of it (so it
falls in ``[(1 - j) * delay, delay]``). Delays are seconds of the engine's
clock.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from dataclasses import dataclass

from durable.errors import DecoratorError

__all__ = ["Backoff"]


def _number(name: str, value: object, *, low: float, high: float = math.inf) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise DecoratorError(f"Backoff.{name} must be a number, got {value!r}")
    if not math.isfinite(value) or not low <= value <= high:
        bound = f"between {low} and {high}" if math.isfinite(high) else f">= {low}"
        raise DecoratorError(f"Backoff.{name} must be a finite number {bound}, got {value!r}")
    return float(value)


@dataclass(frozen=True, slots=True)
class Backoff:
    """Exponential backoff between a step's attempts; see the module docstring."""

    #: Seconds before the second attempt.
    initial: float = 1.0
    #: Each further delay is this many times the previous one (>= 1).
    factor: float = 2.0
    #: No delay is longer than this many seconds.
    max: float = 60.0
    #: Share of each delay (0 to 1) that is randomly cut off.
    jitter: float = 0.0

    def __post_init__(self) -> None:
        _number("initial", self.initial, low=0.0)
        _number("factor", self.factor, low=1.0)
        _number("max", self.max, low=0.0)
        _number("jitter", self.jitter, low=0.0, high=1.0)

    def delay(self, attempt: int, *, rand: Callable[[], float] = random.random) -> float:
        """Seconds to wait after failed attempt ``attempt`` (1-based) before the next.

        ``rand`` gives the jitter's random share in ``[0, 1)``.
        """
        if attempt < 1:
            raise ValueError(f"attempt numbers start at 1, got {attempt}")
        exponent = attempt - 1
        try:
            base = self.initial * self.factor**exponent
        except OverflowError:
            base = math.inf
        delay = min(self.max, base)
        if self.jitter:
            delay *= 1.0 - self.jitter * rand()
        return delay
