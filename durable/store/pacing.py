"""`Pacing` and `Pacer`: how often a background loop polls the store.

Two loops poll a store for what other processes wrote: the owner's
`durable.cluster.applier.InboxApplier` (a LIST of the inbox) and a
client's `durable.store.log.follow.Follower` (a GET of the log's next
object). Both poll every ``busy`` seconds while something happens (the
last poll found something, someone called `Pacer.wake`, or someone holds
`Pacer.keep_busy`), keep that pace for ``linger`` seconds after the last
such event, then wait ``backoff`` times longer after each empty poll, up to
``idle``. The defaults depend on the backend (`ObjectStore.is_local`):

| backend | busy | linger | idle | idle polls per second |
|---|---|---|---|---|
| local directory, memory | 2 ms | 1 s | 50 ms | 20 |
| object stores | 0.2 s | 0 | 5 s | 0.2 |

On a local directory a poll is cheap but its wake-up is not: a loop that
polled every 2 ms for ever cost 14-20% of a core per process while idle
(`benchmarks/bench_clients.py`), one waking every 50 ms about 1%. The
linger keeps back-to-back requests (a caller that starts a run as soon as
the last one returned) at the busy pace; the first request after a quiet
second waits at most ``idle`` for the next poll.

The intervals run on the event loop's time, not on an injected clock:
they pace I/O, like the log's write retries, so tests on a `MockClock` see
what other processes wrote without advancing it.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
from collections.abc import Iterator
from dataclasses import dataclass

from durable.errors import InvalidArgument
from durable.store.objects.base import ObjectStore

__all__ = ["LOCAL_PACING", "OBJECT_STORE_PACING", "Pacer", "Pacing", "default_pacing"]


@dataclass(frozen=True, slots=True)
class Pacing:
    """Poll every ``busy`` seconds while something happens and for
    ``linger`` seconds after, then ``backoff`` times longer after each empty
    poll, up to ``idle``; see the module docstring."""

    busy: float
    idle: float
    backoff: float = 2.0
    linger: float = 0.0

    def __post_init__(self) -> None:
        for name in ("busy", "idle", "backoff", "linger"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise InvalidArgument(f"pacing {name} must be a number, got {value!r}")
            if not math.isfinite(value):
                raise InvalidArgument(f"pacing {name} must be finite, got {value!r}")
        if not 0 < self.busy <= self.idle:
            raise InvalidArgument(f"need 0 < busy <= idle, got {self.busy!r}, {self.idle!r}")
        if self.backoff < 1:
            raise InvalidArgument(f"backoff must be >= 1, got {self.backoff!r}")
        if self.linger < 0:
            raise InvalidArgument(f"linger must be >= 0 seconds, got {self.linger!r}")

    def next_interval(self, previous: float, *, found: bool, quiet_for: float = math.inf) -> float:
        """The wait before the next poll, after one that waited ``previous``:
        ``busy`` when the poll found something or the last activity was less
        than ``linger`` seconds ago (``quiet_for``), else ``previous *
        backoff`` up to ``idle``."""
        if found or quiet_for < self.linger:
            return self.busy
        return min(self.idle, max(previous, self.busy) * self.backoff)


#: A local directory or memory: busy every 2 ms for a second after the last
#: activity, then backing off to 50 ms.
LOCAL_PACING = Pacing(busy=0.002, idle=0.05, linger=1.0)
#: Object stores: 0.2 s while busy, backing off x2 to 5 s.
OBJECT_STORE_PACING = Pacing(busy=0.2, idle=5.0)


def default_pacing(objects: ObjectStore) -> Pacing:
    """`LOCAL_PACING` where requests are cheap (`ObjectStore.is_local`),
    else `OBJECT_STORE_PACING`."""
    return LOCAL_PACING if objects.is_local else OBJECT_STORE_PACING


class Pacer:
    """The waits of one polling loop under ``pacing`` (which may be
    replaced at any time: it is read at every poll).

    The loop calls `begin` as a poll starts, `polled` once it succeeded
    (which gives the wait before the next one) and `sleep` to wait; others
    call `wake` or hold `keep_busy`.
    """

    def __init__(self, pacing: Pacing) -> None:
        #: The intervals in force.
        self.pacing = pacing
        #: The wait after the last poll (seconds).
        self.interval = pacing.busy
        self._holds = 0
        self._woken = asyncio.Event()
        self._active_at = -math.inf

    @property
    def busy(self) -> bool:
        """Whether someone holds `keep_busy`."""
        return self._holds > 0

    @property
    def woken(self) -> bool:
        """Whether `wake` was called since the poll in progress began."""
        return self._woken.is_set()

    def wake(self) -> None:
        """Poll as soon as the poll in progress (if any) is done, and at the
        busy pace from then on (for ``linger`` seconds)."""
        self.interval = self.pacing.busy
        self._active_at = _now()
        self._woken.set()

    @contextlib.contextmanager
    def keep_busy(self) -> Iterator[None]:
        """Poll at the busy pace while this is held; entering it wakes the loop."""
        self._holds += 1
        self.wake()
        try:
            yield
        finally:
            self._holds -= 1
            self._active_at = _now()

    def begin(self) -> None:
        """A poll starts: a `wake` from now on asks for another one."""
        self._woken.clear()

    def polled(self, *, found: bool) -> float:
        """Record a poll that succeeded (``found``: it found something) and
        return the wait before the next one."""
        now = _now()
        if found or self._holds or self._woken.is_set():
            self._active_at = now
        self.interval = self.pacing.next_interval(
            self.interval, found=found or self._holds > 0, quiet_for=now - self._active_at
        )
        return self.interval

    async def sleep(self, delay: float) -> None:
        """Wait ``delay`` seconds of the loop's time, or until `wake`."""
        if self._woken.is_set():
            return
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(delay):
                await self._woken.wait()


def _now() -> float:
    return time.monotonic()  # the event loop's time (`asyncio` loops use it)
