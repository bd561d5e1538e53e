"""The ``durable`` command: a typer app, one module per command group.

`COMMANDS` lists the modules whose ``register(app)`` adds their commands
(`durable.cli.filters` holds the run listing's options, shared by ``runs``,
``watch`` and the bulk forms of ``cancel``, ``resume`` and ``forget``;
``group`` waits for the progress API).
"""

from __future__ import annotations

import typer

from durable.cli import check, control, dead, export, group, kv, runs, show, stats, ui

__all__ = ["COMMANDS", "app", "main"]

#: The command modules, in the order ``--help`` lists them.
COMMANDS = (runs, show, control, dead, kv, stats, check, export, group, ui)

app = typer.Typer(
    name="durable",
    help=(
        "See and operate the runs of a durable store. Every command takes the store's URL "
        "first; it reads through a read-only view and writes only requests that the "
        "store's owner applies. It never creates a store."
    ),
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)
for _module in COMMANDS:
    _module.register(app)


def main() -> None:
    """The console script's entry point."""
    app(prog_name="durable")
