"""``durable group URL GROUP_ID``: a run group's progress (a seam).

The progress API (issue 17, point 6: counts by state, rate, time remaining
for run groups, job ``map`` and bulk runs) is built separately; once it is
merged, this module reads it on a client engine and renders a rich progress
bar (``--json``: the progress as one JSON document), and `register` adds
the command to the app (`durable.cli.app.COMMANDS` lists this module
already). Until then it adds nothing.
"""

from __future__ import annotations

import typer

__all__ = ["register"]


def register(app: typer.Typer) -> None:
    """Add ``group`` to ``app`` (nothing yet: the progress API is not merged)."""
    del app
