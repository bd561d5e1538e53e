"""``durable stats URL``: queue depths, runs, dead letters, from counters.

Everything here is read from counters and key counts the store keeps in
memory (no record is decoded): per queue its pending, scheduled, claimed
and dead jobs and its cumulative done count; runs active (a run record)
and terminated (a terminal record still kept); dead letters in all.

Runs by state come from the run index (``engine.runs``, every page, 1,000
runs a page, read in memory): runs from before the index are not in it, so
``by_state`` may count fewer runs than active and terminated.
"""

from __future__ import annotations

from typing import Any

import typer

from durable.cli.errors import run
from durable.cli.filters import STATES
from durable.cli.options import JsonFlag, OptionList, SigningKey, StoreArgs, UrlArg, VerboseFlag
from durable.cli.output import console, emit_json, fields_table, table
from durable.cli.store import open_engine
from durable.decorators.engine import Engine
from durable.engine.runs import RESERVED_KV_PREFIX

__all__ = ["register", "runs_by_state", "store_stats"]

_RUNS = RESERVED_KV_PREFIX + b"runs/"
_OUTCOMES = RESERVED_KV_PREFIX + b"outcomes/"
_COUNTS = ("pending", "scheduled", "claimed", "dead", "done")


def store_stats(engine: Engine) -> dict[str, Any]:
    """The counters of every queue and the run counts, summed over partitions."""
    queues: dict[str, dict[str, int]] = {}
    active = terminated = 0
    parts = engine.every_partition()
    for part in parts:
        view = part.queue.view
        for name in view.list_queues():
            stats = view.stats(name)
            sums = queues.setdefault(name, dict.fromkeys(_COUNTS, 0))
            for count in _COUNTS:
                sums[count] += getattr(stats, count)
        internal = part.queue.kv.internal()
        active += internal.count(_RUNS)
        terminated += internal.count(_OUTCOMES)
    return {
        "partitions": len(parts),
        "queues": [{"queue": name, **counts} for name, counts in sorted(queues.items())],
        "runs": {"active": active, "terminated": terminated},
        "dead_letters": sum(q["dead"] for q in queues.values()),
    }


async def runs_by_state(engine: Engine) -> dict[str, int]:
    """How many indexed runs are in each state (every state, zeros included)."""
    counts = dict.fromkeys(STATES, 0)
    cursor: str | None = None
    while True:
        page = await engine.runs(limit=1000, cursor=cursor)
        for summary in page.runs:
            counts[summary.state.value] += 1
        if (cursor := page.cursor) is None:
            return counts


def stats(
    url: UrlArg,
    json: JsonFlag = False,
    option: OptionList = None,
    signing_key: SigningKey = None,
    verbose: VerboseFlag = False,
) -> None:
    """Queue depths, runs by state, active and terminated runs, dead letters."""
    args = StoreArgs.of(url, option, signing_key, verbose)

    async def call() -> dict[str, Any]:
        async with open_engine(args) as engine:
            document = store_stats(engine)
            document["runs"]["by_state"] = await runs_by_state(engine)
            return document

    document = run(call, url, verbose)
    if json:
        emit_json(document)
        return
    out = console()
    out.print(
        fields_table(
            {
                "partitions": document["partitions"],
                "runs active": str(document["runs"]["active"]),
                "runs terminated (kept)": str(document["runs"]["terminated"]),
                "runs by state": " ".join(
                    f"{k}={n}" for k, n in document["runs"]["by_state"].items()
                ),
                "dead letters": str(document["dead_letters"]),
            }
        )
    )
    out.print(
        table(
            "queues",
            ("queue", *_COUNTS),
            ((q["queue"], *(q[c] for c in _COUNTS)) for q in document["queues"]),
        )
    )


def register(app: typer.Typer) -> None:
    """Add ``stats`` to ``app``."""
    app.command("stats")(stats)
