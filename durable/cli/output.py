"""What the CLI prints: rich tables on a terminal, or one JSON document.

With ``--json`` a read command prints exactly one JSON document on stdout
(`emit_json`); everything else (errors, ``--verbose`` logs) goes to stderr.
Without it, `console` renders rich tables and key/value panels.
"""

from __future__ import annotations

import datetime as _dt
import json
import sys
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from rich.console import Console
from rich.table import Table

__all__ = [
    "console",
    "emit_json",
    "fields_table",
    "format_bytes",
    "format_duration",
    "format_time",
    "table",
]


def console() -> Console:
    """The console of stdout (a new one per call: tests swap ``sys.stdout``)."""
    return Console(file=sys.stdout, soft_wrap=False)


def emit_json(document: object) -> None:
    """Print ``document`` as JSON on stdout, alone."""
    sys.stdout.write(json.dumps(document, indent=2, sort_keys=False, default=str) + "\n")


def format_time(ms: int | None) -> str:
    """Epoch ms as an ISO-8601 UTC time to the second ('' for None or 0)."""
    if not ms:
        return ""
    return _dt.datetime.fromtimestamp(ms / 1000, _dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def format_duration(ms: int | None) -> str:
    """A duration in ms as text ('' for None)."""
    if ms is None:
        return ""
    if ms < 1000:
        return f"{ms} ms"
    seconds = ms / 1000
    if seconds < 120:
        return f"{seconds:.1f} s"
    minutes, s = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m{s:02d}s" if hours else f"{minutes}m{s:02d}s"


def format_bytes(n: int | None) -> str:
    """A byte count as text ('' for None)."""
    if n is None:
        return ""
    if n < 1024:
        return f"{n} B"
    if n < 1024 * 1024:
        return f"{n / 1024:.1f} KiB"
    return f"{n / (1024 * 1024):.1f} MiB"


def table(title: str | None, columns: Sequence[str], rows: Iterable[Sequence[object]]) -> Table:
    """A rich table of ``rows`` (cells as text; None as '')."""
    t = Table(title=title, title_justify="left", show_lines=False)
    for column in columns:
        t.add_column(column, overflow="fold")
    for row in rows:
        t.add_row(*("" if cell is None else str(cell) for cell in row))
    return t


def fields_table(fields: Mapping[str, Any]) -> Table:
    """A two-column table of the non-empty ``fields``."""
    t = Table(show_header=False, box=None, pad_edge=False)
    t.add_column(style="bold")
    t.add_column(overflow="fold")
    for name, value in fields.items():
        if value is None or value == "" or value is False:
            continue
        t.add_row(name, str(value))
    return t
