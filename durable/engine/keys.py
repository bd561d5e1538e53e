"""Where the runtime keeps its records in the store's KV namespace.

Everything lives under the reserved prefix ``workflow/`` (callers cannot
write there):

| key | value |
|---|---|
| ``workflow/runs/{run_id}`` | `RunRecord`, while the run is active |
| ``workflow/steps/{run_id}`` | `StepPointer` (current step and its job), while active |
| ``workflow/outcomes/{run_id}`` | `TerminalRecord`, once terminated |
| ``workflow/terminals/`` + 8-byte time + run id | terminal marker (with memo retention) |
| ``workflow/groups/{group_id}/members/{key}`` | `MemberRecord` of a run group's member |
| ``workflow/group-terminals/`` + 8-byte time + group id | group marker (with group retention) |

Step jobs carry the dedup key ``run:{run_id}:{step}``; the terminal
notification job ``run:{run_id}:terminal``.
"""

from __future__ import annotations

from durable.engine.runs import RESERVED_KV_PREFIX

__all__ = [
    "GROUP_TERMINALS_PREFIX",
    "TERMINALS_PREFIX",
    "group_prefix",
    "member_key",
    "notification_dedup",
    "outcome_key",
    "pointer_key",
    "run_key",
    "step_dedup",
]

#: The `ExpiryIndex` of terminal markers, for memo retention.
TERMINALS_PREFIX = RESERVED_KV_PREFIX + b"terminals/"
#: The `ExpiryIndex` of group markers, for group retention.
GROUP_TERMINALS_PREFIX = RESERVED_KV_PREFIX + b"group-terminals/"


def group_prefix(group_id: str) -> bytes:
    """The prefix of every member record of group ``group_id``."""
    return RESERVED_KV_PREFIX + b"groups/" + group_id.encode() + b"/members/"


def member_key(group_id: str, key: str) -> bytes:
    """The KV key of the member record of ``key`` in group ``group_id``."""
    return group_prefix(group_id) + key.encode()


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
