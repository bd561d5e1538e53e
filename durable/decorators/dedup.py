"""Deduplicated starts: ``wf.options(dedup_key=...).start(...)``.

A start with a dedup key starts a run only while no active run of the
workflow holds that key; otherwise it raises `DuplicateStart` naming the
active run, and nothing starts. Once that run has ended (succeeded, failed
or been cancelled), the key may start again. Keys are per workflow: two
workflows may use one key.

The key is an exclusive key of the engine (`durable.engine.exclusive`): its
holder record commits with the run's first step, and the store's owner
checks it in the same decision, so of two concurrent starts with one key
exactly one wins, in one process or in several. A client (an engine that
does not own the store) sends the start through the inbox and waits for the
owner's decision before it returns or raises (it waits as long as no owner
applies the request).

On a partitioned store the run's id is minted in the key's home partition
(the partition of ``"{workflow}/{key}"``), where the decision is made; a
``run_id`` given with a dedup key must route there (`InvalidArgument`
otherwise: start it without ``run_id``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from durable.cluster.client import ClientRuntime
from durable.engine.exclusive import Holder, decode_holder, encode_holder, exclusive_key
from durable.errors import DuplicateStart, InvalidArgument

if TYPE_CHECKING:
    from durable.decorators.base import EngineBase
    from durable.engine.runtime import WorkflowRuntime

__all__ = ["check_dedup_key", "dedup_home", "dedup_records", "dedup_run_id", "owner_decision"]

#: Longest dedup key, in characters.
MAX_DEDUP_KEY = 256


def check_dedup_key(key: object, workflow: str) -> str:
    """``key`` if it is a usable dedup key; `InvalidArgument` naming ``workflow``."""
    if not isinstance(key, str) or not key or len(key) > MAX_DEDUP_KEY:
        raise InvalidArgument(
            f"workflow {workflow!r}: dedup_key must be a non-empty str of at most "
            f"{MAX_DEDUP_KEY} characters, got {key!r:.80}"
        )
    return key


def dedup_home(workflow: str, key: str) -> str:
    """The id whose partition decides ``workflow``'s dedup key ``key``."""
    return f"{workflow}/{key}"


def dedup_run_id(engine: EngineBase, workflow: str, key: str, run_id: str | None) -> str:
    """The id of a deduplicated start: ``run_id``, or a new one, in the key's
    home partition (see the module docstring)."""
    home = dedup_home(workflow, key)
    if run_id is None:
        return engine.co_located(engine.new_run_id(), home)
    if engine.co_located(run_id, home) != run_id:
        raise InvalidArgument(
            f"workflow {workflow!r}: run {run_id!r} is not in the partition that decides "
            f"dedup key {key!r}; start it without run_id"
        )
    return run_id


def dedup_records(workflow: str, key: str, run_id: str) -> dict[bytes, bytes]:
    """The holder record that commits with run ``run_id``'s first step."""
    return {exclusive_key(workflow, key): encode_holder(Holder(run_id, key, workflow))}


async def owner_decision(runtime: WorkflowRuntime, workflow: str, key: str, run_id: str) -> None:
    """On a client, wait until the owner applied its request to start
    ``run_id``; `DuplicateStart` if the owner refused it for ``key``.
    Nothing to wait for in the owner (its submit decided), or when no
    request was written (the run id was known already)."""
    if not isinstance(runtime, ClientRuntime):
        return
    posted = runtime.client.posted_submit(run_id)
    if posted is None:
        return
    done = await runtime.wait_done(posted, None)
    if done is None or done.error_type != DuplicateStart.__name__:
        return
    raw = runtime.queue.kv.get(exclusive_key(workflow, key))
    holder = decode_holder(raw).run_id if raw is not None else "?"
    raise DuplicateStart(key, holder, workflow)
