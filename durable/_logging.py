"""Loggers of `durable`: structlog bound loggers on top of stdlib `logging`.

`durable` never configures logging globally. Its events go to the stdlib
loggers named ``durable.*`` (so an application sets levels and handlers
as usual; by default only warnings and errors reach stderr), rendered as
``event key=value ...``. Context (run id, step, queue) is bound with
``log.bind(...)``.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, MutableMapping
from contextlib import contextmanager
from typing import Any

import structlog
from structlog.testing import LogCapture

__all__ = ["capture_logs", "get_logger"]

_captures: list[LogCapture] = []


def _capture(logger: Any, method: str, event: MutableMapping[str, Any]) -> Any:
    if _captures:
        return _captures[-1](logger, method, event)  # records, then drops the event
    return event


@contextmanager
def capture_logs() -> Iterator[list[MutableMapping[str, Any]]]:
    """Collect the events `durable` logs inside the block, at every level.

    Each event is a dict with ``event``, ``log_level`` and the bound keys.
    Captured events are not passed on to `logging`.
    """
    cap = LogCapture()
    _captures.append(cap)
    try:
        yield cap.entries
    finally:
        _captures.remove(cap)


_PROCESSORS: list[Any] = [
    _capture,
    structlog.stdlib.filter_by_level,
    structlog.processors.format_exc_info,
    structlog.processors.KeyValueRenderer(key_order=["event"], drop_missing=True),
]


def get_logger(name: str) -> Any:
    """A structlog logger writing to the stdlib logger ``name``."""
    return structlog.wrap_logger(
        logging.getLogger(name),
        processors=_PROCESSORS,
        wrapper_class=structlog.stdlib.BoundLogger,
    )
