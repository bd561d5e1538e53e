"""Waiting for the store's owner to apply a request (``--wait``, ``--no-wait``).

The commands that write (``cancel``, ``signal``, ``requeue``, ``forget``)
post a request into the store's inbox, then by default wait, bounded, for
the owner's done record of it (`ClientRuntime.wait_done`), and report what
happened: applied, or the error the owner recorded (a job that is not dead,
an unknown job, a run that is active). When no owner applies it within the
wait (none is running), the command says that the request stays queued for
the next owner and exits 0: the request is durable.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Annotated

import typer

from durable.cli.errors import CliError
from durable.cluster.client import ClientRuntime
from durable.cluster.done import DoneRecord
from durable.cluster.inbox import Posted
from durable.decorators.base import EngineBase

__all__ = [
    "DEFAULT_WAIT",
    "NoWaitFlag",
    "WaitOption",
    "client_runtime",
    "queued_message",
    "wait_all",
    "wait_for",
]

#: How long a command waits for the owner by default (seconds).
DEFAULT_WAIT = 30.0

WaitOption = Annotated[
    float,
    typer.Option(
        "--wait",
        metavar="SECONDS",
        min=0,
        help="Wait up to SECONDS for the store's owner to apply the request, and report it.",
    ),
]
NoWaitFlag = Annotated[
    bool, typer.Option("--no-wait", help="Only post the request; do not wait for the owner.")
]


def wait_for(wait: float, no_wait: bool) -> float | None:
    """The seconds to wait (None: do not wait)."""
    return None if no_wait else wait


def client_runtime(part: EngineBase) -> ClientRuntime:
    """The client runtime of ``part`` (a CLI engine is a client)."""
    runtime = part.workflows.default
    if not isinstance(runtime, ClientRuntime):  # pragma: no cover - open_engine makes clients
        raise CliError("the CLI must open the store as a client")
    return runtime


async def wait_all(
    posted: Sequence[tuple[ClientRuntime, Posted]], seconds: float
) -> list[DoneRecord | None]:
    """The done record of each posted request (None: not applied within
    ``seconds``, counted from now for all of them)."""
    return list(await asyncio.gather(*(rt.wait_done(p, seconds) for rt, p in posted)))


def queued_message(what: str, seconds: float | None) -> str:
    """What a command says of a request no owner applied within the wait."""
    if seconds is None:
        return f"{what} posted: the store's owner applies it (not waited for)"
    return (
        f"{what} posted, not applied within {seconds:g} s: no owner is applying requests "
        "now; it stays queued in the store's inbox for the next owner"
    )
