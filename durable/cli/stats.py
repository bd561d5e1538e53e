"""``durable stats URL``: queue depths, runs, dead letters, from counters.

Everything here is read from counters and key counts the store keeps in
memory (no record is decoded): per queue its pending, scheduled, claimed
and dead jobs and its cumulative done count; runs active (a run record)
and terminated (a terminal record still kept); dead letters in all.

Seam: once the run index (issue 17, point 1) lands, runs by state come
from it (``engine.runs`` counts) instead of these two key counts.
"""

from __future__ import annotations

from typing import Any

import typer

from durable.cli.errors import run
from durable.cli.options import JsonFlag, OptionList, SigningKey, StoreArgs, UrlArg, VerboseFlag
from durable.cli.output import console, emit_json, fields_table, table
from durable.cli.store import open_engine
from durable.decorators.engine import Engine
from durable.engine.runs import RESERVED_KV_PREFIX

__all__ = ["register", "store_stats"]

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


def stats(
    url: UrlArg,
    json: JsonFlag = False,
    option: OptionList = None,
    signing_key: SigningKey = None,
    verbose: VerboseFlag = False,
) -> None:
    """Queue depths, active and terminated runs, dead letters."""
    args = StoreArgs.of(url, option, signing_key, verbose)

    async def call() -> dict[str, Any]:
        async with open_engine(args) as engine:
            return store_stats(engine)

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
