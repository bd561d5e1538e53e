"""`Job`: a typed unit of work, run as a single-step run.

A job type is a dataclass subclassing `Job`, whose fields are its input::

    @dataclass
    class SendEmail(Job[str]):
        NAME: ClassVar[str] = "email.send"
        to: str

        async def run(self, ctx: JobContext) -> str:
            return f"msg-for-{self.to}"

- ``NAME`` is stable and unique per runner: it is stored with every
  submission, and a worker finds the class to run by it.
- ``run`` returns the job's output, or raises. `classify` decides whether
  an exception is worth a retry: a `StepError` keeps its kind, an exception
  with a boolean ``transient`` attribute (every `DurableError` has one)
  follows it, anything else is transient. Override it to decide otherwise.
- `idempotency_key` (default None) collapses duplicate submissions, before
  and after the job completed; ``MAX_ATTEMPTS`` (default None: the queue's)
  bounds the attempts.
- The output type is ``Output`` when the class sets it, else the type
  argument of ``Job[...]``. When it is a dataclass, the stored result (a map
  of its fields) is rebuilt as one; any other output reads back as the
  plain data it was stored as (see `durable.engine.jobs.codec`).
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any, ClassVar, Generic, TypeVar, get_args, get_origin

from durable.engine.outcomes import StepError, StepErrorKind
from durable.errors import JobTypeError

if TYPE_CHECKING:
    from durable.engine.jobs.context import JobContext

__all__ = ["Job", "OutputT", "check_job_type", "output_type"]

#: The output type of a job.
OutputT = TypeVar("OutputT")


class Job(Generic[OutputT]):
    """A typed job; see the module docstring. Subclasses are dataclasses."""

    #: The job type's stable name, unique per runner.
    NAME: ClassVar[str]
    #: The output type, when it is not the type argument of ``Job[...]``.
    Output: ClassVar[type[Any] | None] = None
    #: Claims a job of this type may take; None: the queue's limit.
    MAX_ATTEMPTS: ClassVar[int | None] = None

    async def run(self, ctx: JobContext) -> OutputT:
        """Do the job; return its output or raise (see `classify`)."""
        raise NotImplementedError(f"{type(self).__name__} does not implement run()")

    def idempotency_key(self) -> str | None:
        """The key that collapses duplicate submissions of this job (None: none)."""
        return None

    @classmethod
    def classify(cls, error: Exception) -> StepErrorKind:
        """Whether ``error``, raised by `run`, is worth a retry."""
        if isinstance(error, StepError):
            return error.kind
        transient = getattr(error, "transient", None)
        if isinstance(transient, bool) and not transient:
            return StepErrorKind.PERMANENT
        return StepErrorKind.TRANSIENT


def check_job_type(cls: object) -> type[Job[Any]]:
    """``cls`` if it is a usable job type; `JobTypeError` saying what is missing."""
    if not isinstance(cls, type) or not issubclass(cls, Job):
        raise JobTypeError(f"{cls!r} is not a Job subclass")
    name = getattr(cls, "NAME", None)
    if not isinstance(name, str) or not name:
        raise JobTypeError(
            f"job type {cls.__qualname__} has no NAME: set NAME: ClassVar[str] to a stable, "
            "non-empty name"
        )
    if not dataclasses.is_dataclass(cls):
        raise JobTypeError(
            f"job type {cls.__qualname__} ({name!r}) is not a dataclass: decorate it with "
            "@dataclass (its fields are the job's input)"
        )
    if cls.run is Job.run:
        raise JobTypeError(
            f"job type {cls.__qualname__} ({name!r}) does not define `async def run(self, ctx)`"
        )
    return cls


def output_type(cls: type[Job[Any]]) -> type[Any] | None:
    """The dataclass a job type's output is rebuilt as, or None (plain data)."""
    declared = cls.Output
    if declared is None:
        declared = _type_argument(cls)
    if isinstance(declared, type) and dataclasses.is_dataclass(declared):
        return declared
    return None


def _type_argument(cls: type) -> Any:
    for klass in cls.__mro__:
        for base in getattr(klass, "__orig_bases__", ()):
            if get_origin(base) is Job:
                args = get_args(base)
                return args[0] if args else None
    return None
