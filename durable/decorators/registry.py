"""Workflow names: the durable identity of a ``@workflow`` function.

A run records the *name* of its workflow, never a reference to code; a
process that picks the run up finds the function by that name here. The
default name is ``module.qualname``; ``@workflow(name=...)`` pins one that
survives moving or renaming the function.

Names are checked when a function is decorated: a name already taken by
another function raises `DecoratorError` saying how to fix it. The same
function decorated again (a module imported twice, a function defined in a
test that runs twice) replaces its earlier registration: it is identified
by its module, qualified name and source location.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from durable.errors import DecoratorError

__all__ = [
    "DEFAULT_QUEUE",
    "REGISTRY",
    "WorkflowDefinition",
    "WorkflowRegistry",
    "check_async",
    "default_name",
]

#: The queue of a workflow decorated without ``queue=``.
DEFAULT_QUEUE = "workflows"


def default_name(fn: Callable[..., Any]) -> str:
    """``module.qualname`` of ``fn``: the default durable name of a workflow or step."""
    return f"{fn.__module__}.{fn.__qualname__}"


def check_async(fn: object, decorator: str) -> None:
    """`DecoratorError` unless ``fn`` is an ``async def`` function."""
    if not callable(fn):
        raise DecoratorError(
            f"{decorator} decorates an async function, got {fn!r}; "
            f"write `{decorator}` (or `{decorator}(...)`) on the line above `async def`"
        )
    if not inspect.iscoroutinefunction(fn):
        name = getattr(fn, "__qualname__", repr(fn))
        raise DecoratorError(
            f"{decorator} needs an async function, but {name!r} is not one: "
            f"define it with `async def {getattr(fn, '__name__', 'fn')}(...)`"
        )


def _origin(fn: Callable[..., Any]) -> tuple[str, str, str, int]:
    code = getattr(fn, "__code__", None)
    where = (code.co_filename, code.co_firstlineno) if code is not None else ("", 0)
    return (fn.__module__, fn.__qualname__, *where)


@dataclass(frozen=True, slots=True)
class WorkflowDefinition:
    """A registered workflow: its durable ``name``, the function and its queue."""

    name: str
    fn: Callable[..., Any]
    queue: str


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
        if existing is not None and _origin(existing.fn) != _origin(definition.fn):
            raise DecoratorError(
                f"workflow name {name!r} is already used by "
                f"{existing.fn.__module__}.{existing.fn.__qualname__}; give this one "
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
