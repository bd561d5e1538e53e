"""Job names: the durable identity of a ``@job`` function.

A job stores the *name* of its function (its job type's ``NAME``), never a
reference to code; the worker that claims it finds the function by that
name among the job types its `Engine` registered when it started
(`durable.decorators.jobs.service`). The default name is
``module.qualname``; ``@job(name=...)`` pins one that survives moving or
renaming the function.

A name already taken by another function raises `DecoratorError` with the
fix, when the second one is decorated. The same function decorated again
(a module imported twice, a function defined in a test that runs twice)
replaces its earlier registration, as workflows do
(`durable.decorators.registry`).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from durable.decorators.jobs.kind import FunctionJob
from durable.decorators.registry import default_name, origin
from durable.errors import DecoratorError

__all__ = ["JOBS", "JobRegistry"]


def _origin(cls: type[FunctionJob]) -> tuple[str, str, str, int]:
    """Where the function of job type ``cls`` is defined."""
    fn: Any = cls.FUNCTION
    return origin(fn)


class JobRegistry:
    """Job name -> job type (a `FunctionJob` subclass), for the engines that run them."""

    def __init__(self) -> None:
        self._by_name: dict[str, type[FunctionJob]] = {}

    def register(self, job_type: type[FunctionJob]) -> None:
        """Add ``job_type``; `DecoratorError` if another function has its name."""
        name = job_type.NAME
        existing = self._by_name.get(name)
        if existing is not None and _origin(existing) != _origin(job_type):
            fn = existing.FUNCTION
            raise DecoratorError(
                f"job name {name!r} is already used by {default_name(fn)}; "
                "give this one another name with @job(name=...)"
            )
        self._by_name[name] = job_type

    def unregister(self, name: str) -> None:
        """Forget the job type registered as ``name`` (engines started later do not run it)."""
        self._by_name.pop(name, None)

    def get(self, name: str) -> type[FunctionJob] | None:
        """The job type registered as ``name``, or None."""
        return self._by_name.get(name)

    def by_queue(self) -> dict[str, list[type[FunctionJob]]]:
        """The registered job types, grouped by their queue."""
        queues: dict[str, list[type[FunctionJob]]] = {}
        for job_type in self._by_name.values():
            queues.setdefault(job_type.SETTINGS.queue, []).append(job_type)
        return queues

    def __iter__(self) -> Iterator[type[FunctionJob]]:
        return iter(list(self._by_name.values()))

    def __len__(self) -> int:
        return len(self._by_name)


#: The registry ``@job`` adds to and every `Engine` reads when it starts.
JOBS = JobRegistry()
