"""Run control: ``durable cancel``, ``durable fork``, ``durable signal``.

Each writes through the client path: a request in the store's inbox that
the store's owner applies (a running worker), so the CLI never fences the
owner. A request is durable when the command returns; it takes effect when
the owner applies it (within its inbox pace: milliseconds on a local
directory, up to a few seconds on an object store).

Seam for the bulk forms (issue 17, point 2): ``cancel`` takes one RUN_ID
today; with the run listing it also takes the listing's filters
(`durable.cli.filters`) instead, counts the runs that match (a dry run),
and asks for confirmation unless ``--yes``. ``resume`` and ``forget`` join
this module in the same shape.
"""

from __future__ import annotations

import importlib
import os
import sys
from typing import Annotated, Any

import typer

from durable.cli.errors import EXIT_USAGE, CliError, run
from durable.cli.options import (
    JsonFlag,
    OptionList,
    RunIdArg,
    SigningKey,
    StoreArgs,
    UrlArg,
    VerboseFlag,
    parse_json_or_text,
)
from durable.cli.output import emit_json
from durable.cli.store import open_engine
from durable.decorators.status import read_status
from durable.engine.runs import validate_run_id
from durable.errors import RunNotFound

__all__ = ["import_modules", "register"]

ImportList = Annotated[
    list[str] | None,
    typer.Option(
        "--import",
        "-m",
        metavar="MODULE",
        help="Import MODULE first, so the run's workflow is known (repeatable).",
        show_default=False,
    ),
]


def import_modules(modules: list[str] | None) -> None:
    """Import each module (the current directory on the path, as ``python
    -m`` has it); `CliError` naming the first that fails."""
    if not modules:
        return
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    for name in modules:
        try:
            importlib.import_module(name)
        except Exception as e:
            raise CliError(
                f"cannot import module {name!r}: {type(e).__name__}: {e}", code=EXIT_USAGE
            ) from None


def cancel(
    url: UrlArg,
    run_id: RunIdArg,
    option: OptionList = None,
    signing_key: SigningKey = None,
    verbose: VerboseFlag = False,
) -> None:
    """Cancel a run and its child runs (a request the store's owner applies)."""
    args = StoreArgs.of(url, option, signing_key, verbose)

    async def call() -> str:
        validate_run_id(run_id)
        async with open_engine(args) as engine:
            status = await read_status(engine, run_id)
            if status is None:
                raise RunNotFound(run_id, "durable cancel")
            if status.terminated:
                return f"run {run_id!r} has terminated already ({status.state.value.lower()})"
            await engine.handle(run_id).cancel()
            return f"cancel of run {run_id!r} requested (the store's owner applies it)"

    typer.echo(run(call, url, verbose))


def fork(
    url: UrlArg,
    run_id: RunIdArg,
    from_step: Annotated[
        int,
        typer.Option(
            "--from-step",
            metavar="N",
            help="Reuse the journal's positions before N; run again from N.",
            show_default=False,
        ),
    ],
    new_run_id: Annotated[
        str | None,
        typer.Option("--new-run-id", help="The new run's id (default: a new one)."),
    ] = None,
    imports: ImportList = None,
    json: JsonFlag = False,
    option: OptionList = None,
    signing_key: SigningKey = None,
    verbose: VerboseFlag = False,
) -> None:
    """Start a new run of a run's workflow and arguments from step N (its
    earlier steps answer from the source's journal)."""
    args = StoreArgs.of(url, option, signing_key, verbose)

    async def call() -> str:
        import_modules(imports)
        async with open_engine(args) as engine:
            handle = await engine.fork(run_id, from_step, new_run_id=new_run_id)
            return handle.run_id

    new_id = run(call, url, verbose)
    if json:
        emit_json({"run_id": new_id, "forked_from": run_id, "from_step": from_step})
    else:
        typer.echo(f"forked run {run_id!r} from step {from_step}: new run {new_id}")


def signal(
    url: UrlArg,
    key: Annotated[str, typer.Argument(metavar="KEY", help="The signal's key.")],
    value: Annotated[
        str,
        typer.Argument(metavar="VALUE", help="The value: JSON if it parses, else a string."),
    ],
    option: OptionList = None,
    signing_key: SigningKey = None,
    verbose: VerboseFlag = False,
) -> None:
    """Send VALUE to the run waiting on KEY (or buffer it for the next one)."""
    args = StoreArgs.of(url, option, signing_key, verbose)
    payload: Any = parse_json_or_text(value)

    async def call() -> None:
        async with open_engine(args) as engine:
            await engine.signal(key, payload)

    run(call, url, verbose)
    typer.echo(f"signal {key!r} sent (the store's owner delivers it)")


def register(app: typer.Typer) -> None:
    """Add ``cancel``, ``fork`` and ``signal`` to ``app``."""
    app.command("cancel")(cancel)
    app.command("fork")(fork)
    app.command("signal")(signal)
