"""The one place the agent integrations write model output to a durable stream.

Both integrations call `write_model_output` from inside a model-request step
with each piece of text the model streams. Durable streams
(``durable.write_stream``) are switched on here and nowhere else: until the
running ``durable`` has them, a write is dropped and the run is otherwise the
same (the model's full response is journaled by its step either way).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import cast

import durable

__all__ = ["streams_available", "write_model_output"]


def _writer() -> Callable[[str, object], Awaitable[None]] | None:
    writer = getattr(durable, "write_stream", None)
    return cast("Callable[[str, object], Awaitable[None]] | None", writer)


def streams_available() -> bool:
    """Whether this ``durable`` has durable streams (``durable.write_stream``)."""
    return _writer() is not None


async def write_model_output(key: str, value: object) -> None:
    """Append ``value`` (a piece of model output) to the run's stream ``key``;
    a no-op while ``durable`` has no ``write_stream``."""
    writer = _writer()
    if writer is not None:
        await writer(key, value)
