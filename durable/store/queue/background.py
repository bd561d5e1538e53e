"""The tasks an open queue runs: reaper, scheduler, fence check and liveness heartbeat.

Each loop sleeps on the store's `Clock`, so `MockClock.advance` drives
them. Errors are logged and the loop goes on; a loop ends when the writer
has stopped (fenced or failed) or the queue closes. The fence check
(`LogWriter.check_fenced`) stops a writer that another process fenced while
it was idle, which fails every pending wait on the store with `Fenced`.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable

from durable._logging import get_logger
from durable.store.queue import keys
from durable.store.queue.core import Core
from durable.store.queue.heartbeat import Heartbeat, encode_heartbeat, read_heartbeat
from durable.store.queue.maintenance import Maintenance
from durable.store.queue.options import to_ms

__all__ = ["Background"]

log = get_logger("durable.store.queue")


class Background:
    """Start and stop the loops of one open queue."""

    def __init__(self, core: Core, maintenance: Maintenance, epoch: int) -> None:
        self.core = core
        self.maintenance = maintenance
        self.epoch = epoch
        self._tasks: list[asyncio.Task[None]] = []
        stored = read_heartbeat(core.state)
        self._beat_counter = stored.counter if stored is not None else 0

    async def start(self) -> None:
        """Write the first beat (if configured) and start every loop."""
        opts = self.core.options
        if opts.liveness_heartbeat is not None:
            await self.beat(closed=False)  # durable before open returns
            self._spawn(self._every(opts.liveness_heartbeat, self._beat_tick), "heartbeat")
        self._spawn(self._every(opts.reaper_interval, self._reaper_tick), "reaper")
        self._spawn(self._every(opts.scheduler_interval, self._scheduler_tick), "scheduler")
        if opts.fence_check_interval is not None:
            self._spawn(self._every(opts.fence_check_interval, self._fence_tick), "fence-check")

    async def stop(self) -> None:
        """Stop every loop; write a closing beat (best effort)."""
        for t in self._tasks:
            t.cancel()
        for t in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await t
        self._tasks.clear()
        if self.core.options.liveness_heartbeat is not None and self.core.writer.failure is None:
            try:
                await self.beat(closed=True)
            except Exception as e:
                log.warning("closing heartbeat failed", error=str(e))

    async def beat(self, *, closed: bool) -> None:
        """Write the next heartbeat durably (the counter advances even if it fails)."""
        self._beat_counter += 1
        interval = self.core.options.liveness_heartbeat or 0.0
        value = encode_heartbeat(
            Heartbeat(self._beat_counter, self.core.now(), to_ms(interval), self.epoch, closed)
        )
        txn = self.core.txn()
        txn.put(keys.heartbeat_key(), value)
        durable = txn.commit(self.core.writer)
        if durable is not None:
            await durable

    def _spawn(self, coro: Awaitable[None], name: str) -> None:
        url = self.core.writer.url
        self._tasks.append(asyncio.ensure_future(coro))
        self._tasks[-1].set_name(f"durable-queue-{name} {url}")

    async def _every(self, seconds: float, tick: Callable[[], Awaitable[None]]) -> None:
        clock = self.core.clock
        while True:
            await clock.sleep(seconds)
            if self.core.writer.failure is not None:
                return
            try:
                await tick()
            except Exception as e:
                log.error("background tick failed", tick=tick.__name__, error=str(e))

    async def _reaper_tick(self) -> None:
        m = self.maintenance
        m.reap_expired()
        m.sweep_done()
        m.sweep_dead()

    async def _scheduler_tick(self) -> None:
        self.maintenance.promote_due()

    async def _fence_tick(self) -> None:
        await self.core.writer.check_fenced()

    async def _beat_tick(self) -> None:
        await self.beat(closed=False)
