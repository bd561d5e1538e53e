"""Loggers of `durable`: structlog bound loggers on top of stdlib `logging`.

`durable` never configures logging globally. Its events go to the stdlib
loggers named ``durable.*`` (so an application sets levels and handlers
as usual; by default only warnings and errors reach stderr), rendered as
``event key=value ...``. Context (run id, step, queue) is bound with
``log.bind(...)``.
"""

from __future__ import annotations

import logging
from typing import Any

import structlog

__all__ = ["get_logger"]

_PROCESSORS: list[Any] = [
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
