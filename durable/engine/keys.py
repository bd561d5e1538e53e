"""Where the runtime keeps its records in the store's KV namespace.

Everything lives under the reserved prefix ``workflow/`` (callers cannot
write there):

| key | value |
|---|---|
| ``workflow/runs/{run_id}`` | `RunRecord`, while the run is active |
| ``workflow/steps/{run_id}`` | `StepPointer` (current step and its job), while active |
| ``workflow/outcomes/{run_id}`` | `TerminalRecord`, once terminated |
| ``workflow/queue-terminals/`` + queue + time + run id | terminal marker (memo retention) |
| ``workflow/groups/{group_id}/members/{key}`` | `MemberRecord` of a run group's member |
| ``workflow/queue-group-terminals/`` + queue + time + group id | group marker (group retention) |
| ``workflow/signal-buf/{key}`` | a buffered signal's payload (`durable.engine.signals`) |
| ``workflow/signal-wait/{key}`` | id of the step job waiting for a signal on ``key`` |
| ``workflow/signal-delivered/{run_id}/{step}`` | the signal payload consumed for that step |
| ``workflow/replies/{reply_key}`` | a pending remote-reply marker (`durable.engine.remote`) |
| ``workflow/exclusive/{name}/{key}`` | holder of an exclusive key (`durable.engine.exclusive`) |

A run group's manifest is an object, not a KV entry: ``{memo
prefix}/groups/{group_id}/manifest`` (`manifest_object`).

Markers are kept per queue (the queue name is length-prefixed: one byte,
then its UTF-8 bytes; the time is 8 bytes big-endian), so each runtime
sweeps only the runs and groups it ended, with its own retention and memo
prefix. Stores written before that hold markers without a queue, under
``workflow/terminals/`` and ``workflow/group-terminals/``
(`TERMINALS_PREFIX`, `GROUP_TERMINALS_PREFIX`): nothing writes there any
more, and every runtime with a retention sweeps them as the version that
wrote them did.

Step jobs carry the dedup key ``run:{run_id}:{step}``; the terminal
notification job ``run:{run_id}:terminal:{job_id}``, where ``job_id`` is
the step job the run terminated at (so each incarnation of a reused run id
gets its notification).
"""

from __future__ import annotations

from durable.engine.runs import RESERVED_KV_PREFIX

__all__ = [
    "GROUP_TERMINALS_PREFIX",
    "REPLY_MARKERS_PREFIX",
    "TERMINALS_PREFIX",
    "group_prefix",
    "group_terminals_prefix",
    "manifest_object",
    "member_key",
    "notification_dedup",
    "outcome_key",
    "pointer_key",
    "reply_marker_key",
    "run_key",
    "signal_buffer_key",
    "signal_delivered_key",
    "signal_wait_key",
    "step_dedup",
    "terminals_prefix",
]

#: The `ExpiryIndex` of the terminal markers stores wrote before markers
#: were kept per queue (read and swept, never written).
TERMINALS_PREFIX = RESERVED_KV_PREFIX + b"terminals/"
#: The `ExpiryIndex` of the group markers stores wrote before markers were
#: kept per queue (read and swept, never written).
GROUP_TERMINALS_PREFIX = RESERVED_KV_PREFIX + b"group-terminals/"


def _queue_part(queue: str) -> bytes:
    """``queue`` length-prefixed (queue names are at most 255 bytes), so no
    queue's prefix is a prefix of another's."""
    name = queue.encode()
    return bytes((len(name),)) + name


def terminals_prefix(queue: str) -> bytes:
    """The `ExpiryIndex` of the terminal markers of the runtime on ``queue``
    (memo retention)."""
    return RESERVED_KV_PREFIX + b"queue-terminals/" + _queue_part(queue)


def group_terminals_prefix(queue: str) -> bytes:
    """The `ExpiryIndex` of the group markers of the runtime on ``queue``
    (group retention)."""
    return RESERVED_KV_PREFIX + b"queue-group-terminals/" + _queue_part(queue)


def group_prefix(group_id: str) -> bytes:
    """The prefix of every member record of group ``group_id``."""
    return RESERVED_KV_PREFIX + b"groups/" + group_id.encode() + b"/members/"


def member_key(group_id: str, key: str) -> bytes:
    """The KV key of the member record of ``key`` in group ``group_id``."""
    return group_prefix(group_id) + key.encode()


def manifest_object(memo_prefix: str, group_id: str) -> str:
    """The object name of group ``group_id``'s manifest under a runtime's memo prefix."""
    base = f"{memo_prefix}/" if memo_prefix else ""
    return f"{base}groups/{group_id}/manifest"


def run_key(run_id: str) -> bytes:
    """The KV key of the run record."""
    return RESERVED_KV_PREFIX + b"runs/" + run_id.encode()


def pointer_key(run_id: str) -> bytes:
    """The KV key of the current-step pointer."""
    return RESERVED_KV_PREFIX + b"steps/" + run_id.encode()


def outcome_key(run_id: str) -> bytes:
    """The KV key of the terminal record."""
    return RESERVED_KV_PREFIX + b"outcomes/" + run_id.encode()


#: The prefix of every pending remote-reply marker.
REPLY_MARKERS_PREFIX = RESERVED_KV_PREFIX + b"replies/"


def signal_buffer_key(correlation_key: str) -> bytes:
    """The KV key of the signal buffered for ``correlation_key``."""
    return RESERVED_KV_PREFIX + b"signal-buf/" + correlation_key.encode()


def signal_wait_key(correlation_key: str) -> bytes:
    """The KV key of the waiter index entry of ``correlation_key``."""
    return RESERVED_KV_PREFIX + b"signal-wait/" + correlation_key.encode()


def signal_delivered_key(run_id: str, step: int) -> bytes:
    """The KV key of the signal payload consumed for step ``step`` of a run."""
    return RESERVED_KV_PREFIX + b"signal-delivered/" + run_id.encode() + b"/%d" % step


def reply_marker_key(reply_key: str) -> bytes:
    """The KV key of the pending-reply marker of object ``reply_key``."""
    return REPLY_MARKERS_PREFIX + reply_key.encode()


def step_dedup(run_id: str, step: int) -> str:
    """The dedup key of step ``step`` of a run."""
    return f"run:{run_id}:{step}"


def notification_dedup(run_id: str, step_job_id: str) -> str:
    """The dedup key of a run's terminal notification, for the termination at
    step job ``step_job_id``.

    A run id can be submitted again once its run terminated, and each of
    its incarnations terminates once, at a step job of its own: keyed by
    that job, a second incarnation's notification is never taken for a
    duplicate of the first's while that one waits in the queue."""
    return f"run:{run_id}:terminal:{step_job_id}"
