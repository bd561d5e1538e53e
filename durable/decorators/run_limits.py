"""Per-workflow run limits: ``@workflow(timeout=..., concurrency_per_key=...)``.

The limits a workflow was decorated with, by workflow name (`limits_of`),
read where its runs are submitted (`durable.decorators.submit`) and
delivered (`durable.decorators.runner`). They are checked at decoration
time (`check_limits`) and at ``.options(...)`` (`check_start_options`):
bad values raise `DecoratorError` naming the workflow.

- ``timeout`` (seconds, > 0): `durable.decorators.run_timeout`;
- ``concurrency_per_key`` (an int >= 1): `durable.decorators.keyed_concurrency`.
"""

from __future__ import annotations

from dataclasses import dataclass

from durable.errors import DecoratorError

__all__ = ["WorkflowLimits", "check_limits", "check_start_options", "limits_of", "set_limits"]


@dataclass(frozen=True, slots=True)
class WorkflowLimits:
    """The run limits of one workflow (None: no limit)."""

    #: Seconds after its start by which a run must have ended.
    timeout: float | None = None
    #: Runs active at once per concurrency key.
    concurrency_per_key: int | None = None


_LIMITS: dict[str, WorkflowLimits] = {}
_NONE = WorkflowLimits()


def check_timeout(timeout: object, what: str) -> float | None:
    """``timeout`` as float seconds (None: none); `DecoratorError` naming
    ``what`` unless a positive finite number."""
    if timeout is None:
        return None
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)):
        raise DecoratorError(f"{what}: timeout must be a number of seconds, got {timeout!r}")
    if not (0 < float(timeout) < float("inf")):
        raise DecoratorError(f"{what}: timeout must be > 0 seconds, got {timeout!r}")
    return float(timeout)


def check_limits(name: str, timeout: object, concurrency_per_key: object) -> WorkflowLimits:
    """The checked limits of workflow ``name``."""
    what = f"@workflow {name!r}"
    checked = check_timeout(timeout, what)
    if concurrency_per_key is not None and (
        isinstance(concurrency_per_key, bool)
        or not isinstance(concurrency_per_key, int)
        or concurrency_per_key < 1
    ):
        raise DecoratorError(
            f"{what}: concurrency_per_key must be an int >= 1, got {concurrency_per_key!r}"
        )
    return WorkflowLimits(checked, concurrency_per_key)


def set_limits(name: str, limits: WorkflowLimits) -> None:
    """Record the limits of workflow ``name`` (replacing earlier ones)."""
    if limits == _NONE:
        _LIMITS.pop(name, None)
    else:
        _LIMITS[name] = limits


def limits_of(name: str) -> WorkflowLimits:
    """The limits of workflow ``name`` (none, for a workflow without any)."""
    return _LIMITS.get(name, _NONE)


def check_start_options(name: str, timeout: object, concurrency_key: object) -> float | None:
    """Check the per-start options ``timeout`` and ``concurrency_key`` of a run
    of workflow ``name``; the timeout as float (None: the workflow's)."""
    what = f"workflow {name!r} .options()"
    checked = check_timeout(timeout, what)
    if concurrency_key is not None:
        if not isinstance(concurrency_key, str) or not concurrency_key:
            raise DecoratorError(
                f"{what}: concurrency_key must be a non-empty str, got {concurrency_key!r}"
            )
        if limits_of(name).concurrency_per_key is None:
            raise DecoratorError(
                f"{what}: concurrency_key={concurrency_key!r} needs "
                f"@workflow(concurrency_per_key=n) on workflow {name!r}"
            )
    return checked
