"""``durable.publish``: a workflow's latest values, readable from outside it.

``await durable.publish(key, value)`` inside a workflow stores the encoded
``value`` under the run, durably before it returns; ``await
handle.get(key)`` outside returns the latest value published under
``key`` (waiting for the first one). Each published key is one KV key of
the store, under the engine's reserved prefix::

    workflow/published/{run_id}/{key}

written through the queue's internal KV namespace. Its value is a
MessagePack map ``{"seq": n, "value": codec bytes}``, where ``n`` is the
ordinal of the publish among the run's publishes (taken when ``publish``
is called, like a journal position). A delivery replays the workflow from
its start, so a replayed publish carries the ordinal it had the first
time: a write only lands when its ordinal is higher than the stored one,
so a replay never takes a key back to an older value.
"""

from __future__ import annotations

import weakref
from collections.abc import Coroutine
from typing import Any

import msgpack

from durable.decorators.codec import Codec
from durable.decorators.context import RunContext, current_run
from durable.decorators.suspend import Abort
from durable.engine.runs import RESERVED_KV_PREFIX
from durable.errors import CorruptEngineRecord, InvalidArgument
from durable.store.clock import Clock
from durable.store.kv import KvNamespace
from durable.store.queue.wakeups import wait_or_sleep

__all__ = ["published_key", "publish", "read_published", "wait_published"]

# The number of publishes each delivery's workflow has made so far.
_ordinals: weakref.WeakKeyDictionary[RunContext, int] = weakref.WeakKeyDictionary()


def published_key(run_id: str, key: str) -> bytes:
    """The KV key of the value run ``run_id`` published under ``key``."""
    return RESERVED_KV_PREFIX + b"published/" + run_id.encode() + b"/" + key.encode()


def _check_key(key: object) -> str:
    if not isinstance(key, str) or not key:
        raise InvalidArgument(f"a published key must be a non-empty str, got {key!r}")
    return key


def _encode(seq: int, value: bytes) -> bytes:
    packed: bytes = msgpack.packb({"seq": seq, "value": value}, use_bin_type=True)
    return packed


def _decode(data: bytes, run_id: str, key: str) -> tuple[int, bytes]:
    try:
        m = msgpack.unpackb(data, raw=False)
        seq, value = m["seq"], m["value"]
        if not isinstance(seq, int) or not isinstance(value, bytes):
            raise ValueError("seq must be an int and value bytes")
    except (ValueError, TypeError, KeyError, msgpack.UnpackException) as e:
        raise CorruptEngineRecord(
            f"the value run {run_id!r} published under {key!r}", str(e) or type(e).__name__
        ) from None
    return seq, value


def publish(key: str, value: object) -> Coroutine[Any, Any, None]:
    """Publish ``value`` (through the codec) under ``key`` for this run:
    ``handle.get(key)`` returns the latest one. Durable when the await
    returns; a replay never overwrites a newer value. Only in a workflow."""
    run = current_run("durable.publish()")
    _check_key(key)
    data = run.codec.dumps(value, what=f"the value published under {key!r}")
    seq = _ordinals.get(run, 0)
    _ordinals[run] = seq + 1
    return _publish(run, key, seq, data)


async def _publish(run: RunContext, key: str, seq: int, data: bytes) -> None:
    kv = run.engine.queue.kv.internal()
    kv_key = published_key(run.run_id, key)
    new = _encode(seq, data)
    try:
        while True:
            current = kv.get(kv_key)
            if current is not None and _decode(current, run.run_id, key)[0] >= seq:
                return  # a replay: this publish (or a later one) is already stored
            if await kv.compare_put(kv_key, current, new):
                return
    except CorruptEngineRecord:
        raise
    except Exception as e:
        raise Abort(
            f"run {run.run_id!r}: the value published under {key!r} could not be written: {e}",
            e,
        ) from e


def read_published(kv: KvNamespace, codec: Codec, run_id: str, key: str) -> tuple[bool, Any]:
    """``(True, value)`` of the latest value run ``run_id`` published under
    ``key``, or ``(False, None)`` when there is none yet."""
    data = kv.get(published_key(run_id, key))
    if data is None:
        return False, None
    _, value = _decode(data, run_id, key)
    return True, codec.loads(value, what=f"the value run {run_id!r} published under {key!r}")


async def wait_published(
    kv: KvNamespace, codec: Codec, clock: Clock, run_id: str, key: str, limit: float | None
) -> Any:
    """The latest value run ``run_id`` published under ``key``, waiting at
    most ``limit`` seconds of ``clock`` for the first (None: no limit);
    `TimeoutError` naming the run and the key after it."""
    _check_key(key)
    if limit is not None and (
        isinstance(limit, bool) or not isinstance(limit, int | float) or limit < 0
    ):
        raise InvalidArgument(f"timeout must be None or >= 0 seconds, got {limit!r}")
    kv_key = published_key(run_id, key)
    deadline = None if limit is None else clock.now_ms() + round(limit * 1000)
    while True:
        found, value = read_published(kv, codec, run_id, key)
        if found:
            return value
        fut = kv.watch(kv_key)  # no await since the read: no write slips through
        try:
            remaining = None if deadline is None else (deadline - clock.now_ms()) / 1000
            if not await wait_or_sleep(clock, fut, remaining):
                raise TimeoutError(
                    f"run {run_id!r} published nothing under {key!r} within {limit} seconds"
                )
            fut.result()  # the store's error, if the commit failed or it closed
        finally:
            kv.unwatch(kv_key, fut)
