"""The pytest plugin in a fresh pytest session (pytester), and its entry point."""

from __future__ import annotations

import os
import tomllib
from importlib.metadata import entry_points
from pathlib import Path

import pytest

import durable

pytest_plugins = ["pytester"]

PLUGIN = "durable.testing.pytest_plugin"

USER_TESTS = """
import time

import pytest

from durable import Engine, sleep, step, workflow
from durable.testing import MockClock, run_until_settled


@step
async def greet(name: str) -> str:
    return f"hello {name}"


@workflow
async def reminder(name: str) -> str:
    await sleep(30 * 86400)
    return await greet(name)


@pytest.mark.asyncio
async def test_memory_engine(durable_engine: Engine, durable_clock: MockClock) -> None:
    assert durable_engine.clock is durable_clock
    handle = await reminder.start("ada")
    t0 = time.perf_counter()
    settled = await run_until_settled(handle)
    assert settled.ended
    assert await handle.result() == "hello ada"
    assert time.perf_counter() - t0 < 1.0


@pytest.mark.asyncio
async def test_local_engine(durable_local_engine: Engine, tmp_path) -> None:
    handle = await reminder.start("bob")
    await run_until_settled(handle)
    assert await handle.result() == "hello bob"
    assert (tmp_path / "durable-store").is_dir()


@pytest.mark.asyncio
@pytest.mark.parametrize("n", [1, 2])
async def test_stores_are_not_shared(durable_engine: Engine, n: int) -> None:
    await reminder.start("eve")
    assert len((await durable_engine.runs()).runs) == 1
"""


def _plugin_args() -> list[str]:
    """``-p`` the plugin unless this environment's install already loads it
    through the entry point (loading it twice is an error)."""
    installed = any(ep.value == PLUGIN for ep in entry_points(group="pytest11"))
    return [] if installed else ["-p", PLUGIN]


@pytest.fixture(autouse=True)
def this_durable(monkeypatch: pytest.MonkeyPatch, pytester: pytest.Pytester) -> None:
    """The session in the subprocess imports the durable under test."""
    root = str(Path(durable.__file__).resolve().parents[1])
    pytester.makeini(
        "[pytest]\nasyncio_mode = auto\nasyncio_default_fixture_loop_scope = function\n"
    )
    monkeypatch.setenv(
        "PYTHONPATH", os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")]))
    )


def doc_example() -> str:
    """The first Python block of docs/testing.md: a test module of its own."""
    text = (Path(__file__).parents[2] / "docs" / "testing.md").read_text()
    return text.split("```python\n", 1)[1].split("```", 1)[0]


def test_fixtures_work_in_a_fresh_session(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_user=USER_TESTS, test_doc=doc_example())
    result = pytester.runpytest_inprocess(*_plugin_args(), "-p", "no:cacheprovider", "-q")
    result.assert_outcomes(passed=5)


def test_the_fixtures_are_listed(pytester: pytest.Pytester) -> None:
    result = pytester.runpytest_inprocess(*_plugin_args(), "--fixtures", "-p", "no:cacheprovider")
    result.stdout.fnmatch_lines(
        ["durable_clock*", "*MockClock*", "durable_engine*", "durable_local_engine*"]
    )


def test_the_entry_point_is_declared() -> None:
    pyproject = Path(__file__).parents[2] / "pyproject.toml"
    declared = tomllib.loads(pyproject.read_text())["project"]["entry-points"]["pytest11"]
    assert declared == {"durable": PLUGIN}
