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
so a replay never takes a key back to an older value. A run that continues
as new restarts its ordinals (`restart_ordinal`, in the transaction that
starts the new incarnation).

When the run terminates its published values move to its archive
(`durable.decorators.archive`), where ``handle.get`` still finds them
(`durable.decorators.published`).
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

__all__ = [
    "check_key",
    "decode_published",
    "publish",
    "published_key",
    "published_prefix",
    "restart_ordinal",
]

# The number of publishes each delivery's workflow has made so far.
_ordinals: weakref.WeakKeyDictionary[RunContext, int] = weakref.WeakKeyDictionary()


def published_prefix(run_id: str) -> bytes:
    """The KV prefix of every value run ``run_id`` published."""
    return RESERVED_KV_PREFIX + b"published/" + run_id.encode() + b"/"


def published_key(run_id: str, key: str) -> bytes:
    """The KV key of the value run ``run_id`` published under ``key``."""
    return published_prefix(run_id) + key.encode()


def check_key(key: object) -> str:
    """``key`` if it is a valid published key, else `InvalidArgument`."""
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
    check_key(key)
    data = run.codec.dumps(value, what=f"the value published under {key!r}")
    seq = _ordinals.get(run, 0)
    _ordinals[run] = seq + 1
    return _publish(run, key, seq, data)


async def _publish(run: RunContext, key: str, seq: int, data: bytes) -> None:
    task = run.track()  # the delivery does not suspend while a publish is in flight
    try:
        await _write(run, key, seq, data)
    finally:
        run.untrack(task)


async def _write(run: RunContext, key: str, seq: int, data: bytes) -> None:
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


def restart_ordinal(data: bytes, run_id: str, key: str) -> bytes:
    """The stored publish ``data`` of run ``run_id`` under ``key`` with an
    ordinal below every publish's: what a new incarnation of the run starts
    from (``durable.continue_as_new``: its publishes count from 0 again)."""
    _, value = _decode(data, run_id, key)
    return _encode(-1, value)


def decode_published(codec: Codec, data: bytes, run_id: str, key: str) -> Any:
    """The value of a stored publish ``data`` of run ``run_id`` under ``key``."""
    _, value = _decode(data, run_id, key)
    return codec.loads(value, what=f"the value run {run_id!r} published under {key!r}")
