"""The liveness heartbeat record (semantics 1.15): one key, a positional array."""

from __future__ import annotations

from dataclasses import dataclass

import msgpack

from durable._logging import get_logger
from durable.store.log import State
from durable.store.queue import keys

__all__ = ["Heartbeat", "encode_heartbeat", "read_heartbeat"]

log = get_logger("durable.store.queue")


@dataclass(frozen=True, slots=True)
class Heartbeat:
    """The writer's last liveness beat.

    Judge liveness by ``counter`` advancing across polls, never by comparing
    ``at_ms`` with another machine's clock.
    """

    counter: int
    at_ms: int
    interval_ms: int
    writer_epoch: int
    closed: bool


def encode_heartbeat(beat: Heartbeat) -> bytes:
    """``[counter, at_ms, interval_ms, writer_epoch, closed]`` as MessagePack."""
    return msgpack.packb(
        [beat.counter, beat.at_ms, beat.interval_ms, beat.writer_epoch, beat.closed]
    )


def read_heartbeat(state: State) -> Heartbeat | None:
    """The stored heartbeat, or None (never written, or unreadable)."""
    raw = state.get(keys.heartbeat_key())
    if raw is None:
        return None
    try:
        counter, at_ms, interval_ms, epoch, closed = msgpack.unpackb(raw)[:5]
        return Heartbeat(int(counter), int(at_ms), int(interval_ms), int(epoch), bool(closed))
    except Exception:
        log.warning("unreadable heartbeat record")
        return None
