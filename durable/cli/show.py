"""``durable show URL RUN_ID``: one run, every position of its journal.

`describe_run` gathers what the store holds of a run as a plain dict (the
``--json`` document; the HTML view can reuse it): its status (state,
workflow, current step, error), what it waits on (a signal key, a timer, a
child run), every journal position (kind, step name, attempts, start, end,
duration, result size, error), its children with their states, the keys it
published, and its attributes where the store records them.

Nothing is unpickled: errors are read from their exception records (type
and message) with a codec that refuses pickles, and results are measured,
not decoded.
"""

from __future__ import annotations

from typing import Any

import typer

from durable.cli.errors import run
from durable.cli.options import (
    JsonFlag,
    OptionList,
    RunIdArg,
    SigningKey,
    StoreArgs,
    UrlArg,
    VerboseFlag,
)
from durable.cli.output import (
    console,
    emit_json,
    fields_table,
    format_bytes,
    format_duration,
    format_time,
    table,
)
from durable.cli.store import open_engine
from durable.decorators.archive import load_journal, read_archive
from durable.decorators.base import EngineBase
from durable.decorators.codec import Codec
from durable.decorators.journal import CHILD, SIGNAL, SLEEP, START, Entry, Journal
from durable.decorators.publish import published_prefix
from durable.decorators.status import WorkflowStatus, read_status
from durable.engine.runs import validate_run_id
from durable.errors import CodecError, RunNotFound, WorkflowFailed

__all__ = ["describe_run", "register", "render_run"]

#: Decodes exception records without unpickling anything.
_SAFE = Codec(mode="msgpack")
#: A wait whose deadline lies this far after its start has no timeout (the
#: engine records ten years for a signal wait without one).
_NO_TIMEOUT_MS = 5 * 365 * 24 * 3600 * 1000


def error_text(data: bytes, what: str, run_id: str) -> str:
    """``Type: message`` of a stored exception record."""
    try:
        error = _SAFE.loads_error(data, what=what, run_id=run_id)
    except CodecError as e:
        return f"(undecodable: {e})"
    if isinstance(error, WorkflowFailed):
        return f"{error.type_name.rpartition('.')[2]}: {error.message}"
    return f"{type(error).__name__}: {error}"


async def _position(journal: Journal, position: int, entry: Entry) -> dict[str, Any]:
    ok, err = await journal.values(position, entry) if entry.ref else (entry.ok, entry.err)
    row: dict[str, Any] = {"position": position, "kind": entry.kind, "name": entry.name}
    if entry.kind == START and not entry.resolved:
        row["state"] = "started"
    elif err is not None:
        row["state"] = "failed"
    elif entry.resolved:
        row["state"] = "done"
    else:
        row["state"] = "waiting" if entry.kind in (SIGNAL, CHILD) else "done"
    row["attempts"] = entry.attempts or None
    row["started_ms"] = entry.started or None
    if entry.kind == SLEEP:
        row["wakes_at_ms"] = entry.time or None
    elif entry.kind == SIGNAL:
        row["deadline_ms"] = entry.time or None
    else:
        row["ended_ms"] = entry.time if entry.resolved and entry.time else None
    ended = row.get("ended_ms")
    row["duration_ms"] = ended - entry.started if ended and entry.started else None
    row["result_bytes"] = None if ok is None else len(ok)
    what = f"the error at position {position} of run {journal.run_id!r}"
    row["error"] = None if err is None else error_text(err, what, journal.run_id)
    if entry.kind == SIGNAL:
        row["signal_key"] = entry.key
    elif entry.kind == CHILD:
        row["child_run_id"] = entry.key
    return row


def _status_fields(status: WorkflowStatus) -> dict[str, Any]:
    waiting = status.waiting
    waits: dict[str, Any] | None = None
    if waiting is not None:
        timeout = waiting.until_ms - waiting.since_ms < _NO_TIMEOUT_MS
        waits = {
            "signal_key": waiting.signal_key,
            "child_run_id": waiting.child_run_id,
            "timer": waiting.signal_key is None,
            "since_ms": waiting.since_ms,
            "until_ms": waiting.until_ms if timeout or waiting.signal_key is None else None,
        }
    return {
        "run_id": status.run_id,
        "workflow": status.workflow,
        "version": status.version,
        "state": status.state.value.lower(),
        "steps": status.steps,
        "current_step": status.current_step,
        "waiting": waits,
        "error_type": status.error_type,
        "error": status.error,
        "cancel_requested": status.cancel_requested,
        "incarnation": status.incarnation,
        # Seam: run attributes, once the run index records them.
        "attributes": dict(getattr(status, "attributes", None) or {}),
    }


async def _published(engine: EngineBase, run_id: str, terminated: bool) -> dict[str, int]:
    """Every key run ``run_id`` published, with its stored size."""
    kv = engine.for_run(run_id).queue.kv.internal()
    prefix = published_prefix(run_id)
    found = {k[len(prefix) :].decode(): len(v) for k, v in kv.snapshot(prefix)}
    if not found and terminated:
        archive = await read_archive(engine, run_id)
        found = {k: len(v) for k, v in archive.published.items()}
    return dict(sorted(found.items()))


async def describe_run(engine: EngineBase, run_id: str) -> dict[str, Any]:
    """Everything `show` prints of run ``run_id``; `RunNotFound` if unknown."""
    validate_run_id(run_id)
    status = await read_status(engine, run_id)
    if status is None:
        raise RunNotFound(run_id, "durable show")
    document = _status_fields(status)
    journal = await load_journal(engine, run_id)
    document["positions"] = [await _position(journal, p, e) for p, e in journal.entries()]
    children = []
    for child in journal.children():
        child_status = await read_status(engine, child)
        state = None if child_status is None else child_status.state.value.lower()
        workflow = None if child_status is None else child_status.workflow
        children.append({"run_id": child, "workflow": workflow, "state": state})
    document["children"] = children
    document["published"] = await _published(engine, run_id, status.terminated)
    return document


def _waits_text(waits: dict[str, Any] | None) -> str | None:
    if waits is None:
        return None
    until = format_time(waits["until_ms"])
    if waits["timer"]:
        return f"a timer, until {until}"
    text = f"signal {waits['signal_key']!r}"
    if waits["child_run_id"]:
        text = f"child run {waits['child_run_id']!r} ({text})"
    return f"{text}, timeout at {until}" if until else f"{text}, no timeout"


def render_run(document: dict[str, Any]) -> None:
    """Print `describe_run`'s document as tables."""
    out = console()
    attributes = ", ".join(f"{k}={v}" for k, v in document["attributes"].items())
    out.print(
        fields_table(
            {
                "run": document["run_id"],
                "workflow": document["workflow"] or "(unknown)",
                "version": document["version"],
                "state": document["state"],
                "steps journaled": document["steps"],
                "current step": document["current_step"],
                "waits on": _waits_text(document["waiting"]),
                "error": ": ".join(x for x in (document["error_type"], document["error"]) if x),
                "cancel requested": "yes" if document["cancel_requested"] else None,
                "continued as new": document.get("incarnation") or None,
                "attributes": attributes,
            }
        )
    )
    rows = []
    for p in document["positions"]:
        detail = p.get("signal_key") or p.get("child_run_id") or ""
        if p["kind"] == SLEEP:
            detail = f"until {format_time(p.get('wakes_at_ms'))}"
        elif p["kind"] == SIGNAL:
            detail = f"key {detail!r}"
        elif p["kind"] == CHILD:
            detail = f"run {detail!r}"
        rows.append(
            (
                p["position"],
                p["kind"],
                p["name"],
                p["state"],
                p["attempts"],
                format_duration(p["duration_ms"]),
                format_bytes(p["result_bytes"]),
                p["error"],
                detail,
            )
        )
    columns = ("#", "kind", "name", "state", "attempts", "duration", "result", "error", "detail")
    out.print(table("journal", columns, rows))
    if document["children"]:
        out.print(
            table(
                "children",
                ("run", "workflow", "state"),
                ((c["run_id"], c["workflow"], c["state"]) for c in document["children"]),
            )
        )
    if document["published"]:
        out.print(
            table(
                "published",
                ("key", "size"),
                ((k, format_bytes(n)) for k, n in document["published"].items()),
            )
        )


def show(
    url: UrlArg,
    run_id: RunIdArg,
    json: JsonFlag = False,
    option: OptionList = None,
    signing_key: SigningKey = None,
    verbose: VerboseFlag = False,
) -> None:
    """Show one run: its state, what it waits on, every journal position,
    its children, its published keys."""
    args = StoreArgs.of(url, option, signing_key, verbose)

    async def call() -> dict[str, Any]:
        async with open_engine(args) as engine:
            return await describe_run(engine, run_id)

    document = run(call, url, verbose)
    if json:
        emit_json(document)
    else:
        render_run(document)


def register(app: typer.Typer) -> None:
    """Add ``show`` to ``app``."""
    app.command("show")(show)
