"""`Follower`: keeps a `LogReader` caught up, in the background.

A task polls the reader (`LogReader.poll`, the cheap GET tail) at the pace
of a `durable.store.pacing.Pacer`: every ``busy`` seconds while someone
waits (on a key of the reader's `LogReader.watchers`, which wakes the
follower, or holding `Follower.keep_busy`) or called `Follower.wake`, and
for ``linger`` seconds after; then it waits ``backoff`` times longer after
each poll, up to ``idle``. New commits that nobody waits for do not bring
back the busy pace: a view nobody waits on trails the log by up to
``idle`` (following a busy log every 2 ms cost each idle client and
standby more CPU than the owner spent running the work). The defaults
depend on the backend (`durable.store.pacing.default_pacing`):

| backend | busy | linger | idle | idle requests per second |
|---|---|---|---|---|
| local directory, memory | 2 ms | 1 s | 50 ms | 20 GETs, 2 LISTs of ``ckpt/`` |
| object stores | 0.2 s | 0 | 5 s | 0.2 GETs, a LIST of ``ckpt/`` every 50 s |

(A GET of a missing file is one failed ``open``; the LIST, one ``scandir``
of ``ckpt/``: one LIST per `LogReader.list_every` empty polls.)

The interval runs on the event loop's time, not on an injected `Clock`: it
is I/O pacing, like the log's write retries, so tests on a `MockClock` see
commits without advancing it.

A poll that fails (after the reader's own retries of transient errors) is
logged and tried again after a delay that doubles from ``busy`` up to
``max(idle, 5 s)``; it never ends the loop. Stopping the follower fails
nothing: the reader's watchers stay registered, and a later poll (the
follower started again, or a `LogReader.refresh`) resolves them. Only a
closed reader ends the loop, failing the `Follower.refreshed` waiters with
`StoreClosed`.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
from collections.abc import Iterator

from durable._logging import get_logger
from durable.errors import StoreClosed
from durable.store.clock import Clock
from durable.store.log.reader import LogReader
from durable.store.pacing import Pacer, Pacing, default_pacing

__all__ = ["Follower"]

log = get_logger("durable.store.log")

#: Failed polls back off up to ``max(idle, this)`` seconds.
MAX_ERROR_DELAY = 5.0


def _seconds(value: object, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
        raise ValueError(f"Follower {what} must be a number of seconds > 0, got {value!r}")
    if not math.isfinite(value):
        raise ValueError(f"Follower {what} must be finite, got {value!r}")
    return float(value)


class Follower:
    """Polls ``reader`` in the background; see the module docstring.

    ``busy``, ``idle`` and ``linger`` default by backend
    (`durable.store.pacing.default_pacing`); ``idle`` must be at least
    ``busy``, and ``backoff`` (the factor the interval grows by per empty
    poll) at least 1. ``clock``, if given, stamps `last_refresh_ms`; it
    does not pace the polls.
    """

    def __init__(
        self,
        reader: LogReader,
        clock: Clock | None = None,
        *,
        busy: float | None = None,
        idle: float | None = None,
        backoff: float = 2.0,
        linger: float | None = None,
    ) -> None:
        defaults = default_pacing(reader.objects)
        self.reader = reader
        self.clock = clock
        busy = _seconds(defaults.busy if busy is None else busy, "busy")
        idle = _seconds(max(defaults.idle, busy) if idle is None else idle, "idle")
        if idle < busy:
            raise ValueError(f"Follower idle ({idle} s) must be >= busy ({busy} s)")
        if isinstance(backoff, bool) or not isinstance(backoff, int | float) or not backoff >= 1:
            raise ValueError(f"Follower backoff must be a number >= 1, got {backoff!r}")
        if linger is None:
            linger = defaults.linger
        elif isinstance(linger, bool) or not isinstance(linger, int | float) or not linger >= 0:
            raise ValueError(f"Follower linger must be a number of seconds >= 0, got {linger!r}")
        self._pacer = Pacer(Pacing(busy, idle, float(backoff), float(linger)))
        reader.watchers.on_watch = self.wake  # a caller waits: poll at once, then busy
        #: Polls done, and polls that failed, since construction.
        self.polls = 0
        self.errors = 0
        #: `clock`'s time when the last successful poll began (None: none yet,
        #: or no clock given).
        self.last_refresh_ms: int | None = None
        self._next: list[asyncio.Future[None]] = []
        self._task: asyncio.Task[None] | None = None

    # ------------------------------------------------------------------ API

    @property
    def running(self) -> bool:
        """Whether the background task runs (started, not stopped, reader open)."""
        return self._task is not None and not self._task.done()

    @property
    def pacing(self) -> Pacing:
        """The poll intervals (`durable.store.pacing.Pacing`)."""
        return self._pacer.pacing

    @property
    def busy(self) -> float:
        """The poll interval while something happens (seconds)."""
        return self._pacer.pacing.busy

    @property
    def idle(self) -> float:
        """The longest interval, reached after enough empty polls (seconds)."""
        return self._pacer.pacing.idle

    @property
    def backoff(self) -> float:
        """The factor the interval grows by per empty poll."""
        return self._pacer.pacing.backoff

    @property
    def linger(self) -> float:
        """Seconds the busy pace lasts after the last activity."""
        return self._pacer.pacing.linger

    @property
    def interval(self) -> float:
        """The seconds the follower waits after its last poll (unless woken)."""
        return self._pacer.interval

    def start(self) -> None:
        """Start polling now (the first poll runs at once). Idempotent."""
        if self.running:
            return
        self._task = asyncio.get_running_loop().create_task(
            self._run(), name=f"durable-follow {self.reader.url}"
        )

    async def stop(self) -> None:
        """Stop polling; fails nothing (see the module docstring). Idempotent."""
        task, self._task = self._task, None
        if task is not None and not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    def wake(self) -> None:
        """Poll as soon as the poll in progress (if any) is done, and at the
        busy pace from then on until polls find nothing new again (for
        ``linger`` seconds)."""
        self._pacer.wake()

    @contextlib.contextmanager
    def keep_busy(self) -> Iterator[None]:
        """Poll at the busy pace while this is held (e.g. while a caller waits
        on a watcher of the reader); entering it wakes the follower."""
        with self._pacer.keep_busy():
            yield

    async def refreshed(self) -> None:
        """Wait until a poll that begins after this call has completed.

        Failed polls do not count: it waits for one that succeeds. It does
        not wake the follower (call `wake` for that). A wait outlives `stop`
        and completes after a later `start`; `StoreClosed` once the reader
        is closed.
        """
        if self.reader.closed:
            raise StoreClosed(self.reader.url)
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._next.append(fut)
        try:
            await fut
        finally:
            if not fut.done():
                with contextlib.suppress(ValueError):
                    self._next.remove(fut)

    # ------------------------------------------------------------- the loop

    async def _run(self) -> None:
        failures = 0
        pacer = self._pacer
        while True:
            pacer.begin()
            waiters, self._next = self._next, []
            started = self.clock.now_ms() if self.clock is not None else None
            self.polls += 1
            try:
                await self.reader.poll()
            except Exception as e:
                self._next[:0] = waiters  # they wait for a poll that succeeds
                if self.reader.closed:
                    self._close(e)
                    return
                failures += 1
                self.errors += 1
                delay = min(self.busy * 2.0**failures, max(self.idle, MAX_ERROR_DELAY))
                log.warning("view poll failed", url=self.reader.url, error=str(e), retry_in=delay)
            else:
                failures = 0
                if started is not None:
                    self.last_refresh_ms = started
                # Busy while someone waits on a key of the reader; news that
                # nobody waits for is applied at the idle pace.
                delay = pacer.polled(found=bool(self.reader.watchers))
                for fut in waiters:
                    if not fut.done():
                        fut.set_result(None)
            await pacer.sleep(delay)

    def _close(self, error: BaseException) -> None:
        log.debug("follower stopped: reader closed", url=self.reader.url)
        failure = error if isinstance(error, StoreClosed) else StoreClosed(self.reader.url)
        waiters, self._next = self._next, []
        for fut in waiters:
            if not fut.done():
                fut.set_exception(failure)
