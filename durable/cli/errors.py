"""How the CLI fails: at most two lines on stderr, a non-zero exit status.

Every error a command meets becomes a `CliError`: a first line that names
the thing (the URL, the path, the run id, the object's key), an optional
second line that says what to do, and an exit status:

| status | meaning |
|---|---|
| 0 | done |
| 1 | the operation failed (a store error, a refused request) |
| 2 | bad usage: an unknown URL scheme, a bad option or value |
| 3 | not found: no store at the URL, no such run, job or key |
| 4 | a corrupt object or record in the store |

No traceback and no log line reaches the terminal unless ``--verbose``,
which also routes the ``durable.*`` loggers to stderr.
"""

from __future__ import annotations

import asyncio
import logging
import sys
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from typing import NoReturn, TypeVar

import typer

from durable.errors import (
    BlobMissing,
    CodecMismatch,
    CorruptEngineRecord,
    CorruptObject,
    CorruptRecord,
    CorruptRequest,
    DurableError,
    InvalidArgument,
    InvalidId,
    InvalidStoreUrl,
    JobNotFound,
    RunNotFound,
    StoreNotFound,
    StoreNotInitialized,
    UnknownWorkflow,
    UnsupportedFormat,
)

__all__ = [
    "EXIT_CORRUPT",
    "EXIT_FAILED",
    "EXIT_NOT_FOUND",
    "EXIT_USAGE",
    "CliError",
    "exit_with",
    "fail",
    "run",
    "setup_logging",
    "translate",
    "usage_error",
]

EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_NOT_FOUND = 3
EXIT_CORRUPT = 4

T = TypeVar("T")


class CliError(Exception):
    """An error the CLI reports in at most two lines with exit status ``code``."""

    def __init__(self, message: str, hint: str | None = None, code: int = EXIT_FAILED) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint
        self.code = code

    def lines(self) -> list[str]:
        """The lines printed on stderr (one or two)."""
        first = " ".join(self.message.split())
        return [f"error: {first}"] + ([" ".join(self.hint.split())] if self.hint else [])


def exit_with(error: CliError) -> NoReturn:
    """Print ``error``'s lines on stderr and end with its status (for an
    error met outside `run`: a bad option value, a refused confirmation)."""
    for line in error.lines():
        typer.echo(line, err=True)
    raise typer.Exit(error.code)


def usage_error(message: str, hint: str | None = None) -> NoReturn:
    """End with a usage error (status 2) of at most two lines."""
    exit_with(CliError(message, hint, EXIT_USAGE))


def fail(message: str, hint: str | None = None, code: int = EXIT_FAILED) -> NoReturn:
    """Raise a `CliError`."""
    raise CliError(message, hint, code)


def translate(error: BaseException, url: str) -> CliError:
    """The `CliError` of an exception a command raised on the store at ``url``."""
    if isinstance(error, CliError):
        return error
    text = str(error)
    if isinstance(error, InvalidStoreUrl):
        return CliError(text, code=EXIT_USAGE)
    if isinstance(error, StoreNotInitialized | StoreNotFound):
        return CliError(
            f"no durable store at {url}",
            "the CLI never creates one: start a worker (Engine(url)) there first",
            EXIT_NOT_FOUND,
        )
    if isinstance(error, RunNotFound):
        return CliError(f"no run {error.run_id!r} in {url}", code=EXIT_NOT_FOUND)
    if isinstance(error, JobNotFound):
        return CliError(text + f" in {url}", code=EXIT_NOT_FOUND)
    if isinstance(error, CorruptObject | CorruptRequest):
        return CliError(text, code=EXIT_CORRUPT)
    if isinstance(error, CorruptEngineRecord | CorruptRecord | UnsupportedFormat | BlobMissing):
        return CliError(f"{text} (store {url})", code=EXIT_CORRUPT)
    if isinstance(error, CodecMismatch):
        return CliError(
            text, "pass the store's key with --signing-key or DURABLE_SIGNING_KEY", EXIT_FAILED
        )
    if isinstance(error, UnknownWorkflow):
        return CliError(
            f"run {error.run_id!r} is a run of workflow {error.name!r}, unknown to the CLI",
            "pass --import MODULE naming the module that defines it",
            EXIT_FAILED,
        )
    if isinstance(error, InvalidArgument | InvalidId):
        return CliError(text, code=EXIT_USAGE)
    if isinstance(error, DurableError):
        return CliError(f"{type(error).__name__}: {text}", f"store {url}", EXIT_FAILED)
    if isinstance(error, OSError):
        return CliError(f"{type(error).__name__}: {text}", f"store {url}", EXIT_FAILED)
    return CliError(f"{type(error).__name__}: {text}", "run again with --verbose for the traceback")


@contextmanager
def setup_logging(verbose: bool) -> Iterator[None]:
    """Inside the block, route the ``durable.*`` loggers to stderr with
    ``verbose``; else silence them (no line reaches the terminal, warnings
    included). The loggers are as they were after it."""
    logger = logging.getLogger("durable")
    level = logger.level
    handler: logging.Handler
    if verbose:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(levelname)s [%(name)s] %(message)s"))
        logger.setLevel(logging.DEBUG)
    else:
        handler = logging.NullHandler()
    logger.addHandler(handler)
    try:
        yield
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)


def run(call: Callable[[], Awaitable[T]], url: str, verbose: bool) -> T:
    """Run ``call()`` on a new event loop; any error ends the process with
    its `CliError`'s lines on stderr and its status (a traceback after them
    only with ``verbose``)."""

    async def main() -> T:
        return await call()

    try:
        with setup_logging(verbose):
            return asyncio.run(main())
    except KeyboardInterrupt:
        raise typer.Exit(130) from None
    except Exception as e:
        error = translate(e, url)
        for line in error.lines():
            typer.echo(line, err=True)
        if verbose:
            import traceback

            traceback.print_exception(e, file=sys.stderr)
        raise typer.Exit(error.code) from None
