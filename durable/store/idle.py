"""`loop_idle`: whether the running event loop has no task ready to run.

Used where work may be done at once on the loop's thread instead of being
handed to another task (a flusher) or a thread: only when no other task
could run first, so nothing could have joined the work.
"""

from __future__ import annotations

import asyncio

__all__ = ["loop_idle"]

#: More callbacks ready than this: busy, without looking at each.
_SCAN = 8


def loop_idle() -> bool:
    """Whether no task is ready to run on the running event loop (asyncio's
    own loop; any other loop counts as busy).

    Plain callbacks may be ready (a task's done callback, a future's relay,
    a timer): they cannot join work handed to a task woken now, since it
    runs before any task they wake, and they rarely do work of their own.
    A ready task step could (a commit joining a group), so it makes the
    loop busy, as do more than a few ready callbacks."""
    ready = getattr(asyncio.get_running_loop(), "_ready", None)
    if ready is None or len(ready) > _SCAN:
        return False
    for handle in ready:
        owner = getattr(handle._callback, "__self__", None)
        if isinstance(owner, asyncio.Task) and not handle._cancelled:
            return False
    return True
