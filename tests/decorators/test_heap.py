"""`Engine(freeze_gc=...)`: the first engine start in a process collects
garbage once and freezes the objects alive then (`durable.decorators.heap`).

Each case runs in a fresh interpreter: the freeze is once per process, and
this test process may have frozen already.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from durable import Engine
from durable.errors import InvalidArgument

CHILD = """
import asyncio, gc, json, sys
from durable import Engine
from durable.decorators.heap import freeze_startup_heap

async def main(freeze):
    before = gc.get_freeze_count()
    cycle = []
    cycle.append(cycle)  # garbage before the start: collected, never frozen
    del cycle
    async with Engine(sys.argv[1], freeze_gc=freeze):
        at_start = gc.get_freeze_count()
    async with Engine(sys.argv[1], freeze_gc=freeze):  # a second start
        pass
    again = freeze_startup_heap() if freeze else None  # done already: no second pass
    print(json.dumps({"before": before, "at_start": at_start, "again": again,
                      "garbage": len(gc.garbage)}))

asyncio.run(main(sys.argv[2] == "1"))
"""


def _child(store: Path, freeze: bool) -> dict[str, int | bool | None]:
    out = subprocess.run(
        [sys.executable, "-c", CHILD, str(store), "1" if freeze else "0"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    result: dict[str, int | bool | None] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def test_the_first_engine_start_freezes_the_heap_once(tmp_path: Path) -> None:
    got = _child(tmp_path / "store", freeze=True)
    assert got["before"] == 0
    assert got["at_start"] > 1000  # type: ignore[operator]  # the imports, at least
    assert got["again"] is False
    assert got["garbage"] == 0


def test_freeze_gc_false_leaves_the_collector_alone(tmp_path: Path) -> None:
    got = _child(tmp_path / "store", freeze=False)
    assert got == {"before": 0, "at_start": 0, "again": None, "garbage": 0}


def test_freeze_gc_must_be_a_bool() -> None:
    with pytest.raises(InvalidArgument, match="freeze_gc must be True or False"):
        Engine("memory://heap", freeze_gc="yes")  # type: ignore[arg-type]
