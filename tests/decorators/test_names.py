"""Default names of what a script defines (issue 13, point 12).

A script runs as ``__main__``; a process that resumes its runs imports it
under its own name. The default name of a workflow, step or job defined in
``__main__`` is the name the script is imported by, so both processes agree.
Here ``__main__`` is replaced by a module standing for each way of running
a script; the processes themselves are in ``test_main_resume.py``.
"""

from __future__ import annotations

import importlib
import sys
import types
from collections.abc import Callable
from importlib.machinery import ModuleSpec
from pathlib import Path
from typing import Any

import pytest

import durable
from durable.decorators.jobs.registry import JOBS
from durable.decorators.registry import (
    REGISTRY,
    WorkflowDefinition,
    WorkflowRegistry,
    default_name,
    main_module_name,
)
from durable.errors import UnknownWorkflow

SOURCE = """
async def flow() -> str:
    return "flowed"

async def work() -> str:
    return "worked"
"""


@pytest.fixture
def main(monkeypatch: pytest.MonkeyPatch) -> Callable[..., types.ModuleType]:
    """Make ``__main__`` a new module with the given ``__file__`` / ``__spec__``
    that runs `SOURCE` (compiled with that file name, as a script is)."""

    def make(file: Path | None = None, spec: str | None = None) -> types.ModuleType:
        module = types.ModuleType("__main__")
        if file is not None:
            module.__file__ = str(file)
        module.__spec__ = None if spec is None else ModuleSpec(spec, None)
        exec(compile(SOURCE, str(file or "<stdin>"), "exec"), module.__dict__)
        monkeypatch.setitem(sys.modules, "__main__", module)
        return module

    return make


def script(tmp_path: Path, relative: str) -> Path:
    """Write `SOURCE` at ``tmp_path/relative``, with an ``__init__.py`` in each
    directory above it that is named ``pkg*``."""
    path = tmp_path / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    for parent in path.relative_to(tmp_path).parents:
        if parent.name.startswith("pkg"):
            (tmp_path / parent / "__init__.py").touch()
    path.write_text(SOURCE)
    return path


def fn(module: types.ModuleType, name: str) -> Callable[..., Any]:
    f: Callable[..., Any] = module.__dict__[name]
    assert f.__module__ == "__main__"
    return f


def test_a_script_is_named_by_its_file(
    tmp_path: Path, main: Callable[..., types.ModuleType]
) -> None:
    """``python names_app.py``: the name ``import names_app`` gives it."""
    module = main(file=script(tmp_path, "names_app.py"))
    assert main_module_name() == "names_app"
    assert default_name(fn(module, "flow")) == "names_app.flow"
    assert durable.step(fn(module, "work")).name == "names_app.work"
    workflow = durable.workflow(fn(module, "flow"))
    assert workflow.name == "names_app.flow"
    assert REGISTRY.get("names_app.flow") == workflow.definition
    job = durable.job(fn(module, "work"))
    try:
        assert job.name == "names_app.work"
    finally:
        JOBS.unregister(job.name)


def test_a_script_inside_packages_is_named_with_them(
    tmp_path: Path, main: Callable[..., types.ModuleType]
) -> None:
    """``python pkg_a/sub/app.py`` (both directories packages): ``pkg_a.sub.app``,
    the name ``python -m pkg_a.sub.app`` and ``import pkg_a.sub.app`` give."""
    path = script(tmp_path, "plain/pkg_a/pkg_sub/app.py")
    module = main(file=path)
    assert main_module_name() == "pkg_a.pkg_sub.app"
    assert default_name(fn(module, "flow")) == "pkg_a.pkg_sub.app.flow"


def test_a_module_run_with_dash_m_is_named_by_its_spec(
    tmp_path: Path, main: Callable[..., types.ModuleType]
) -> None:
    """``python -m tools.app``: its ``__spec__`` names it, wherever the file is."""
    module = main(file=script(tmp_path, "app.py"), spec="tools.app")
    assert default_name(fn(module, "flow")) == "tools.app.flow"


@pytest.mark.parametrize("file", [None, "-", "archive.zip", "dir/__main__.py"])
def test_a_main_with_no_module_file_keeps_its_name(
    tmp_path: Path, main: Callable[..., types.ModuleType], file: str | None
) -> None:
    """An interactive session, ``python -c`` or a notebook (no file), a zip or
    a directory run as a script: nothing else imports it by a name."""
    module = main(file=None if file is None else tmp_path / file)
    assert main_module_name() is None
    assert default_name(fn(module, "flow")) == "__main__.flow"


def test_a_script_also_imported_under_its_name_defines_each_function_once(
    tmp_path: Path, main: Callable[..., types.ModuleType], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``python names_twice.py`` whose code imports ``names_twice`` too: the
    same functions, so registering the second replaces the first (no
    `DecoratorError` about a name taken)."""
    path = script(tmp_path, "names_twice.py")
    module = main(file=path)
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        imported = importlib.import_module("names_twice")
    finally:
        sys.modules.pop("names_twice", None)
    registry = WorkflowRegistry()
    registry.register(WorkflowDefinition("names_twice.flow", fn(module, "flow"), "workflows"))
    again = WorkflowDefinition("names_twice.flow", imported.flow, "workflows")
    registry.register(again)
    assert registry.get("names_twice.flow") is again


def test_an_unknown_workflow_of_a_main_without_a_file_says_what_to_do() -> None:
    """The hint for ``__main__.x`` cannot be "import '__main__'"."""
    message = str(UnknownWorkflow("run-1", "__main__.flow"))
    assert "'__main__'" not in message
    assert "notebook" in message
    assert "@workflow(name=...)" in message
    assert "import the module that defines it ('shop')" in str(
        UnknownWorkflow("run-1", "shop.checkout")
    )
