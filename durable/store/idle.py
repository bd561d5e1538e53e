"""`loop_idle`: whether the running event loop has nothing else ready.

Used where work may be done at once on the loop's thread instead of being
handed to another task or thread: only when no other callback waits to
run, so nothing is delayed by it and nothing could have joined the work.
"""

from __future__ import annotations

import asyncio

__all__ = ["loop_idle"]


def loop_idle() -> bool:
    """Whether the running event loop has no other callback ready to run
    (asyncio's own loop; any other loop counts as busy)."""
    ready = getattr(asyncio.get_running_loop(), "_ready", None)
    return ready is not None and not ready
