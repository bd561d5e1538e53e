"""Where debounced starts keep their records (`durable.decorators.debounce`)."""

from __future__ import annotations

from durable.engine.runs import RESERVED_KV_PREFIX

__all__ = ["debounce_key", "debounce_run_key"]

_KEY_PREFIX = RESERVED_KV_PREFIX + b"debounce/"
_RUN_PREFIX = RESERVED_KV_PREFIX + b"debounce-run/"


def debounce_key(workflow: str, key: str) -> bytes:
    """The KV key naming the run of ``workflow``'s debounce key ``key`` that
    has not begun (the workflow's name length-prefixed: no two pairs share one)."""
    name = workflow.encode()
    return _KEY_PREFIX + str(len(name)).encode() + b":" + name + b"/" + key.encode()


def debounce_run_key(run_id: str) -> bytes:
    """The KV key of debounced run ``run_id``'s record."""
    return _RUN_PREFIX + run_id.encode()
