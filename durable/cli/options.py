"""What every command takes: the store's URL, its storage options, output flags.

Every command's first argument is the store's ``URL``: a path, or a
``file://``, ``s3://``, ``gs://``, ``az://`` (or ``memory://``, which is
empty in a new process) URL. Storage options come from the providers'
usual environment variables, read by their filesystems (``AWS_*`` with
``AWS_ENDPOINT_URL``, ``GOOGLE_APPLICATION_CREDENTIALS`` and
``STORAGE_EMULATOR_HOST``, ``AZURE_STORAGE_CONNECTION_STRING``...), and
from repeatable ``--option key=value`` (the value parsed as JSON when it
parses, else taken as a string), which win over the environment.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Annotated, Any

import typer

__all__ = [
    "JsonFlag",
    "OptionList",
    "RunIdArg",
    "SigningKey",
    "StoreArgs",
    "UrlArg",
    "VerboseFlag",
    "parse_json_or_text",
    "parse_options",
]

UrlArg = Annotated[
    str,
    typer.Argument(
        metavar="URL",
        help="The store: a path or a file://, s3://, gs://, az:// URL.",
        show_default=False,
    ),
]
RunIdArg = Annotated[
    str, typer.Argument(metavar="RUN_ID", help="The run's id.", show_default=False)
]
OptionList = Annotated[
    list[str] | None,
    typer.Option(
        "--option",
        "-o",
        metavar="KEY=VALUE",
        help="A storage option for the backend (repeatable; VALUE as JSON if it parses).",
        show_default=False,
    ),
]
SigningKey = Annotated[
    str | None,
    typer.Option(
        "--signing-key",
        envvar="DURABLE_SIGNING_KEY",
        help="The store's signing key, for a store that signs its pickles.",
        show_default=False,
    ),
]
VerboseFlag = Annotated[
    bool,
    typer.Option("--verbose", "-v", help="Log durable's events and tracebacks to stderr."),
]
JsonFlag = Annotated[bool, typer.Option("--json", help="Print only a JSON document on stdout.")]


def parse_json_or_text(text: str) -> Any:
    """``text`` parsed as JSON when it parses, else the string itself."""
    try:
        return json.loads(text)
    except ValueError:
        return text


def parse_options(items: list[str] | None) -> dict[str, Any]:
    """``--option key=value`` pairs as a dict; a usage error (two lines on
    stderr, exit status 2) naming a pair without ``=`` or with an empty key."""
    options: dict[str, Any] = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            typer.echo(f"error: --option {item!r} is not KEY=VALUE", err=True)
            typer.echo("e.g. --option endpoint_url=http://localhost:9000", err=True)
            raise typer.Exit(2)
        options[key.strip()] = parse_json_or_text(value)
    return options


@dataclass(frozen=True)
class StoreArgs:
    """Where a command reaches its store, and how it reports."""

    url: str
    options: dict[str, Any] = field(default_factory=dict)
    signing_key: str | None = None
    verbose: bool = False

    @classmethod
    def of(
        cls,
        url: str,
        options: list[str] | None,
        signing_key: str | None = None,
        verbose: bool = False,
    ) -> StoreArgs:
        """The arguments as typer passes them, options parsed."""
        return cls(url, parse_options(options), signing_key, verbose)
