"""The engine's structured events, and the public switch that shows them.

Every transition of a run is one structlog event on the stdlib logger
``durable.events``: ``submit``, ``claim``, ``resume``, ``step_start``,
``step_end`` (with ``duration_ms``), ``retry``, ``signal``, ``suspend``,
``continue_as_new``,
``terminate``, ``fence``, ``takeover`` and ``sweep`` (the table in
``docs/operating.md`` says what each carries). The keys ``run_id``,
``workflow``, ``step`` (a step's name), ``position`` (its journal position),
``delivery`` (the run's step job number) and ``queue`` are set where they
apply.

Silent by default: per-step events (``claim``, ``step_start``,
``step_end``) are DEBUG, the others INFO, and nothing is built unless the
``durable.events`` logger is enabled for the level (one cached level check
per event otherwise). Turn them on with `enable` (console or JSON lines on
a stream), or route the ``durable.events`` logger like any other with
stdlib ``logging``: each record's message is one line ``event: key=value
...`` and its ``durable_event`` attribute holds the event's fields.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from collections.abc import Mapping
from contextvars import ContextVar
from typing import IO, Any, Literal, Protocol

import structlog

__all__ = [
    "EVENT_NAMES",
    "LOGGER_NAME",
    "TRACING",
    "Tracing",
    "bind",
    "bound",
    "disable",
    "emit",
    "enable",
    "enabled",
]

#: The stdlib logger every engine event goes to.
LOGGER_NAME = "durable.events"

#: Every event name, with its level.
EVENT_NAMES: Mapping[str, int] = {
    "submit": logging.INFO,
    "claim": logging.DEBUG,
    "resume": logging.INFO,
    "step_start": logging.DEBUG,
    "step_end": logging.DEBUG,
    "retry": logging.INFO,
    "signal": logging.INFO,
    "suspend": logging.INFO,
    "continue_as_new": logging.INFO,
    "terminate": logging.INFO,
    "fence": logging.INFO,
    "takeover": logging.INFO,
    "sweep": logging.INFO,
}

_stdlib = logging.getLogger(LOGGER_NAME)
_KEY_VALUES = structlog.processors.KeyValueRenderer(sort_keys=False)


def _to_stdlib(logger: Any, method: str, event: Any) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """The last processor: the record's one-line message, the fields as
    the record's ``durable_event`` attribute."""
    fields = dict(event)
    name = str(event.pop("event", ""))
    rest = _KEY_VALUES(logger, method, event)
    return (f"{name}: {rest}" if rest else name,), {"extra": {"durable_event": fields}}


_events = structlog.wrap_logger(
    _stdlib, processors=[_to_stdlib], wrapper_class=structlog.stdlib.BoundLogger
)


class Tracing(Protocol):
    """What the engine asks of a tracer (`durable.otel` provides one)."""

    def inject(self, headers: dict[str, str]) -> None:
        """Add the caller's trace context to a starting run's headers."""

    def run_span(self, run_id: str, delivery: int, headers: Mapping[str, str]) -> Any:
        """A context manager: the span of one delivery of a run, current
        inside it, child of the trace context in ``headers``."""

    def step_span(self, run_id: str, step: str, position: int) -> Any:
        """A context manager: the span of one step, child of the current span."""

    def annotate(self, **attributes: Any) -> None:
        """Set attributes (None values skipped) on the current span."""


#: The tracer the engine reports spans to; None (the default): no tracing.
#: Set by `durable.otel.instrument`.
TRACING: Tracing | None = None


def enabled(event: str) -> bool:
    """Whether ``event`` would be emitted now (cheap: a cached level check)."""
    return _stdlib.isEnabledFor(EVENT_NAMES[event])


def emit(event: str, /, **fields: Any) -> None:
    """Emit engine event ``event`` (a name of `EVENT_NAMES`) with ``fields``;
    nothing is built when its level is off."""
    level = EVENT_NAMES[event]
    if not _stdlib.isEnabledFor(level):
        return
    bound = _bound.get()
    _events.log(level, event, **({**bound, **fields} if bound else fields))


_bound: ContextVar[dict[str, Any] | None] = ContextVar("durable.events.bound", default=None)


def bound() -> Mapping[str, Any]:
    """The fields `bind` added in this context."""
    return _bound.get() or {}


def bind(**fields: Any) -> None:
    """Add ``fields`` to every event emitted later in this context (the
    runner binds a delivery's ``workflow`` so, for the engine's events of
    the same claim); a no-op while neither events nor tracing are on."""
    if TRACING is None and not _stdlib.isEnabledFor(logging.INFO):
        return
    _bound.set({**(_bound.get() or {}), **fields})


# --------------------------------------------------------------- output


def _json_line(record: logging.LogRecord) -> str:
    fields: dict[str, Any] = dict(getattr(record, "durable_event", None) or {})
    out: dict[str, Any] = {
        "timestamp": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
        + f".{int(record.msecs):03d}Z",
        "level": record.levelname.lower(),
        "logger": record.name,
        "event": fields.pop("event", record.getMessage()),
    }
    out.update(fields)
    return json.dumps(out, default=str)


class _Formatter(logging.Formatter):
    """Renders a ``durable.events`` record as one JSON object or console line."""

    def __init__(self, fmt: Literal["console", "json"], colors: bool) -> None:
        super().__init__()
        self.fmt = fmt
        self.console = structlog.dev.ConsoleRenderer(colors=colors)

    def format(self, record: logging.LogRecord) -> str:
        if self.fmt == "json":
            return _json_line(record)
        fields = getattr(record, "durable_event", None)
        if fields is None:
            return record.getMessage()
        event = {
            "timestamp": time.strftime("%H:%M:%S", time.localtime(record.created))
            + f".{int(record.msecs):03d}",
            "level": record.levelname.lower(),
            **fields,
        }
        return str(self.console(None, record.levelname.lower(), event))


_handler: logging.Handler | None = None
_saved: tuple[int, bool] | None = None


def enable(
    format: Literal["console", "json"] = "console",
    *,
    level: int | str = logging.DEBUG,
    stream: IO[str] | None = None,
) -> logging.Handler:
    """Write the engine's events to ``stream`` (default: stderr) from now on.

    ``format``: ``"console"`` (one readable line per event) or ``"json"``
    (one JSON object per line: ``timestamp``, ``level``, ``logger``,
    ``event`` and every field). ``level``: ``logging.DEBUG`` (default:
    every event) or ``"INFO"`` (run-level events only, no per-step ones).
    The events go to this stream only (not also to the application's
    handlers) until `disable`. Calling it again replaces the output.
    Returns the handler it installed.
    """
    global _handler, _saved
    if format not in ("console", "json"):
        raise ValueError(f"format must be 'console' or 'json', got {format!r}")
    disable()
    out = stream if stream is not None else sys.stderr
    handler = logging.StreamHandler(out)
    colors = format == "console" and bool(getattr(out, "isatty", lambda: False)())
    handler.setFormatter(_Formatter(format, colors))
    _saved = (_stdlib.level, _stdlib.propagate)
    _stdlib.setLevel(level)
    _stdlib.propagate = False
    _stdlib.addHandler(handler)
    _handler = handler
    return handler


def disable() -> None:
    """Undo `enable`: the events go back to being silent (or to the
    application's own logging setup)."""
    global _handler, _saved
    if _handler is not None:
        _stdlib.removeHandler(_handler)
        _handler = None
    if _saved is not None:
        _stdlib.setLevel(_saved[0])
        _stdlib.propagate = _saved[1]
        _saved = None
