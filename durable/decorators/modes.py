"""How an `Engine` reaches its store right now: as its owner, or as a client.

An engine that owns its store runs on the store's `Queue` (its one writer):
runtimes over it run workflows and jobs, and it applies the requests other
processes leave in the store's inbox (`OwnerMode`). An engine that does not
(a client, or a standby worker waiting to take over) runs on a
`ClientQueue`: reads through a followed read-only view, writes as inbox
requests, runtimes that run nothing (`ClientMode`). Everything above (handles,
``start``, ``signal``, jobs, groups) asks the mode for its queue and its
runtimes, so it works the same in both.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from durable.cluster.client import ClientQueue, ClientRuntime
from durable.engine.runtime import RuntimeOptions, WorkflowRuntime

if TYPE_CHECKING:
    from durable.engine.access import RunQueue
    from durable.engine.delivery import StepRunner
    from durable.engine.hooks import TerminalHook
    from durable.store.queue import Queue

__all__ = ["ClientMode", "Mode", "OwnerMode"]


class Mode:
    """What an engine runs on; see the module docstring."""

    #: True when this process owns the store (its runtimes run work).
    owner: bool = False

    @property
    def queue(self) -> RunQueue:
        """The store as the runtimes use it."""
        raise NotImplementedError

    def runtime(
        self, runner: StepRunner, hook: TerminalHook | None, options: RuntimeOptions
    ) -> WorkflowRuntime:
        """A runtime of this mode over the store."""
        raise NotImplementedError


class OwnerMode(Mode):
    """The engine owns the store: runtimes over its `Queue` run work."""

    owner = True

    def __init__(self, queue: Queue, pending: dict[str, bytes] | None = None) -> None:
        self._queue = queue
        #: The runs this process asked the previous owner to start, as a
        #: client, that the store may not show yet (`ClientQueue.started`):
        #: its runtimes wait for them (`WorkflowRuntime.pending_starts`)
        #: while the inbox applier applies the requests.
        self.pending = pending if pending is not None else {}

    @property
    def queue(self) -> Queue:
        """The store's queue (its writer)."""
        return self._queue

    def runtime(
        self, runner: StepRunner, hook: TerminalHook | None, options: RuntimeOptions
    ) -> WorkflowRuntime:
        """A runtime that runs work (`WorkflowRuntime`)."""
        runtime = WorkflowRuntime(self._queue, runner, hook, options)
        runtime.pending_starts = self.pending
        return runtime


class ClientMode(Mode):
    """The engine does not own the store: runtimes over a `ClientQueue`."""

    def __init__(self, client: ClientQueue) -> None:
        self._client = client

    @property
    def queue(self) -> ClientQueue:
        """The store as a client reaches it."""
        return self._client

    def runtime(
        self, runner: StepRunner, hook: TerminalHook | None, options: RuntimeOptions
    ) -> WorkflowRuntime:
        """A runtime that reads and sends requests (`ClientRuntime`)."""
        return ClientRuntime(self._client, runner, hook, options)
