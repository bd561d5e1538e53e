"""Retrying transient object-store errors within a time window.

One policy for every call the log makes that a transient error (a 503, a
reset connection, a timeout) should not fail: the log writes, and every
read, list, probe and delete made while a store opens. A call is retried
with exponential backoff (5 ms doubling to 1 s) while the error is
transient and the next attempt starts within ``seconds`` of the first; a
permanent error (`ObjectNotFound`, `ObjectExists`, a denied request) is
raised at once. The window runs on the event loop's clock: it bounds real
waiting on a real backend, whatever `Clock` the layers above use.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TypeVar

from durable._logging import get_logger
from durable.errors import ObjectExists, ObjectStoreError
from durable.store.objects.base import ObjectStore

__all__ = ["DEFAULT_RETRY_SECONDS", "create_retrying", "retry_transient"]

log = get_logger("durable.store.log")

_T = TypeVar("_T")

#: The default retry window (`LogOptions.write_retry_seconds`, readers).
DEFAULT_RETRY_SECONDS = 30.0
_FIRST_DELAY = 0.005
_MAX_DELAY = 1.0


async def retry_transient(
    call: Callable[[], Awaitable[_T]],
    what: str,
    seconds: float,
    on_retry: Callable[[ObjectStoreError], None] | None = None,
) -> _T:
    """``await call()``, retrying transient `ObjectStoreError` for ``seconds``.

    ``what`` names the object or prefix in the retry warning; ``on_retry``
    is told of every error that is retried. The last error is raised once
    the window is over.
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + seconds
    delay = _FIRST_DELAY
    while True:
        try:
            return await call()
        except ObjectStoreError as e:
            if not e.transient or loop.time() + delay > deadline:
                raise
            if on_retry is not None:
                on_retry(e)
            log.warning("object store retry", object=what, error=str(e), delay=delay)
            await asyncio.sleep(delay)
            delay = min(delay * 2, _MAX_DELAY)


async def create_retrying(
    objects: ObjectStore,
    name: str,
    data: bytes,
    seconds: float,
    on_retry: Callable[[ObjectStoreError], None] | None = None,
) -> bytes | None:
    """Create ``name`` holding ``data``, retrying transient errors for ``seconds``.

    None once our bytes stand there; else the bytes another creator wrote
    first. A retried create whose earlier attempt had landed (a timeout
    after the write took effect) finds our own bytes, which is success, so
    ``data`` must be unique to this caller. `ObjectNotFound` if the name
    was taken and then deleted before it could be read.
    """

    async def attempt() -> bytes | None:
        try:
            await objects.create(name, data)
            return None
        except ObjectExists:
            existing = await objects.get(name)
            return None if existing == data else existing

    return await retry_transient(attempt, name, seconds, on_retry)
