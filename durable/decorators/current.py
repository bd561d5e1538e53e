"""The running `Engine` of the current context.

`Engine.__aenter__` sets it and `Engine.__aexit__` resets it, in a
`contextvars.ContextVar`: every task started inside ``async with
Engine(...):`` sees that engine, and nested engines stack. Calls that need
an engine (``workflow.start``, ``job.submit``) read it with
`current_engine`.
"""

from __future__ import annotations

from contextvars import ContextVar, Token
from typing import TYPE_CHECKING

from durable.errors import NoEngine

if TYPE_CHECKING:
    from durable.decorators.engine import Engine

__all__ = ["current_engine", "engine_or_none", "reset_engine", "set_engine"]

_current: ContextVar[Engine | None] = ContextVar("durable_current_engine", default=None)


def current_engine(what: str = "this call") -> Engine:
    """The `Engine` running in this context; `NoEngine` naming ``what`` if none is."""
    engine = _current.get()
    if engine is None:
        raise NoEngine(what)
    return engine


def engine_or_none() -> Engine | None:
    """The `Engine` running in this context, or None."""
    return _current.get()


def set_engine(engine: Engine) -> Token[Engine | None]:
    """Make ``engine`` the current one; pass the token to `reset_engine`."""
    return _current.set(engine)


def reset_engine(token: Token[Engine | None]) -> None:
    """Undo `set_engine` (in another context than the one that set it, clear it)."""
    try:
        _current.reset(token)
    except ValueError:  # exited from another context (a fixture's teardown task)
        _current.set(None)
