"""The run listing's filters on the command line: the seam for ``runs``,
bulk ``cancel``/``resume``/``forget`` and ``watch``.

``durable runs URL`` and the bulk forms select runs with the same options
(``--state``, ``--workflow``, ``--started-after``, ``--attribute k=v``,
``--limit``); `RunFilter` holds them, parsed and checked here, and
`RunFilter.listing_kwargs` is what ``engine.runs(...)`` takes (issue 17,
point 1). The commands that use them are added when the listing lands:
register them in `durable.cli.app.COMMANDS`.
"""

from __future__ import annotations

import datetime as _dt
from dataclasses import dataclass, field
from typing import Annotated, Any

import typer

__all__ = ["STATES", "AttributeList", "RunFilter", "StartedAfter", "StateList", "WorkflowName"]

#: The states a run summary carries (``--state``).
STATES = ("pending", "running", "waiting", "succeeded", "failed", "cancelled")

StateList = Annotated[
    list[str] | None,
    typer.Option("--state", help=f"Runs in this state (repeatable): {', '.join(STATES)}."),
]
WorkflowName = Annotated[
    str | None, typer.Option("--workflow", help="Runs of this workflow (its name).")
]
StartedAfter = Annotated[
    str | None,
    typer.Option("--started-after", metavar="ISO-TIME", help="Runs started after this time."),
]
AttributeList = Annotated[
    list[str] | None,
    typer.Option("--attribute", "-a", metavar="KEY=VALUE", help="Runs tagged so (repeatable)."),
]


@dataclass(frozen=True)
class RunFilter:
    """Which runs a listing or bulk command selects."""

    states: tuple[str, ...] = ()
    workflow: str | None = None
    started_after: _dt.datetime | None = None
    attributes: dict[str, str] = field(default_factory=dict)

    @classmethod
    def of(
        cls,
        states: list[str] | None,
        workflow: str | None,
        started_after: str | None,
        attributes: list[str] | None,
    ) -> RunFilter:
        """The options as typer passes them; `typer.BadParameter` naming a bad one."""
        for state in states or []:
            if state not in STATES:
                raise typer.BadParameter(
                    f"{state!r} is not one of {', '.join(STATES)}", param_hint="'--state'"
                )
        after = None
        if started_after is not None:
            try:
                after = _dt.datetime.fromisoformat(started_after)
            except ValueError:
                raise typer.BadParameter(
                    f"{started_after!r} is not an ISO time", param_hint="'--started-after'"
                ) from None
            if after.tzinfo is None:
                after = after.replace(tzinfo=_dt.UTC)
        tags: dict[str, str] = {}
        for item in attributes or []:
            key, sep, value = item.partition("=")
            if not sep or not key:
                raise typer.BadParameter(f"{item!r} is not KEY=VALUE", param_hint="'--attribute'")
            tags[key] = value
        return cls(tuple(states or ()), workflow, after, tags)

    @property
    def empty(self) -> bool:
        """True when nothing is filtered (a bulk command refuses that)."""
        return not (self.states or self.workflow or self.started_after or self.attributes)

    def listing_kwargs(self) -> dict[str, Any]:
        """The keyword arguments of ``engine.runs(...)`` for this filter."""
        kwargs: dict[str, Any] = {}
        if self.states:
            kwargs["state"] = self.states[0] if len(self.states) == 1 else list(self.states)
        if self.workflow is not None:
            kwargs["workflow"] = self.workflow
        if self.started_after is not None:
            kwargs["started_after"] = self.started_after
        if self.attributes:
            kwargs["attributes"] = dict(self.attributes)
        return kwargs
