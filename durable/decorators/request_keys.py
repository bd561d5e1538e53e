"""The signal keys of requests into a run (`durable.decorators.requests`).

A request named ``name`` to run ``run_id`` travels as two signals: its
*body* under ``durable.request:{run_id}/{name}/{request_id}`` (one key per
request, so a second request never replaces a first one still buffered)
and a *ring* under ``durable.request:{run_id}/{name}`` that wakes a run
waiting in ``durable.receive(name)``. Both keys live in the run's own
partition (`durable.decorators.partitioned.signal_home`), so a run finds
its requests in its own store and a client's body and ring go to one inbox,
applied in the order they were sent.
"""

from __future__ import annotations

import re

from durable.errors import InvalidArgument

__all__ = [
    "REQUEST_KEY_PREFIX",
    "body_key",
    "check_request_name",
    "reply_key",
    "request_run",
    "ring_key",
]

#: What every request signal key starts with.
REQUEST_KEY_PREFIX = "durable.request:"
_NAME = re.compile(r"[A-Za-z0-9_.-]{1,128}")


def check_request_name(name: object) -> str:
    """``name`` if it is 1-128 characters of ``[A-Za-z0-9_.-]``, else
    `InvalidArgument` naming it."""
    if not isinstance(name, str) or _NAME.fullmatch(name) is None:
        raise InvalidArgument(
            f"a request name must be 1-128 characters of [A-Za-z0-9_.-], got {name!r}"
        )
    return name


def ring_key(run_id: str, name: str) -> str:
    """The signal key that wakes run ``run_id`` waiting to receive ``name``."""
    return f"{REQUEST_KEY_PREFIX}{run_id}/{name}"


def body_key(run_id: str, name: str, request_id: str) -> str:
    """The signal key buffering the body of request ``request_id``."""
    return f"{ring_key(run_id, name)}/{request_id}"


def reply_key(name: str, request_id: str) -> str:
    """The published key (`durable.publish`) the answer to a request goes under."""
    return f"durable.reply/{name}/{request_id}"


def request_run(key: str) -> str | None:
    """The run id a request signal key is for; None for any other key."""
    if not key.startswith(REQUEST_KEY_PREFIX):
        return None
    run_id = key[len(REQUEST_KEY_PREFIX) :].split("/", 1)[0]
    return run_id or None
