"""Static typing (issue 18 point 7): mypy infers ``WorkflowHandle[R]`` from
``wf.handle``, ``T`` from ``type=T`` on waits and gets, the result of a
plain ``def`` step or job; and ``mypy --strict`` passes on examples/."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from mypy import api

ROOT = Path(__file__).resolve().parents[2]

SNIPPET = """
from __future__ import annotations

from dataclasses import dataclass

import pydantic

import durable


@dataclass
class Line:
    sku: str


class Approval(pydantic.BaseModel):
    by: str


@durable.step
def price(lines: list[Line]) -> list[Line]:
    return lines


@durable.step(max_attempts=2)
async def total(lines: list[Line]) -> int:
    return len(lines)


@durable.job
def ship(line: Line) -> str:
    return line.sku


@durable.workflow
async def checkout(lines: list[Line]) -> Approval:
    reveal_type(await price(lines))  # price
    reveal_type(await total(lines))  # total
    reveal_type(await durable.wait_for_signal("k", type=Approval))  # signal
    reveal_type(await durable.wait_for_signal("k", 5, type=Approval))  # signal-timeout
    reveal_type(await durable.wait_for_signal("k"))  # signal-untyped
    return Approval(by="x")


async def client() -> None:
    handle = checkout.handle("run-1")
    reveal_type(handle)  # handle
    reveal_type(await handle.result())  # result
    reveal_type(await handle.get("k", type=list[Line]))  # get
    reveal_type(await handle.get("k"))  # get-untyped
    reveal_type(await ship(Line("a")))  # job
    reveal_type(await ship.submit(Line("a")))  # job-handle
    wrong: int = await handle.result()  # error
"""

EXPECTED = {
    "price": "list[snippet.Line]",
    "total": "int",
    "signal": "snippet.Approval",
    "signal-timeout": "snippet.Approval | None",
    "signal-untyped": "Any",
    "handle": "durable.decorators.handles.WorkflowHandle[snippet.Approval]",
    "result": "snippet.Approval",
    "get": "list[snippet.Line]",
    "get-untyped": "Any",
    "job": "str",
    "job-handle": "durable.decorators.jobs.handle.JobHandle[str]",
}


def mypy(args: list[str]) -> tuple[str, int]:
    out, err, status = api.run(["--cache-dir", str(ROOT / ".mypy_cache"), *args])
    return out + err, status


def test_mypy_infers_the_typed_api(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "snippet.py").write_text(SNIPPET)
    (tmp_path / "mypy.ini").write_text(
        "[mypy]\nstrict = True\n[mypy-distributed.*,dask.*,fsspec.*,s3fs.*,gcsfs.*,adlfs.*]\n"
        "ignore_missing_imports = True\n"
    )
    monkeypatch.setenv("MYPYPATH", str(ROOT))  # this checkout's durable
    monkeypatch.chdir(tmp_path)
    out, _ = mypy(["--config-file", "mypy.ini", "snippet.py"])
    lines = SNIPPET.splitlines()
    revealed = {}
    for number, text in re.findall(r'snippet\.py:(\d+): note: Revealed type is "(.*)"', out):
        tag = lines[int(number) - 1].rpartition("# ")[2]
        revealed[tag] = text
    assert revealed == EXPECTED, out
    errors = re.findall(r"snippet\.py:(\d+): error: (.*)", out)
    assert [(lines[int(n) - 1].rpartition("# ")[2], e[:22]) for n, e in errors] == [
        ("error", "Incompatible types in ")
    ], out


def test_mypy_strict_passes_on_the_examples(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)  # pyproject.toml's [tool.mypy]: strict, with the examples
    out, status = mypy(["--strict", "-p", "examples"])
    assert status == 0, out
    assert "Success: no issues found" in out
