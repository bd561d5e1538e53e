"""How a command reaches its store: as a client, never creating anything.

`open_engine` checks the URL without I/O (an unknown scheme, a URL without
a bucket: `InvalidStoreUrl`), refuses a local path that is not an existing
directory, then enters ``Engine(url, role="client")``: it reads through
the read-only view (never fencing the owner) and writes only requests into
the store's inbox, which the owner applies. Opening a location that holds
no store raises `StoreNotInitialized` (no object is written: a client
engine creates nothing), which the CLI reports as "no durable store at
URL".
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from durable.cli.errors import EXIT_NOT_FOUND, CliError
from durable.cli.options import StoreArgs
from durable.decorators.engine import Engine
from durable.store.objects.url import check_store_url

__all__ = ["check_location", "open_engine"]


def check_location(url: str) -> None:
    """Refuse, without I/O beyond a ``stat``, a URL that cannot hold a store:
    `InvalidStoreUrl` for an unknown scheme, `CliError` for a local path
    that is not a directory."""
    protocol, rest = check_store_url(url)
    if protocol in ("file", "local") and not os.path.isdir(rest):
        what = "a file, not a directory" if os.path.exists(rest) else "no such directory"
        raise CliError(
            f"no durable store at {url} ({what})",
            "the CLI never creates one: start a worker (Engine(url)) there first",
            EXIT_NOT_FOUND,
        )


@asynccontextmanager
async def open_engine(args: StoreArgs) -> AsyncIterator[Engine]:
    """A client `Engine` on the store of ``args``; see the module docstring."""
    check_location(args.url)
    engine = Engine(
        args.url,
        role="client",
        storage_options=args.options or None,
        signing_key=args.signing_key,
    )
    async with engine:
        yield engine
