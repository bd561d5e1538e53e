"""Sync bodies: plain ``def`` steps and jobs, run in the engine's thread pool.

```python
@step(max_attempts=3, timeout=10)
def fetch(url: str) -> bytes:          # blocking code: requests, a DB driver...
    return requests.get(url).content

@workflow
async def crawl(url: str) -> int:     # a workflow is always `async def`
    return len(await fetch(url))       # a sync step is awaited like any other

async with Engine(url, sync_threads=8): ...
```

A ``@step`` or ``@job`` on a plain function runs its body in a thread of
the engine's `SyncThreads` pool (``Engine(sync_threads=N)``, default
`DEFAULT_SYNC_THREADS`, 16), so a body that blocks never stalls the event
loop: other runs, heartbeats and leases go on meanwhile. Everything else
is the same as for an ``async def`` body: the journal (a replay returns the
recorded result without running the body again), retries, ``timeout``,
``at_most_once``, executors (a ``def`` body named for the Dask executor
runs on the cluster, not in this pool).

At most N bodies run at once per engine; the next waits for a thread.
The body runs in a copy of the caller's context (``durable.run_id()``
works there); workflow calls that must be awaited (steps, waits) do not.

**A timeout cannot stop a thread.** When an attempt times out (or the run
is cancelled, or the engine stops) the attempt is *abandoned*: the step or
job goes on at once (``TimeoutError``, then its retry policy), the body
runs on to its end in its thread, unobserved, and its result or exception
is discarded. Meanwhile it holds one of the pool's threads, and the
process waits for it at exit (Python joins pool threads then). A body
that may hang should bound its own blocking calls (a socket timeout, say).

A ``def`` *workflow* is refused (`DecoratorError` naming it): its body
awaits its steps and waits, so it must be ``async def``.
"""

from __future__ import annotations

import asyncio
import inspect
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from contextvars import Context, copy_context
from typing import Any

from durable.errors import InvalidArgument

__all__ = ["DEFAULT_SYNC_THREADS", "SyncThreads", "check_sync_threads", "is_sync"]

#: Threads of ``Engine(sync_threads=...)`` when not given.
DEFAULT_SYNC_THREADS = 16


def is_sync(fn: Callable[..., Any]) -> bool:
    """True when calling ``fn`` runs its body (a plain function), not a coroutine's."""
    if inspect.iscoroutinefunction(fn):
        return False
    call = getattr(fn, "__call__", None)  # noqa: B004 (an object whose __call__ is async)
    return not (call is not None and inspect.iscoroutinefunction(call))


def check_sync_threads(n: object) -> int:
    """``n`` if it is a usable pool size (an int >= 1), else `InvalidArgument`."""
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise InvalidArgument(
            f"sync_threads must be an int >= 1 (threads running plain `def` step and job "
            f"bodies at once), got {n!r}"
        )
    return n


class SyncThreads:
    """The thread pool of an engine's ``def`` bodies; see the module docstring.

    The pool starts with the first call and is shut down by `shutdown`
    (without waiting for abandoned bodies); a later call starts a new one.
    """

    def __init__(self, size: int = DEFAULT_SYNC_THREADS) -> None:
        #: Bodies that run at once, at most.
        self.size = check_sync_threads(size)
        self._pool: ThreadPoolExecutor | None = None
        self._lock = threading.Lock()
        self._waiting = 0
        self._running = 0

    def __repr__(self) -> str:
        return f"<SyncThreads size={self.size} running={self._running} waiting={self._waiting}>"

    @property
    def running(self) -> int:
        """Bodies running in the pool's threads now (abandoned ones included)."""
        return self._running

    @property
    def waiting(self) -> int:
        """Calls waiting for a thread now."""
        return self._waiting

    def _run(
        self,
        context: Context,
        fn: Callable[..., Any],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
    ) -> Any:
        with self._lock:
            self._waiting -= 1
            self._running += 1
        try:
            return context.run(fn, *args, **kwargs)
        finally:
            with self._lock:
                self._running -= 1

    async def call(
        self, fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> Any:
        """``fn(*args, **kwargs)`` in a thread of the pool, in a copy of this
        context; its result or exception. Cancelling the await abandons the
        call: it does not start if it still waits for a thread, else it runs
        on and its outcome is discarded."""
        if self._pool is None:
            self._pool = ThreadPoolExecutor(self.size, thread_name_prefix="durable-sync")
        with self._lock:
            self._waiting += 1
        future = self._pool.submit(self._run, copy_context(), fn, args, kwargs)
        future.add_done_callback(self._dropped)
        try:
            return await asyncio.wrap_future(future)
        except asyncio.CancelledError:
            future.cancel()  # never starts if it still waits for a thread
            raise

    def _dropped(self, future: Future[Any]) -> None:
        if future.cancelled():  # it never ran
            with self._lock:
                self._waiting -= 1

    def shutdown(self) -> None:
        """Stop the pool: calls that wait for a thread never start; running
        ones end in their threads unobserved (not waited for)."""
        pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=False, cancel_futures=True)
