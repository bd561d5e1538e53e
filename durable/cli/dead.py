"""Dead letters: ``durable dead`` lists them, ``durable requeue`` revives them.

A job is *dead* once it ran out of attempts (or was dead-lettered). ``dead``
reads every queue's dead jobs (or one queue's) from the read-only view of
each partition; ``requeue`` writes one request per job into the inbox of
the partition that holds it, and the owner gives the job a fresh set of
attempts (`durable.store.queue.Queue.requeue_dead_job`, with the request's
done record in the same transaction). ``requeue`` waits (``--wait``,
bounded) for those done records and reports each job: requeued, not dead
when the owner applied it (a job that is no longer dead is left as it is),
unknown; or still queued for the next owner when none applied it.
"""

from __future__ import annotations

from typing import Annotated, Any

import typer

from durable.cli.errors import EXIT_FAILED, EXIT_NOT_FOUND, EXIT_USAGE, CliError, run
from durable.cli.options import JsonFlag, OptionList, SigningKey, StoreArgs, UrlArg, VerboseFlag
from durable.cli.output import console, emit_json, format_time, table
from durable.cli.requests import (
    DEFAULT_WAIT,
    NoWaitFlag,
    WaitOption,
    client_runtime,
    queued_message,
    wait_all,
    wait_for,
)
from durable.cli.store import open_engine
from durable.cluster.client import ClientRuntime
from durable.cluster.done import DoneRecord
from durable.decorators.engine import Engine
from durable.engine.runs import HEADER_RUN_ID
from durable.errors import JobNotFound
from durable.store.queue import JobRecord, JobStatus

__all__ = ["dead_letters", "register"]


def _row(job: JobRecord) -> dict[str, Any]:
    return {
        "job_id": job.id,
        "queue": job.queue,
        "run_id": job.headers.get(HEADER_RUN_ID),
        "attempts": job.attempts,
        "max_attempts": job.max_attempts,
        "enqueued_ms": job.enqueued_at,
        "failed_ms": job.failed_at,
        "last_error": job.last_error,
    }


def dead_letters(engine: Engine, queue: str | None, limit: int) -> list[dict[str, Any]]:
    """Up to ``limit`` dead jobs of ``queue`` (every queue: None), every partition."""
    rows: list[dict[str, Any]] = []
    for part in engine.every_partition():
        view = part.queue.view
        for name in [queue] if queue is not None else view.list_queues():
            after: str | None = None
            while len(rows) < limit and (page := view.dead_jobs(name, after, 100)):
                rows.extend(_row(job) for job in page[: limit - len(rows)])
                after = page[-1].id
    return rows


def dead(
    url: UrlArg,
    queue: Annotated[
        str | None, typer.Option("--queue", "-q", help="Only this queue's dead jobs.")
    ] = None,
    limit: Annotated[int, typer.Option("--limit", min=1, help="At most this many.")] = 100,
    json: JsonFlag = False,
    option: OptionList = None,
    signing_key: SigningKey = None,
    verbose: VerboseFlag = False,
) -> None:
    """List dead jobs (out of attempts): id, queue, run, attempts, last error."""
    args = StoreArgs.of(url, option, signing_key, verbose)

    async def call() -> list[dict[str, Any]]:
        async with open_engine(args) as engine:
            return dead_letters(engine, queue, limit)

    rows = run(call, url, verbose)
    if json:
        emit_json({"dead": rows})
        return
    columns = ("job", "queue", "run", "attempts", "failed", "last error")
    console().print(
        table(
            f"dead jobs ({len(rows)})",
            columns,
            (
                (
                    r["job_id"],
                    r["queue"],
                    r["run_id"],
                    f"{r['attempts']}/{r['max_attempts']}",
                    format_time(r["failed_ms"]),
                    r["last_error"],
                )
                for r in rows
            ),
        )
    )


def requeue(
    url: UrlArg,
    job_ids: Annotated[
        list[str], typer.Argument(metavar="JOB_ID...", help="The dead jobs to requeue.")
    ],
    wait: WaitOption = DEFAULT_WAIT,
    no_wait: NoWaitFlag = False,
    option: OptionList = None,
    signing_key: SigningKey = None,
    verbose: VerboseFlag = False,
) -> None:
    """Give dead jobs a fresh set of attempts (requests the store's owner
    applies; waits for it and reports each job's outcome)."""
    args = StoreArgs.of(url, option, signing_key, verbose)
    seconds = wait_for(wait, no_wait)

    async def call() -> list[tuple[str, DoneRecord | None]]:
        async with open_engine(args) as engine:
            targets: list[tuple[ClientRuntime, str]] = []
            for job_id in job_ids:  # every id checked before any request is sent
                found = None
                for part in engine.every_partition():
                    record = part.queue.job_record(job_id)
                    if record is not None:
                        found = part, record
                        break
                if found is None:
                    raise JobNotFound(job_id)
                part, record = found
                if record.status is not JobStatus.DEAD:
                    raise CliError(
                        f"job {job_id!r} is not dead (it is {record.status.value})",
                        code=EXIT_USAGE,
                    )
                targets.append((client_runtime(part), job_id))
            posted = [(rt, await rt.requeue_dead(job_id)) for rt, job_id in targets]
            if seconds is None:
                return [(job_id, None) for _, job_id in targets]
            done = await wait_all(posted, seconds)
            return [(job_id, d) for (_, job_id), d in zip(targets, done, strict=True)]

    outcomes = run(call, url, verbose)
    code = 0
    for job_id, done in outcomes:
        if done is None:
            typer.echo(queued_message(f"requeue of job {job_id!r}", seconds))
        elif done.error is None:
            typer.echo(f"job {job_id!r} requeued")
        else:
            error = _REQUEUE_ERRORS.get(done.error_type or "")
            if error is None:
                line, status = f"requeue of job {job_id!r} failed: {done.error}", EXIT_FAILED
            else:
                line, status = error[0].format(job_id=job_id), error[1]
            typer.echo(f"error: {line}", err=True)
            code = code or status
    if code:
        raise typer.Exit(code)


#: The errors an owner records for a requeue: the line, the exit status.
_REQUEUE_ERRORS = {
    "InvalidState": ("job {job_id!r} was not dead when the owner applied the requeue", EXIT_USAGE),
    "JobNotFound": ("job {job_id!r} is unknown to the store's owner", EXIT_NOT_FOUND),
}


def register(app: typer.Typer) -> None:
    """Add ``dead`` and ``requeue`` to ``app``."""
    app.command("dead")(dead)
    app.command("requeue")(requeue)
