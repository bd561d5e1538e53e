"""Loggers of `durable`: structlog bound loggers on top of stdlib `logging`.

`durable` is a library: it never calls ``structlog.configure`` and never
touches the root logger, so the application's logging setup stays its own.
Each event is rendered here to one line, ``event: key=value ...`` (context
such as the run id, step or queue is bound with ``log.bind(...)``), and
handed to the stdlib logger named after the module (``durable.*``). The
application's handlers, levels and formatters then apply to it like to any
other library's records.

An application that configured no logging at all would get stdlib's "last
resort" output: the bare message, with no level and no logger name. So
`durable` adds one handler to its ``durable`` logger, `FALLBACK`, that does
what the last resort does (warnings and errors to stderr) formatted as
``LEVEL [logger] message``, and only when no other handler would see the
record: any handler the application adds, to the root logger
(``logging.basicConfig``) or to ``durable`` (a ``NullHandler`` silences
the library), turns it off.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Iterator, MutableMapping
from contextlib import contextmanager
from typing import Any

import structlog
from structlog.testing import LogCapture

__all__ = ["FALLBACK", "FALLBACK_FORMAT", "capture_logs", "get_logger"]

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


_KEY_VALUES = structlog.processors.KeyValueRenderer(sort_keys=False)


def _render(logger: Any, method: str, event: MutableMapping[str, Any]) -> str:
    """``event: key=value ...``, and a formatted exception on the lines after."""
    message = str(event.pop("event", ""))
    exception = event.pop("exception", None)
    rest = _KEY_VALUES(logger, method, event)
    line = f"{message}: {rest}" if rest else message
    return f"{line}\n{exception}" if exception else line


_PROCESSORS: list[Any] = [
    _capture,
    structlog.stdlib.filter_by_level,
    structlog.processors.format_exc_info,
    _render,
]


def get_logger(name: str) -> Any:
    """A structlog logger writing to the stdlib logger ``name``."""
    return structlog.wrap_logger(
        logging.getLogger(name),
        processors=_PROCESSORS,
        wrapper_class=structlog.stdlib.BoundLogger,
    )


#: How `FALLBACK` formats a record.
FALLBACK_FORMAT = "%(levelname)s [%(name)s] %(message)s"


class _Fallback(logging.Handler):
    """stdlib's last resort, formatted: see the module docstring."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.setFormatter(logging.Formatter(FALLBACK_FORMAT))

    def _others(self, name: str) -> bool:
        """Whether a handler besides this one sees records of logger ``name``."""
        logger: logging.Logger | None = logging.getLogger(name)
        while logger is not None:
            if any(h is not self for h in logger.handlers):
                return True
            if not logger.propagate:
                return False
            logger = logger.parent
        return False

    def emit(self, record: logging.LogRecord) -> None:
        if logging.lastResort is None or self._others(record.name):
            return
        try:
            sys.stderr.write(self.format(record) + "\n")
            sys.stderr.flush()
        except Exception:
            self.handleError(record)


#: The handler on the ``durable`` logger; see the module docstring.
FALLBACK: logging.Handler = _Fallback()
logging.getLogger("durable").addHandler(FALLBACK)
