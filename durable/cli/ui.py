"""``durable ui URL``: serve the read-only run view (`durable.ui`) on this host."""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from durable.cli.errors import fail, run
from durable.cli.options import OptionList, SigningKey, StoreArgs, UrlArg, VerboseFlag
from durable.cli.store import open_engine

__all__ = ["register"]


def _ready(address: str) -> None:
    print(f"serving {address}", flush=True)
    print("press Ctrl-C to stop", file=sys.stderr, flush=True)


def ui(
    url: UrlArg,
    port: Annotated[
        int, typer.Option("--port", "-p", help="The port to listen on (0: a free one).")
    ] = 8765,
    host: Annotated[
        str, typer.Option("--host", help="The address to listen on (default: this host only).")
    ] = "127.0.0.1",
    option: OptionList = None,
    signing_key: SigningKey = None,
    verbose: VerboseFlag = False,
) -> None:
    """Serve a read-only page of the store's runs, their timelines and groups.
    Prints the address it serves as its first line; stops on Ctrl-C."""
    from durable.ui import serve

    args = StoreArgs.of(url, option, signing_key, verbose)

    async def call() -> None:
        async with open_engine(args) as engine:
            try:
                await serve(engine, url, host=host, port=port, ready=_ready, access_log=verbose)
            except OSError as e:  # the store's errors come from open_engine, before
                fail(f"cannot listen on {host}:{port}: {e.strerror or e}", "pick another --port")

    run(call, url, verbose)


def register(app: typer.Typer) -> None:
    """Add ``ui`` to ``app``."""
    app.command("ui")(ui)
