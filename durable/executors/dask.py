"""`DaskExecutor`: step and job bodies on a Dask ``distributed`` cluster.

The only module of `durable` that imports ``distributed`` (install the
``dask`` extra: ``pip install 'durable[dask]'``). ``Engine(url,
executors={"dask": client})`` wraps a ``distributed.Client`` in it; the
engine keeps the journal, replay, durable waits and settlement, and only
the call of the body goes to the cluster:

- each attempt is ``client.submit(_call, fn, args, kwargs, key=key,
  pure=False, retries=0)``; `_call` runs an ``async def`` body under
  ``asyncio.run`` in the worker's thread pool (so a body that blocks never
  stalls the worker's event loop and its heartbeats), a plain function
  directly;
- the body's exception comes back and is classified as an in-process one;
- ``KilledWorker``, ``CommClosedError``, a cancelled future nobody here
  cancelled (the scheduler connection was lost) and a closed client raise
  `durable.errors.WorkerLost`: transient, under the step's retry policy;
- when the awaiting task is cancelled (the run is cancelled, the step
  times out, the delivery ends) the future is cancelled on the cluster and
  its result discarded; a body already running is *not* interrupted (Dask
  cannot stop a thread): it runs to its end, unobserved;
- this client sends its batched messages to the scheduler every
  ``send_interval`` (1 ms) instead of Dask's 10 ms: a workflow's steps run
  one after another, and with Dask's default every step would wait up to
  10 ms for its submission to leave (a sequential no-op task took 10.7 ms
  here, 5.8 ms at 1 ms). Only this client's connection changes (its
  ``scheduler_comm.interval``, set again after a reconnection); the
  scheduler's and workers' own intervals are Dask's;
- on its first call the executor reads the scheduler's
  ``distributed.scheduler.allowed-failures`` (``client.run_on_scheduler``)
  and warns once unless it is 0 (Dask would otherwise re-run the body of a
  killed worker up to that many more times, silently); if the scheduler
  cannot be asked, it reads this process's ``dask.config`` instead and says
  so in the warning.

Bodies and arguments travel by (cloud)pickle: the cluster is in the
engine's trust domain (use TLS), and ``Engine(codec="msgpack")`` refuses a
non-inline executor. A body on the cluster runs outside its workflow:
``durable.run_id()`` and the other workflow calls are not available there.
"""

from __future__ import annotations

import asyncio
import inspect
import secrets
from collections.abc import Callable
from typing import Any

import dask.config
from distributed import Client, KilledWorker
from distributed.client import FutureCancelledError
from distributed.comm.core import CommClosedError

from durable._logging import get_logger
from durable.errors import InvalidArgument, WorkerLost

__all__ = ["DaskExecutor"]

log = get_logger("durable.executors")

_SETTING = "distributed.scheduler.allowed-failures"
#: How often, at most, the executor's client sends to the scheduler (seconds).
DEFAULT_SEND_INTERVAL = 0.001
#: Errors of the cluster, not of the body: the call was lost.
_LOST: tuple[type[BaseException], ...] = (KilledWorker, CommClosedError, FutureCancelledError)


def _call(fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """Run ``fn`` on a worker: a coroutine function under its own event loop
    (this is a thread of the worker's pool), a plain function directly."""
    if inspect.iscoroutinefunction(fn):
        return asyncio.run(fn(*args, **kwargs))
    result = fn(*args, **kwargs)
    if inspect.isawaitable(result):  # e.g. a callable object whose __call__ is async
        return asyncio.run(_await(result))
    return result


async def _await(awaitable: Any) -> Any:
    return await awaitable


def _settle(done: asyncio.Future[None]) -> None:
    if not done.done():
        done.set_result(None)


def _allowed_failures(dask_scheduler: Any) -> int:
    return int(dask_scheduler.allowed_failures)


class DaskExecutor:
    """Runs bodies on the cluster of ``client`` (asynchronous or not); see the
    module docstring. The caller owns the client: the engine never closes it."""

    def __init__(
        self, client: object, *, send_interval: float | None = DEFAULT_SEND_INTERVAL
    ) -> None:
        """``send_interval``: at most how long, in seconds, a submission waits
        in the client before it is sent to the scheduler (Dask batches
        messages; its own default is 10 ms); None keeps the client's."""
        if not isinstance(client, Client):
            raise TypeError(f"DaskExecutor needs a distributed.Client, got {client!r}")
        if send_interval is not None and (
            isinstance(send_interval, bool)
            or not isinstance(send_interval, int | float)
            or not 0 < send_interval <= 1
        ):
            raise InvalidArgument(
                f"DaskExecutor send_interval must be None or seconds in (0, 1], "
                f"got {send_interval!r}"
            )
        #: See ``__init__``.
        self.send_interval = send_interval
        #: The client every body is submitted through (``distributed`` is
        #: partly untyped: kept as Any).
        self.client: Any = client
        self._checked = False
        #: Cancellations of abandoned futures still on their way to the scheduler.
        self._cancelling: set[asyncio.Task[Any]] = set()

    def __repr__(self) -> str:
        return f"<DaskExecutor {self.client!r}>"

    async def run(
        self,
        fn: Callable[..., Any],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        *,
        key: str,
    ) -> Any:
        """Call ``fn(*args, **kwargs)`` on the cluster; its result or exception.
        `WorkerLost` when the cluster lost the call."""
        if not self._checked:
            self._checked = True
            await self._check_allowed_failures()
        self._tune_sends()
        task_key = f"{key}-{secrets.token_hex(4)}"  # unique: a crashed engine's key may live on
        try:
            future = self.client.submit(
                _call, fn, args, kwargs, key=task_key, pure=False, retries=0
            )
        except Exception as error:
            if self.client.status in ("closing", "closed") or isinstance(error, _LOST):
                raise WorkerLost(f"{type(error).__name__}: {error}") from error
            raise
        try:
            return await self._result(future)
        except asyncio.CancelledError:
            self._cancel(future)
            raise
        except _LOST as error:
            raise WorkerLost(f"{type(error).__name__}: {error}") from error
        except Exception as error:
            if future.status in ("lost", "cancelled") or self.client.status in (
                "closing",
                "closed",
            ):
                raise WorkerLost(f"{type(error).__name__}: {error}") from error
            raise

    def _tune_sends(self) -> None:
        """Shorten the client's send interval to `send_interval` (its
        connection is made again on a reconnection, with Dask's default)."""
        comm = getattr(self.client, "scheduler_comm", None)
        interval = getattr(comm, "interval", None)
        wanted = self.send_interval
        if wanted is not None and isinstance(interval, int | float) and interval > wanted:
            comm.interval = wanted  # type: ignore[union-attr]

    async def _result(self, future: Any) -> Any:
        if self.client.asynchronous:
            return await future
        # A client running its own loop in another thread: wait for the
        # future's callback here, then read the finished result off the loop.
        loop = asyncio.get_running_loop()
        done: asyncio.Future[None] = loop.create_future()

        def finished(_: Any) -> None:
            loop.call_soon_threadsafe(_settle, done)

        future.add_done_callback(finished)
        await done
        return await asyncio.to_thread(future.result)

    def _cancel(self, future: Any) -> None:
        """Cancel ``future`` on the cluster, without waiting here (the caller is
        being cancelled); the result, if one comes, is dropped with it."""
        if self.client.status not in ("running", "connecting"):
            return
        if self.client.asynchronous:
            task = asyncio.ensure_future(self._cancel_async(future))
            self._cancelling.add(task)
            task.add_done_callback(self._cancelling.discard)
        else:
            future.cancel()  # a sync client sends it from its own thread

    async def _cancel_async(self, future: Any) -> None:
        try:
            await self.client.cancel([future], reason="durable: the step was cancelled")
        except Exception as error:  # the cluster went away: nothing left to cancel
            log.debug("dask cancel failed", key=future.key, error=repr(error))

    async def _check_allowed_failures(self) -> None:
        source = "the scheduler"
        try:
            if self.client.asynchronous:
                value = await self.client.run_on_scheduler(_allowed_failures)
            else:
                value = await asyncio.to_thread(self.client.run_on_scheduler, _allowed_failures)
        except Exception as error:
            log.debug("cannot read allowed-failures on the scheduler", error=repr(error))
            source = "this process's dask.config (the scheduler could not be asked)"
            value = dask.config.get(_SETTING, None)
        if value != 0:
            log.warning(
                "dask scheduler allowed-failures is not 0: a body whose worker dies is "
                "re-run by Dask up to that many more times, unseen by durable; set "
                f"{_SETTING}: 0 on the scheduler",
                allowed_failures=value,
                source=source,
            )
