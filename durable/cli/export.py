"""``durable export URL RUN_ID [-o FILE]``: a run's invocation and journal, to a file.

The file is a `durable.testing.RunHistory` (see `durable.testing.replay`):
``await durable.testing.replay(workflow, FILE)`` runs today's code of the
workflow against it, in a test or in CI, without the store. Values the
store kept in the run's memo are inlined; nothing is decoded (a store that
signs its pickles needs its key at the replay, not here). Without ``-o``
the file is ``RUN_ID.durable-run`` in the current directory.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from durable.cli.errors import run
from durable.cli.options import RunIdArg, SigningKey, StoreArgs, UrlArg, VerboseFlag
from durable.cli.store import open_engine
from durable.engine.runs import validate_run_id
from durable.testing.replay import RunHistory, fetch_history

__all__ = ["export", "register"]

OutputOption = Annotated[
    Path | None,
    typer.Option(
        "--output",
        "-o",
        metavar="FILE",
        help="Where to write the run (default: RUN_ID.durable-run).",
        show_default=False,
    ),
]
#: ``--option`` without the ``-o`` short form, which ``--output`` takes here.
StorageOptions = Annotated[
    list[str] | None,
    typer.Option(
        "--option",
        metavar="KEY=VALUE",
        help="A storage option for the backend (repeatable; VALUE as JSON if it parses).",
        show_default=False,
    ),
]


def export(
    url: UrlArg,
    run_id: RunIdArg,
    output: OutputOption = None,
    option: StorageOptions = None,
    signing_key: SigningKey = None,
    verbose: VerboseFlag = False,
) -> None:
    """Write a run's invocation and journal to a file that durable.testing.replay reads."""
    args = StoreArgs.of(url, option, signing_key, verbose)

    async def call() -> RunHistory:
        validate_run_id(run_id)
        async with open_engine(args) as engine:
            return await fetch_history(engine, run_id)

    history = run(call, url, verbose)
    path = output if output is not None else Path(f"{run_id}.durable-run")
    history.dump(path)
    typer.echo(
        f"exported run {run_id} ({history.workflow}, {history.state}, "
        f"{len(history.journal)} journal position(s)) to {path}"
    )


def register(app: typer.Typer) -> None:
    """Add ``export`` to ``app``."""
    app.command("export")(export)
