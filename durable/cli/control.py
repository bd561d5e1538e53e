"""Run control: ``durable cancel``, ``resume``, ``forget``, ``fork``, ``signal``.

Each writes through the client path: a request in the store's inbox that
the store's owner applies (a running worker), so the CLI never fences the
owner. A request is durable when it is posted; ``cancel``, ``forget`` and
``signal`` then wait (``--wait SECONDS``, default 30; ``--no-wait`` to only
post) for the owner's done record and report the outcome. With no owner
running, the request stays queued for the next one (exit status 0).

``cancel``, ``resume`` and ``forget`` take a RUN_ID, or instead the run
listing's filters (`durable.cli.filters`): the bulk form prints how many
runs match (a dry run) first, asks for confirmation unless ``--yes`` (and
refuses without a terminal), then acts on every matching run the action
applies to (``engine.cancel_runs``, ``resume_runs``, ``forget_runs``) and
prints how many.
"""

from __future__ import annotations

import asyncio
import importlib
import os
import sys
from collections.abc import Awaitable, Callable
from typing import Annotated, Any

import typer

from durable.cli.errors import EXIT_FAILED, EXIT_NOT_FOUND, EXIT_USAGE, CliError, run, usage_error
from durable.cli.filters import (
    AttributeList,
    RunFilter,
    StartedAfter,
    StartedBefore,
    StateList,
    WorkflowList,
)
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
from durable.cli.requests import (
    DEFAULT_WAIT,
    NoWaitFlag,
    WaitOption,
    client_runtime,
    queued_message,
    wait_for,
)
from durable.cli.store import open_engine
from durable.cluster.done import DoneRecord
from durable.decorators.control import forget_request
from durable.decorators.engine import Engine
from durable.decorators.status import read_status
from durable.engine.runs import validate_run_id
from durable.errors import RunNotFound, WrongRunState

__all__ = ["confirm_bulk", "import_modules", "register", "run_selection"]

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
OptionalRunId = Annotated[
    str | None,
    typer.Argument(
        metavar="[RUN_ID]",
        help="The run's id; or none, and the listing's filters select the runs.",
        show_default=False,
    ),
]
YesFlag = Annotated[
    bool, typer.Option("--yes", "-y", help="Act on the matching runs without asking.")
]
DryRunFlag = Annotated[
    bool, typer.Option("--dry-run", help="Only count the matching runs; change nothing.")
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


def run_selection(
    run_id: str | None,
    states: list[str] | None,
    workflows: list[str] | None,
    started_after: str | None,
    started_before: str | None,
    attributes: list[str] | None,
    command: str,
) -> RunFilter | None:
    """None for one run (``run_id``), else the filter of the bulk form;
    a usage error for both or neither."""
    f = RunFilter.of(states, workflows, started_after, started_before, attributes)
    if run_id is not None and not f.empty:
        usage_error(f"durable {command}: give a RUN_ID or filters, not both")
    if run_id is None and f.empty:
        usage_error(
            f"durable {command}: give a RUN_ID, or filters (--state, --workflow, "
            "--started-after, --started-before, --attribute) to select runs"
        )
    return None if run_id is not None else f


def confirm_bulk(action: str, count: int, f: RunFilter, yes: bool) -> bool:
    """Print the dry run's count; True to go on: ``yes``, or the user says
    so at a terminal. Without a terminal and without ``yes``: a usage error."""
    typer.echo(f"{count} run(s) match ({f.describe()}): {action} would apply to them")
    if count == 0 or yes:
        return count > 0
    if not sys.stdin.isatty():
        usage_error(
            f"not a terminal: refusing to {action} {count} run(s) without --yes",
            "pass --yes to act without asking (or --dry-run to only count)",
        )
    return typer.confirm(f"{action} {count} run(s)?", default=False)


def _bulk(
    args: StoreArgs,
    action: str,
    f: RunFilter,
    yes: bool,
    dry_run: bool,
    act: Callable[[Engine, RunFilter], Awaitable[int]],
    done: str,
) -> None:
    """A bulk command: count, confirm, act, report."""

    async def count() -> int:
        async with open_engine(args) as engine:
            method = getattr(engine, f"{action}_runs")
            n: int = await method(dry_run=True, **f.listing_kwargs())
            return n

    n = run(count, args.url, args.verbose)
    if dry_run:
        typer.echo(f"{n} run(s) match ({f.describe()}): {action} would apply to them")
        return
    if not confirm_bulk(action, n, f, yes):
        if n:
            typer.echo("nothing done")
        return

    async def call() -> int:
        async with open_engine(args) as engine:
            return await act(engine, f)

    acted = run(call, args.url, args.verbose)
    typer.echo(f"{done} {acted} run(s)")


def _report_done(what: str, done: DoneRecord | None, seconds: float | None) -> str:
    """The line for a request's outcome; `CliError` for the error it met."""
    if done is None:
        return queued_message(what, seconds)
    if done.error is None:
        return f"{what}: applied by the store's owner"
    code = EXIT_NOT_FOUND if done.error_type == "RunNotFound" else EXIT_FAILED
    raise CliError(
        f"{what} failed in the store's owner: {done.error_type}: {done.error}", code=code
    )


def cancel(
    url: UrlArg,
    run_id: OptionalRunId = None,
    state: StateList = None,
    workflow: WorkflowList = None,
    started_after: StartedAfter = None,
    started_before: StartedBefore = None,
    attribute: AttributeList = None,
    yes: YesFlag = False,
    dry_run: DryRunFlag = False,
    wait: WaitOption = DEFAULT_WAIT,
    no_wait: NoWaitFlag = False,
    option: OptionList = None,
    signing_key: SigningKey = None,
    verbose: VerboseFlag = False,
) -> None:
    """Cancel a run and its child runs, or every active run the filters
    select (requests the store's owner applies)."""
    args = StoreArgs.of(url, option, signing_key, verbose)
    seconds = wait_for(wait, no_wait)
    f = run_selection(run_id, state, workflow, started_after, started_before, attribute, "cancel")
    if f is not None:

        async def act(engine: Engine, f: RunFilter) -> int:
            return await engine.cancel_runs(**f.listing_kwargs())

        _bulk(args, "cancel", f, yes, dry_run, act, "cancel requested for")
        return
    assert run_id is not None

    async def call() -> str:
        validate_run_id(run_id)
        async with open_engine(args) as engine:
            status = await read_status(engine, run_id)
            if status is None:
                raise RunNotFound(run_id, "durable cancel")
            if status.terminated:
                return f"run {run_id!r} has terminated already ({status.state.value.lower()})"
            runtime = client_runtime(engine.for_run(run_id))
            posted = await runtime.post_cancel(run_id)
            if posted is None:
                return f"run {run_id!r} has terminated already"
            what = f"cancel of run {run_id!r}"
            done = None if seconds is None else await runtime.wait_done(posted, seconds)
            return _report_done(what, done, seconds)

    typer.echo(run(call, url, verbose))


def resume(
    url: UrlArg,
    run_id: OptionalRunId = None,
    state: StateList = None,
    workflow: WorkflowList = None,
    started_after: StartedAfter = None,
    started_before: StartedBefore = None,
    attribute: AttributeList = None,
    yes: YesFlag = False,
    dry_run: DryRunFlag = False,
    option: OptionList = None,
    signing_key: SigningKey = None,
    verbose: VerboseFlag = False,
) -> None:
    """Continue a failed or cancelled run from its last journaled step, or
    every such run the filters select (finished steps do not run again)."""
    args = StoreArgs.of(url, option, signing_key, verbose)
    f = run_selection(run_id, state, workflow, started_after, started_before, attribute, "resume")
    if f is not None:

        async def act(engine: Engine, f: RunFilter) -> int:
            return await engine.resume_runs(**f.listing_kwargs())

        _bulk(args, "resume", f, yes, dry_run, act, "resume requested for")
        return
    assert run_id is not None

    async def call() -> None:
        async with open_engine(args) as engine:
            await engine.resume(run_id)

    run(call, url, verbose)
    typer.echo(f"resume of run {run_id!r} requested (the store's owner runs it)")


def forget(
    url: UrlArg,
    run_id: OptionalRunId = None,
    state: StateList = None,
    workflow: WorkflowList = None,
    started_after: StartedAfter = None,
    started_before: StartedBefore = None,
    attribute: AttributeList = None,
    yes: YesFlag = False,
    dry_run: DryRunFlag = False,
    wait: WaitOption = DEFAULT_WAIT,
    no_wait: NoWaitFlag = False,
    option: OptionList = None,
    signing_key: SigningKey = None,
    verbose: VerboseFlag = False,
) -> None:
    """Delete a terminated run and everything it stored, or every terminated
    run the filters select."""
    args = StoreArgs.of(url, option, signing_key, verbose)
    seconds = wait_for(wait, no_wait)
    f = run_selection(run_id, state, workflow, started_after, started_before, attribute, "forget")
    if f is not None:

        async def act(engine: Engine, f: RunFilter) -> int:
            try:  # a bulk forget waits for the owner (up to --wait) to count
                async with asyncio.timeout(wait):
                    return await engine.forget_runs(**f.listing_kwargs())
            except TimeoutError:
                raise CliError(
                    f"not every forget was applied within {wait:g} s: no owner is "
                    "applying requests now",
                    "the requests stay queued in the store's inbox for the next owner",
                    EXIT_FAILED,
                ) from None

        _bulk(args, "forget", f, yes, dry_run, act, "forgot")
        return
    assert run_id is not None

    async def call() -> str:
        validate_run_id(run_id)
        async with open_engine(args) as engine:
            status = await read_status(engine, run_id)
            if status is None:
                raise RunNotFound(run_id, "durable forget")
            if not status.terminated:
                raise WrongRunState(
                    run_id, "durable forget", status.state.value.lower(), "terminated"
                )
            runtime = client_runtime(engine.for_run(run_id))
            what = f"forget of run {run_id!r}"
            if seconds is None:
                await runtime.post_forget(run_id)
                return queued_message(what, None)
            if await forget_request(runtime, run_id, seconds):
                return f"run {run_id!r} forgotten"
            return queued_message(what, seconds)

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
            try:  # the owner applies the submission: wait until the view shows the run
                await engine.for_run(handle.run_id).workflows.default.until_visible(
                    handle.run_id, DEFAULT_WAIT
                )
            except TimeoutError:
                typer.echo(
                    queued_message(f"the fork's submission {handle.run_id!r}", DEFAULT_WAIT),
                    err=True,
                )
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
    wait: WaitOption = DEFAULT_WAIT,
    no_wait: NoWaitFlag = False,
    option: OptionList = None,
    signing_key: SigningKey = None,
    verbose: VerboseFlag = False,
) -> None:
    """Send VALUE to the run waiting on KEY (or buffer it for the next one)."""
    args = StoreArgs.of(url, option, signing_key, verbose)
    payload: Any = parse_json_or_text(value)
    seconds = wait_for(wait, no_wait)

    async def call() -> str:
        async with open_engine(args) as engine:
            data = engine.codec.dumps(payload, what=f"the signal for {key!r}")
            runtime = client_runtime(engine.for_key(key))
            posted = await runtime.post_signal(key, data)
            done = None if seconds is None else await runtime.wait_done(posted, seconds)
            line = _report_done(f"signal {key!r}", done, seconds)
            if done is not None:
                line += " (delivered to the run waiting on it, or buffered for the next)"
            return line

    typer.echo(run(call, url, verbose))


def register(app: typer.Typer) -> None:
    """Add ``cancel``, ``resume``, ``forget``, ``fork`` and ``signal`` to ``app``."""
    app.command("cancel")(cancel)
    app.command("resume")(resume)
    app.command("forget")(forget)
    app.command("fork")(fork)
    app.command("signal")(signal)
