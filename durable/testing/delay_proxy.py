"""A TCP proxy on 127.0.0.1 that adds a fixed delay in each direction.

Put it in front of a local emulator to see what a cloud round trip does to
the store: ``DelayProxy(target_port, delay=0.010)`` adds 10 ms each way, a
20 ms round trip. Bytes are delayed, not throttled: every chunk is
forwarded ``delay`` seconds after it arrived, in order, so concurrent
requests overlap as they would over a real network.
"""

from __future__ import annotations

import asyncio
import contextlib

__all__ = ["DelayProxy"]


class DelayProxy:
    """Forward ``127.0.0.1:<port>`` to ``host:target_port`` with ``delay`` seconds each way."""

    def __init__(self, target_port: int, *, delay: float, host: str = "127.0.0.1") -> None:
        self.target_port = target_port
        self.host = host
        self.delay = delay
        self.port = 0
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    async def start(self) -> DelayProxy:
        """Listen on a free port of 127.0.0.1 (see `port`)."""
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def close(self) -> None:
        """Stop listening and drop every connection."""
        if self._server is not None:
            self._server.close()
        for t in list(self._tasks):
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._server is not None:
            await self._server.wait_closed()

    async def __aenter__(self) -> DelayProxy:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    @property
    def url(self) -> str:
        """``http://127.0.0.1:<port>``."""
        return f"http://127.0.0.1:{self.port}"

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_r, up_w = await asyncio.open_connection(self.host, self.target_port)
        except OSError:
            writer.close()
            return
        for src, dst in ((reader, up_w), (up_r, writer)):
            t = asyncio.create_task(self._pipe(src, dst))
            self._tasks.add(t)
            t.add_done_callback(self._tasks.discard)

    async def _pipe(self, src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
        loop = asyncio.get_running_loop()
        chunks: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue()

        async def forward() -> None:
            while True:
                due, data = await chunks.get()
                wait = due - loop.time()
                if wait > 0:
                    await asyncio.sleep(wait)
                if not data:
                    break
                dst.write(data)
                await dst.drain()

        sender = asyncio.create_task(forward())
        try:
            while True:
                data = await src.read(65536)
                chunks.put_nowait((loop.time() + self.delay, data))
                if not data:
                    break
            await sender
        except (ConnectionError, asyncio.CancelledError):
            sender.cancel()
        finally:
            with contextlib.suppress(Exception):
                dst.close()
