"""Where the runtime keeps its records in the store's KV namespace.

Everything lives under the reserved prefix ``workflow/`` (callers cannot
write there):

| key | value |
|---|---|
| ``workflow/runs/{run_id}`` | `RunRecord`, while the run is active |
| ``workflow/steps/{run_id}`` | `StepPointer` (current step and its job), while active |
| ``workflow/outcomes/{run_id}`` | `TerminalRecord`, once terminated |
| ``workflow/terminals/`` + 8-byte time + run id | terminal marker (with memo retention) |

Step jobs carry the dedup key ``run:{run_id}:{step}``; the terminal
notification job ``run:{run_id}:terminal``.
"""

from __future__ import annotations

from durable.engine.runs import RESERVED_KV_PREFIX

__all__ = [
    "TERMINALS_PREFIX",
    "notification_dedup",
    "outcome_key",
    "pointer_key",
    "run_key",
    "step_dedup",
]

#: The `ExpiryIndex` of terminal markers, for memo retention.
TERMINALS_PREFIX = RESERVED_KV_PREFIX + b"terminals/"


def run_key(run_id: str) -> bytes:
    """The KV key of the run record."""
    return RESERVED_KV_PREFIX + b"runs/" + run_id.encode()


def pointer_key(run_id: str) -> bytes:
    """The KV key of the current-step pointer."""
    return RESERVED_KV_PREFIX + b"steps/" + run_id.encode()


def outcome_key(run_id: str) -> bytes:
    """The KV key of the terminal record."""
    return RESERVED_KV_PREFIX + b"outcomes/" + run_id.encode()


def step_dedup(run_id: str, step: int) -> str:
    """The dedup key of step ``step`` of a run."""
    return f"run:{run_id}:{step}"


def notification_dedup(run_id: str) -> str:
    """The dedup key of a run's terminal notification."""
    return f"run:{run_id}:terminal"
