"""``durable kv get|scan``: the application's KV namespace, read-only.

Keys are given and shown as UTF-8 text; a value is printed as text when it
is UTF-8 and as base64 otherwise (``--json`` gives both forms). The
engine's own records (under its reserved prefix) are not part of it.
"""

from __future__ import annotations

import base64
from typing import Annotated, Any

import typer

from durable.cli.errors import EXIT_NOT_FOUND, CliError, run
from durable.cli.options import JsonFlag, OptionList, SigningKey, StoreArgs, UrlArg, VerboseFlag
from durable.cli.output import console, emit_json, format_bytes, table
from durable.cli.store import open_engine

__all__ = ["encode_value", "register"]

app = typer.Typer(help="Read the application's KV namespace.", no_args_is_help=True)

#: Characters of a value shown in a scan's table.
_PREVIEW = 60


def encode_value(key: bytes, value: bytes) -> dict[str, Any]:
    """A KV entry as JSON: its key, size, text (None unless UTF-8) and base64."""
    try:
        text: str | None = value.decode()
    except UnicodeDecodeError:
        text = None
    return {
        "key": key.decode(errors="replace"),
        "size": len(value),
        "text": text,
        "base64": base64.b64encode(value).decode(),
    }


@app.command("get")
def get(
    url: UrlArg,
    key: Annotated[str, typer.Argument(metavar="KEY", help="The key (UTF-8 text).")],
    json: JsonFlag = False,
    option: OptionList = None,
    signing_key: SigningKey = None,
    verbose: VerboseFlag = False,
) -> None:
    """Print one key's value."""
    args = StoreArgs.of(url, option, signing_key, verbose)

    async def call() -> bytes:
        async with open_engine(args) as engine:
            for part in engine.every_partition():
                value = part.queue.kv.get(key.encode())
                if value is not None:
                    return value
        raise CliError(f"no key {key!r} in the KV namespace of {url}", code=EXIT_NOT_FOUND)

    value = run(call, url, verbose)
    entry = encode_value(key.encode(), value)
    if json:
        emit_json(entry)
    elif entry["text"] is not None:
        typer.echo(entry["text"])
    else:
        typer.echo(f"(binary, {len(value)} bytes, base64) {entry['base64']}")


@app.command("scan")
def scan(
    url: UrlArg,
    prefix: Annotated[str, typer.Argument(metavar="[PREFIX]", help="Keys starting with it.")] = "",
    limit: Annotated[int, typer.Option("--limit", min=1, help="At most this many.")] = 100,
    json: JsonFlag = False,
    option: OptionList = None,
    signing_key: SigningKey = None,
    verbose: VerboseFlag = False,
) -> None:
    """List the keys under PREFIX (all keys without one), in key order."""
    args = StoreArgs.of(url, option, signing_key, verbose)

    async def call() -> tuple[list[tuple[bytes, bytes]], bool]:
        rows: list[tuple[bytes, bytes]] = []
        more = False
        async with open_engine(args) as engine:
            for part in engine.every_partition():
                page = part.queue.kv.scan(prefix.encode(), limit=limit)
                rows.extend(page.entries)
                more = more or page.more
        rows.sort()
        return rows[:limit], more or len(rows) > limit

    rows, more = run(call, url, verbose)
    entries = [encode_value(k, v) for k, v in rows]
    if json:
        emit_json({"prefix": prefix, "entries": entries, "more": more})
        return
    title = f"keys under {prefix!r}" + (f" (first {limit})" if more else f" ({len(rows)})")
    console().print(
        table(
            title,
            ("key", "size", "value"),
            (
                (
                    e["key"],
                    format_bytes(e["size"]),
                    (e["text"] if e["text"] is not None else "(binary)")[:_PREVIEW],
                )
                for e in entries
            ),
        )
    )


def register(root: typer.Typer) -> None:
    """Add the ``kv`` group to ``root``."""
    root.add_typer(app, name="kv")
