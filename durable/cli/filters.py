"""The run listing's filters on the command line, shared by ``runs``,
``watch`` and the bulk forms of ``cancel``, ``resume`` and ``forget``.

``--state`` and ``--workflow`` (repeatable), ``--started-after`` and
``--started-before`` (an ISO time, or a time ago: ``90s``, ``15m``, ``1h``,
``2d``, ``1w``), ``--attribute KEY=VALUE`` (repeatable). `RunFilter` holds
them, parsed and checked here, and `RunFilter.listing_kwargs` is what
``engine.runs(...)`` and ``engine.cancel_runs(...)`` take.
"""

from __future__ import annotations

import datetime as _dt
import re
from dataclasses import dataclass, field
from typing import Annotated, Any

import typer

from durable.cli.errors import usage_error

__all__ = [
    "STATES",
    "AttributeList",
    "RunFilter",
    "StartedAfter",
    "StartedBefore",
    "StateList",
    "WorkflowList",
    "parse_time",
]

#: The states a run summary carries (``--state``).
STATES = ("pending", "running", "waiting", "succeeded", "failed", "cancelled")

StateList = Annotated[
    list[str] | None,
    typer.Option(
        "--state",
        "-s",
        help=f"Runs in this state (repeatable): {', '.join(STATES)}.",
        show_default=False,
    ),
]
WorkflowList = Annotated[
    list[str] | None,
    typer.Option(
        "--workflow", "-w", help="Runs of this workflow, by name (repeatable).", show_default=False
    ),
]
StartedAfter = Annotated[
    str | None,
    typer.Option(
        "--started-after",
        metavar="TIME",
        help="Runs started at or after TIME: ISO 8601 (UTC if no zone) or ago, e.g. 1h, 2d.",
        show_default=False,
    ),
]
StartedBefore = Annotated[
    str | None,
    typer.Option(
        "--started-before",
        metavar="TIME",
        help="Runs started before TIME (as --started-after).",
        show_default=False,
    ),
]
AttributeList = Annotated[
    list[str] | None,
    typer.Option(
        "--attribute",
        "-a",
        metavar="KEY=VALUE",
        help="Runs tagged so (repeatable; all must hold).",
        show_default=False,
    ),
]

_AGO = re.compile(r"^(\d+(?:\.\d+)?)\s*(s|m|h|d|w)$")
_UNIT = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


def parse_time(text: str, option: str, now: _dt.datetime | None = None) -> _dt.datetime:
    """``text`` as an aware datetime: ISO 8601 (UTC when it names no zone) or
    a time ago (``90s``, ``15m``, ``1h``, ``2d``, ``1w``) before ``now``;
    a usage error (exit status 2) naming ``option`` otherwise."""
    ago = _AGO.match(text.strip())
    if ago is not None:
        now = now or _dt.datetime.now(_dt.UTC)
        return now - _dt.timedelta(seconds=float(ago.group(1)) * _UNIT[ago.group(2)])
    try:
        when = _dt.datetime.fromisoformat(text)
    except ValueError:
        usage_error(f"{option} {text!r} is not an ISO time nor a time ago like 1h, 2d")
    return when if when.tzinfo is not None else when.replace(tzinfo=_dt.UTC)


@dataclass(frozen=True)
class RunFilter:
    """Which runs a listing or bulk command selects."""

    states: tuple[str, ...] = ()
    workflows: tuple[str, ...] = ()
    started_after: _dt.datetime | None = None
    started_before: _dt.datetime | None = None
    attributes: dict[str, str] = field(default_factory=dict)

    @classmethod
    def of(
        cls,
        states: list[str] | None,
        workflows: list[str] | None,
        started_after: str | None,
        started_before: str | None,
        attributes: list[str] | None,
    ) -> RunFilter:
        """The options as typer passes them; a usage error (two lines at most on
        stderr, exit status 2) naming a bad one."""
        for state in states or []:
            if state not in STATES:
                usage_error(f"--state {state!r} is not one of {', '.join(STATES)}")
        after = None if started_after is None else parse_time(started_after, "--started-after")
        before = None if started_before is None else parse_time(started_before, "--started-before")
        tags: dict[str, str] = {}
        for item in attributes or []:
            key, sep, value = item.partition("=")
            if not sep or not key:
                usage_error(f"--attribute {item!r} is not KEY=VALUE")
            tags[key] = value
        return cls(tuple(states or ()), tuple(workflows or ()), after, before, tags)

    @property
    def empty(self) -> bool:
        """True when nothing is filtered (a bulk command refuses that)."""
        return not (
            self.states
            or self.workflows
            or self.started_after
            or self.started_before
            or self.attributes
        )

    def listing_kwargs(self) -> dict[str, Any]:
        """The keyword arguments of ``engine.runs(...)`` for this filter."""
        kwargs: dict[str, Any] = {}
        if self.states:
            kwargs["state"] = list(self.states)
        if self.workflows:
            kwargs["workflow"] = list(self.workflows)
        if self.started_after is not None:
            kwargs["started_after"] = self.started_after
        if self.started_before is not None:
            kwargs["started_before"] = self.started_before
        if self.attributes:
            kwargs["attributes"] = dict(self.attributes)
        return kwargs

    def describe(self) -> str:
        """The filter as text (for a bulk command's prompt)."""
        parts = [f"state={','.join(self.states)}"] if self.states else []
        parts += [f"workflow={','.join(self.workflows)}"] if self.workflows else []
        if self.started_after is not None:
            parts.append(f"started>={self.started_after.isoformat(timespec='seconds')}")
        if self.started_before is not None:
            parts.append(f"started<{self.started_before.isoformat(timespec='seconds')}")
        parts += [f"{k}={v}" for k, v in self.attributes.items()]
        return " ".join(parts) or "every run"
