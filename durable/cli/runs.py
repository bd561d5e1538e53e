"""``durable runs URL`` lists runs by the listing's filters; ``durable watch
URL`` keeps that list on screen, refreshed.

Both read ``engine.runs(...)`` (the run index, in memory: no object read
per run) on a client engine, newest first. ``runs --json`` prints one JSON
document, ``{"runs": [summary, ...], "cursor": ...}``, each summary as
`RunSummary.as_dict` has it (``state`` one of pending, running, waiting,
succeeded, failed, cancelled); ``cursor`` is that of the next page (null on
the last), for ``--cursor``. ``--all`` follows the cursors to the end.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Annotated, Any

import typer
from rich.live import Live
from rich.table import Table

from durable.cli.errors import run
from durable.cli.filters import (
    AttributeList,
    RunFilter,
    StartedAfter,
    StartedBefore,
    StateList,
    WorkflowList,
)
from durable.cli.options import JsonFlag, OptionList, SigningKey, StoreArgs, UrlArg, VerboseFlag
from durable.cli.output import console, emit_json, table
from durable.cli.store import open_engine
from durable.decorators.engine import Engine
from durable.decorators.listing import RunSummary

__all__ = ["list_runs", "register", "runs_table"]

LimitOption = Annotated[
    int, typer.Option("--limit", "-n", min=1, max=1000, help="At most this many runs a page.")
]

_COLUMNS = ("run", "workflow", "state", "started", "ended", "steps", "now", "error", "attributes")


def _row(s: RunSummary) -> Sequence[object]:
    now = s.current_step or ""
    if s.waiting is not None:
        now = f"signal {s.waiting.signal_key!r}" if s.waiting.signal_key else "timer"
    error = f"{s.error_type}: {s.error}" if s.error_type else ""
    return (
        s.run_id,
        s.workflow,
        s.state.value + (" (cancel requested)" if s.cancel_requested else ""),
        s.started.strftime("%Y-%m-%d %H:%M:%S"),
        "" if s.ended is None else s.ended.strftime("%Y-%m-%d %H:%M:%S"),
        f"{s.steps} (incarnation {s.incarnation})" if s.incarnation else s.steps,
        now,
        error,
        " ".join(f"{k}={v}" for k, v in sorted(s.attributes.items())),
    )


def runs_table(summaries: Sequence[RunSummary], title: str) -> Table:
    """A rich table of ``summaries``."""
    return table(title, _COLUMNS, (_row(s) for s in summaries))


async def list_runs(
    engine: Engine, f: RunFilter, limit: int, cursor: str | None, every_page: bool
) -> tuple[list[RunSummary], str | None]:
    """The runs ``f`` selects, a page of ``limit`` from ``cursor`` (every
    page when ``every_page``), and the next page's cursor."""
    found: list[RunSummary] = []
    while True:
        page = await engine.runs(limit=limit, cursor=cursor, **f.listing_kwargs())
        found.extend(page.runs)
        cursor = page.cursor
        if not every_page or cursor is None:
            return found, cursor


def runs(
    url: UrlArg,
    state: StateList = None,
    workflow: WorkflowList = None,
    started_after: StartedAfter = None,
    started_before: StartedBefore = None,
    attribute: AttributeList = None,
    limit: LimitOption = 50,
    cursor: Annotated[
        str | None, typer.Option("--cursor", help="Start at this cursor (from a page before).")
    ] = None,
    every_page: Annotated[bool, typer.Option("--all", help="Every page, not one.")] = False,
    json: JsonFlag = False,
    option: OptionList = None,
    signing_key: SigningKey = None,
    verbose: VerboseFlag = False,
) -> None:
    """List runs, newest first, by state, workflow, start time, attributes."""
    args = StoreArgs.of(url, option, signing_key, verbose)
    f = RunFilter.of(state, workflow, started_after, started_before, attribute)

    async def call() -> tuple[list[RunSummary], str | None]:
        async with open_engine(args) as engine:
            return await list_runs(engine, f, limit, cursor, every_page)

    found, next_cursor = run(call, url, verbose)
    if json:
        emit_json({"runs": [s.as_dict() for s in found], "cursor": next_cursor})
        return
    out = console()
    out.print(runs_table(found, f"runs ({len(found)}; {f.describe()})"))
    if next_cursor is not None:
        out.print(f"more: --cursor {next_cursor}")


def watch(
    url: UrlArg,
    state: StateList = None,
    workflow: WorkflowList = None,
    started_after: StartedAfter = None,
    started_before: StartedBefore = None,
    attribute: AttributeList = None,
    limit: LimitOption = 30,
    interval: Annotated[
        float, typer.Option("--interval", min=0.05, help="Seconds between refreshes.")
    ] = 2.0,
    iterations: Annotated[
        int | None,
        typer.Option("--iterations", min=1, help="Stop after N refreshes (default: never)."),
    ] = None,
    option: OptionList = None,
    signing_key: SigningKey = None,
    verbose: VerboseFlag = False,
) -> None:
    """Keep the run list on screen, refreshed every --interval seconds (Ctrl-C ends it)."""
    args = StoreArgs.of(url, option, signing_key, verbose)
    f = RunFilter.of(state, workflow, started_after, started_before, attribute)

    async def call() -> None:
        async with open_engine(args) as engine:
            out = console()
            shown = 0
            with Live(console=out, auto_refresh=False, transient=False) as live:
                while True:
                    found, more = await list_runs(engine, f, limit, None, False)
                    title = f"runs ({len(found)}{'+' if more else ''}; {f.describe()})"
                    live.update(runs_table(found, title), refresh=True)
                    shown += 1
                    if iterations is not None and shown >= iterations:
                        return
                    await asyncio.sleep(interval)  # the refresh pace (each listing polls the log)

    run(call, url, verbose)


def summaries_by_state(found: Sequence[RunSummary]) -> dict[str, Any]:
    """How many of ``found`` are in each state."""
    counts: dict[str, int] = {}
    for s in found:
        counts[s.state.value] = counts.get(s.state.value, 0) + 1
    return counts


def register(app: typer.Typer) -> None:
    """Add ``runs`` and ``watch`` to ``app``."""
    app.command("runs")(runs)
    app.command("watch")(watch)
