"""``durable group URL GROUP_ID``: a run group's progress, as a bar.

A run group is a ``@job`` ``map``, a bulk batch or any
`durable.engine.RunGroup`. The command reads `Engine.group_progress` on a
client engine (member records in memory: no object read, no owner fenced):
counts by state, completion rate and time remaining.

- without ``--follow``: one line of counts and a bar, then exit;
- ``--follow``: a live bar that moves with every change, until every member
  has terminated (`Engine.group_progress_updates`), or Ctrl-C;
- ``--json``: the progress as one JSON document (`Progress.as_dict`).

The exit status is 0, or 3 for an unknown group.
"""

from __future__ import annotations

from typing import Annotated

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

from durable.cli.errors import EXIT_NOT_FOUND, CliError, run
from durable.cli.options import JsonFlag, OptionList, SigningKey, StoreArgs, UrlArg, VerboseFlag
from durable.cli.output import console, emit_json
from durable.cli.store import open_engine
from durable.engine.progress import Progress as GroupProgress
from durable.errors import GroupNotFound

__all__ = ["describe", "register"]


def describe(p: GroupProgress) -> str:
    """One line: the counts by state that are not zero, the rate, the time left."""
    counts = " ".join(f"{state}={n}" for state, n in p.counts().items() if n)
    rate = f"{p.rate_per_s:.2f}/s" if p.rate_per_s else "rate unknown"
    left = "done" if p.finished else (f"~{p.eta_s:.0f} s left" if p.eta_s is not None else "")
    return " · ".join(part for part in (counts or "no members", rate, left) if part)


def group(
    url: UrlArg,
    group_id: Annotated[str, typer.Argument(help="The group's id.", show_default=False)],
    follow: Annotated[
        bool, typer.Option("--follow", "-f", help="Keep the bar moving until the group ends.")
    ] = False,
    interval: Annotated[
        float,
        typer.Option(
            "--interval", min=0.05, help="With --follow: refresh at least every N seconds."
        ),
    ] = 1.0,
    json: JsonFlag = False,
    option: OptionList = None,
    signing_key: SigningKey = None,
    verbose: VerboseFlag = False,
) -> None:
    """A run group's progress: counts by state, rate, time remaining (a bar)."""
    args = StoreArgs.of(url, option, signing_key, verbose)

    async def call() -> GroupProgress:
        async with open_engine(args) as engine:
            try:
                if not follow or json:
                    return await engine.group_progress(group_id)
                last: GroupProgress | None = None
                with Progress(
                    TextColumn(f"group {group_id}"),
                    BarColumn(),
                    MofNCompleteColumn(),
                    TimeRemainingColumn(),
                    TextColumn("{task.description}"),
                    console=console(),
                ) as bar:
                    task = bar.add_task("", total=None)
                    async for p in engine.group_progress_updates(group_id, interval=interval):
                        bar.update(task, total=p.total, completed=p.done, description=describe(p))
                        last = p
                assert last is not None  # the updates yield at least once
                return last
            except GroupNotFound:
                raise CliError(f"no run group {group_id!r} in {url}", code=EXIT_NOT_FOUND) from None

    progress = run(call, url, verbose)
    if json:
        emit_json(progress.as_dict())
    elif not follow:
        width = 30
        filled = round(width * progress.fraction)
        bar = "#" * filled + "." * (width - filled)
        out = console()
        out.print(f"group {group_id} [{bar}] {progress.done}/{progress.total}", markup=False)
        out.print(describe(progress), markup=False)


def register(app: typer.Typer) -> None:
    """Add ``group`` to ``app``."""
    app.command("group")(group)
