"""``durable check URL``: verify a store (`durable.decorators.check.check_store`).

It reads every log object, checkpoint and record it can find, through the
store's read interface only (no lock, no marker: safe against a live
deployment), and prints the report: counts by kind, every problem naming
the object by its key (and the record's key inside it), and notes. Exit
status 0 when the store is clean, 1 when a problem was found.
"""

from __future__ import annotations

import sys

import typer

from durable.cli.errors import EXIT_FAILED, run
from durable.cli.options import JsonFlag, OptionList, StoreArgs, UrlArg, VerboseFlag
from durable.cli.store import check_location
from durable.decorators.check import check_store
from durable.store.check import CheckReport
from durable.store.objects.url import open_object_store

__all__ = ["check", "register"]


def check(
    url: UrlArg,
    json: JsonFlag = False,
    option: OptionList = None,
    verbose: VerboseFlag = False,
) -> None:
    """Verify every log object, checkpoint and record of a store; exit 1 on a problem."""
    args = StoreArgs.of(url, option, None, verbose)

    async def call() -> CheckReport:
        check_location(url)
        objects = await open_object_store(url, args.options or None)
        try:
            return await check_store(objects)
        finally:
            await objects.close()

    report = run(call, url, verbose)
    sys.stdout.write((report.to_json() if json else report.render()) + "\n")
    if not report.clean:
        raise typer.Exit(EXIT_FAILED)


def register(app: typer.Typer) -> None:
    """Add ``check`` to ``app``."""
    app.command("check")(check)
