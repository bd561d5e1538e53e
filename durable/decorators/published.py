"""``handle.get``: the latest value a run published under a key, from outside.

`wait_published` reads the value from the store: the KV while the run is
active, its archive once it has terminated (`durable.decorators.archive`).
Without a value yet it sleeps on KV watches of the published key and of the
run's terminal record (no polling), at most the timeout on the engine's
clock. A run that terminated without publishing the key raises
`NotPublished`; an unknown run `RunNotFound`.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from durable.decorators.archive import read_archive
from durable.decorators.publish import check_key, decode_published, published_key
from durable.engine import keys
from durable.errors import InvalidArgument, NotPublished, RunNotFound
from durable.store.queue.wakeups import wait_or_sleep

if TYPE_CHECKING:
    from durable.decorators.base import EngineBase

__all__ = ["check_timeout", "either", "wait_published"]


def check_timeout(limit: object) -> float | None:
    """``limit`` if it is None or a number of seconds >= 0, else `InvalidArgument`."""
    if limit is not None and (
        isinstance(limit, bool) or not isinstance(limit, int | float) or limit < 0
    ):
        raise InvalidArgument(f"timeout must be None or >= 0 seconds, got {limit!r}")
    return limit


def either(*futures: asyncio.Future[None]) -> asyncio.Future[None]:
    """A future resolved when the first of ``futures`` is (with its error, if any)."""
    first: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    def done(fut: asyncio.Future[None]) -> None:
        if first.done():
            return
        if fut.cancelled():
            first.cancel()
        elif (error := fut.exception()) is not None:
            first.set_exception(error)
        else:
            first.set_result(None)

    for fut in futures:
        fut.add_done_callback(done)
    return first


async def wait_published(engine: EngineBase, run_id: str, key: str, limit: float | None) -> Any:
    """The latest value run ``run_id`` published under ``key``, waiting at most
    ``limit`` seconds of the engine's clock for the first (None: no limit);
    `TimeoutError` naming the run and the key after it."""
    check_key(key)
    check_timeout(limit)
    engine = engine.for_run(run_id)
    kv = engine.queue.kv.internal()
    runtime = engine.workflows.default
    view = runtime.view
    value_key, end_key = published_key(run_id, key), keys.outcome_key(run_id)
    clock = engine.clock
    deadline = None if limit is None else clock.now_ms() + round(limit * 1000)
    await runtime.until_visible(run_id, limit)  # a client's run not applied yet
    while True:
        data = kv.get(value_key)
        if data is None and view.run_record(run_id) is None:
            if view.terminal_record(run_id) is None:
                raise RunNotFound(run_id, f"handle.get({key!r})")
            data = (await read_archive(engine, run_id)).published.get(key)
            if data is None:
                raise NotPublished(run_id, key)
        if data is not None:
            return decode_published(engine.codec, data, run_id, key)
        # No await since the reads: a publish or the termination wakes us.
        watches = [(value_key, kv.watch(value_key)), (end_key, kv.watch(end_key))]
        try:
            remaining = None if deadline is None else (deadline - clock.now_ms()) / 1000
            woken = either(*(fut for _, fut in watches))
            if not await wait_or_sleep(clock, woken, remaining):
                raise TimeoutError(
                    f"run {run_id!r} published nothing under {key!r} within {limit} seconds"
                )
            woken.result()  # the store's error, if the commit failed or it closed
        finally:
            for watched, fut in watches:
                kv.unwatch(watched, fut)
