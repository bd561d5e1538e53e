"""Workflow names: the durable identity of a ``@workflow`` function.

A run records the *name* of its workflow, never a reference to code; a
process that picks the run up finds the function by that name here. The
default name is ``module.qualname``; ``@workflow(name=...)`` pins one that
survives moving or renaming the function.

A script runs as the module ``__main__``, but another process imports it
under its own name, so the default name of what a script defines uses
the name it is imported by (`main_module_name`): ``python app.py``,
``python -m app`` and ``import app`` all name a workflow ``app.fn``, and a
run started by one is resumed by the others. A file inside packages
(directories with an ``__init__.py``) is named with them: ``python
pkg/app.py`` gives ``pkg.app.fn``, as ``python -m pkg.app`` does. Code with
no file behind ``__main__`` (an interactive session, ``python -c``, a
notebook) keeps ``__main__.fn``: only a process that defines it again in
its own ``__main__`` can resume its runs (`UnknownWorkflow` says so).

Names are checked when a function is decorated: a name already taken by
another function raises `DecoratorError` saying how to fix it. The same
function decorated again (a module imported twice, a function defined in a
test that runs twice) replaces its earlier registration: it is identified
by its module, qualified name and source location.
"""

from __future__ import annotations

import inspect
import os
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from durable.errors import DecoratorError

if TYPE_CHECKING:
    from durable.decorators.ratelimit import RateLimit

__all__ = [
    "DEFAULT_QUEUE",
    "REGISTRY",
    "WorkflowDefinition",
    "WorkflowRegistry",
    "check_async",
    "check_callable",
    "default_name",
    "main_module_name",
    "origin",
]

#: The queue of a workflow decorated without ``queue=``.
DEFAULT_QUEUE = "workflows"


def main_module_name() -> str | None:
    """The name another process imports the ``__main__`` module by, or None
    when ``__main__`` has no file (an interactive session, ``python -c``, a
    notebook).

    ``python -m pkg.app`` gives ``pkg.app`` (its ``__spec__``); ``python
    app.py`` gives the file's stem, prefixed with the packages (directories
    holding an ``__init__.py``) it sits in: ``pkg/app.py`` gives ``pkg.app``.
    """
    main = sys.modules.get("__main__")
    spec = getattr(main, "__spec__", None)
    name = getattr(spec, "name", None)
    if isinstance(name, str) and name and name != "__main__":
        return name
    file = getattr(main, "__file__", None)
    if not isinstance(file, str) or not file:
        return None
    path = os.path.abspath(file)
    stem, ext = os.path.splitext(os.path.basename(path))
    if ext != ".py" or stem == "__main__":  # a zip or a directory run as a script
        return None
    parts = [stem]
    directory = os.path.dirname(path)
    while os.path.isfile(os.path.join(directory, "__init__.py")):
        parent = os.path.dirname(directory)
        if parent == directory:
            break
        parts.append(os.path.basename(directory))
        directory = parent
    return ".".join(reversed(parts))


def _module_of(fn: Callable[..., Any]) -> str:
    module: str = fn.__module__
    if module == "__main__":
        return main_module_name() or module
    return module


def default_name(fn: Callable[..., Any]) -> str:
    """``module.qualname`` of ``fn``: the default durable name of a workflow,
    step or job; for a function of a script run as ``__main__``, ``module``
    is the name the script is imported by (`main_module_name`)."""
    return f"{_module_of(fn)}.{fn.__qualname__}"


def check_async(fn: object, decorator: str) -> None:
    """`DecoratorError` unless ``fn`` is an ``async def`` function (a
    workflow: its body awaits its steps and waits)."""
    if not callable(fn):
        raise DecoratorError(
            f"{decorator} decorates an async function, got {fn!r}; "
            f"write `{decorator}` (or `{decorator}(...)`) on the line above `async def`"
        )
    if not inspect.iscoroutinefunction(fn):
        name = getattr(fn, "__qualname__", repr(fn))
        full = default_name(fn) if hasattr(fn, "__qualname__") else name
        raise DecoratorError(
            f"{decorator} needs an async function, but {full!r} is a plain function: "
            f"define it with `async def {getattr(fn, '__name__', 'fn')}(...)` (a workflow "
            "awaits its steps and waits; steps and jobs may be plain `def`, run in the "
            "engine's thread pool)"
        )


def check_callable(fn: object, decorator: str) -> None:
    """`DecoratorError` unless ``fn`` is a function (``async def`` or plain
    ``def``: steps and jobs take both)."""
    if not callable(fn) or isinstance(fn, type):
        raise DecoratorError(
            f"{decorator} decorates a function, got {fn!r}; write `{decorator}` "
            f"(or `{decorator}(...)`) on the line above `def` or `async def`"
        )


def origin(fn: Callable[..., Any]) -> tuple[str, str, str, int]:
    """Where ``fn`` is defined: its module (as `default_name` names it),
    qualified name, file and line. A script run as ``__main__`` and imported
    under its own name in the same process defines the same functions."""
    code = getattr(fn, "__code__", None)
    where = (code.co_filename, code.co_firstlineno) if code is not None else ("", 0)
    return (_module_of(fn), fn.__qualname__, *where)


@dataclass(frozen=True, slots=True)
class WorkflowDefinition:
    """A registered workflow: its durable ``name``, the function and its queue."""

    name: str
    fn: Callable[..., Any]
    queue: str
    #: The code's version, recorded with each run it starts (`durable.decorators.versions`).
    version: str | None = None
    #: At most so many runs start per period (`durable.decorators.ratelimit`).
    rate_limit: RateLimit | None = None


class WorkflowRegistry:
    """Workflow name -> `WorkflowDefinition`, for the processes that run them."""

    def __init__(self) -> None:
        self._by_name: dict[str, WorkflowDefinition] = {}

    def register(self, definition: WorkflowDefinition) -> None:
        """Add ``definition``; `DecoratorError` if another function has its name."""
        name = definition.name
        if not isinstance(name, str) or not name:
            raise DecoratorError(f"a workflow name must be a non-empty str, got {name!r}")
        existing = self._by_name.get(name)
        if existing is not None and origin(existing.fn) != origin(definition.fn):
            raise DecoratorError(
                f"workflow name {name!r} is already used by "
                f"{default_name(existing.fn)}; give this one "
                "another name with @workflow(name=...)"
            )
        self._by_name[name] = definition

    def get(self, name: str) -> WorkflowDefinition | None:
        """The workflow registered as ``name``, or None."""
        return self._by_name.get(name)

    def queues(self) -> set[str]:
        """The queue of every registered workflow."""
        return {d.queue for d in self._by_name.values()}

    def __iter__(self) -> Iterator[WorkflowDefinition]:
        return iter(list(self._by_name.values()))

    def __len__(self) -> int:
        return len(self._by_name)


#: The registry ``@workflow`` adds to and every `Engine` reads.
REGISTRY = WorkflowRegistry()
