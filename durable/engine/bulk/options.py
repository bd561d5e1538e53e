"""`BulkOptions`: how a `Bulk` runs its batch."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from durable.engine._checks import U32_MAX, check_int
from durable.engine.bulk.codec import InvalidItem
from durable.engine.memo_codec import normalize_prefix
from durable.engine.runs import RunOptions
from durable.engine.runtime import RuntimeOptions
from durable.errors import InvalidArgument
from durable.store.clock import Clock
from durable.store.ids import validate_id
from durable.store.queue.options import validate_queue_name

__all__ = ["DEFAULT_BULK_MEMO_PREFIX", "DEFAULT_BULK_QUEUE", "BulkOptions", "KeyFunction"]

#: The queue a bulk run's items run on unless configured.
DEFAULT_BULK_QUEUE = "bulk-items"
#: Where a bulk run's memos and group manifests go unless configured.
DEFAULT_BULK_MEMO_PREFIX = "bulk-memo"

#: The key of an item from its position and input.
KeyFunction = Callable[[int, Any], str]


@dataclass(frozen=True, slots=True)
class BulkOptions:
    """How a `Bulk` runs its batch; every value is checked when it is built."""

    #: The queue of the items' runs.
    queue_name: str = DEFAULT_BULK_QUEUE
    #: Where the items' memos and the batch's run-group manifest go.
    memo_prefix: str = DEFAULT_BULK_MEMO_PREFIX
    #: The key of item ``i`` (``key_fn(i, input)``), unique in the batch;
    #: None: ``item-{i}``. Keys name the items across runs of the batch, so
    #: derive them from the input (an id in it) when the input order may
    #: change. An `InvalidItem` is always keyed ``item-{i}``.
    key_fn: KeyFunction | None = None
    #: Headers carried by every item (`BulkContext.headers`).
    headers: Mapping[str, str] = field(default_factory=dict)
    #: Items processed at once.
    max_concurrent: int = 200
    #: How long an idle worker waits before polling again (seconds).
    poll_interval: float = 0.25
    #: Raise `BulkFailureThreshold` at the end of a run whose failed items are
    #: more than this percentage (0 to 100) of its total; None: never.
    fail_threshold: float | None = None
    #: The run group of the batch; None: derived from the queue, the memo
    #: prefix and the batch (its keys and inputs), so running the same batch
    #: again finds the same group.
    group_id: str | None = None
    #: The clock of the run's timings; None: the queue's.
    clock: Clock | None = None

    def __post_init__(self) -> None:
        validate_queue_name(self.queue_name)
        normalize_prefix(self.memo_prefix)
        check_int("BulkOptions.max_concurrent", self.max_concurrent, 1, U32_MAX)
        if self.key_fn is not None and not callable(self.key_fn):
            raise InvalidArgument(
                f"BulkOptions.key_fn must be a function (index, input) -> str, got {self.key_fn!r}"
            )
        threshold = self.fail_threshold
        if threshold is not None and (
            isinstance(threshold, bool)
            or not isinstance(threshold, int | float)
            or not math.isfinite(threshold)
            or not 0 <= threshold <= 100
        ):
            raise InvalidArgument(
                f"BulkOptions.fail_threshold must be None or a percentage from 0 to 100, "
                f"got {threshold!r}"
            )
        if self.group_id is not None:
            validate_id(self.group_id, "group id")
        object.__setattr__(self, "headers", self.run_options().headers)
        self.runtime_options()  # the rest is checked as the runtime checks it

    def runtime_options(self) -> RuntimeOptions:
        """The options of the bulk run's `WorkflowRuntime`."""
        return RuntimeOptions(
            queue_name=self.queue_name,
            memo_prefix=self.memo_prefix,
            max_concurrent_steps=self.max_concurrent,
            poll_interval=self.poll_interval,
            clock=self.clock,
        )

    def run_options(self) -> RunOptions:
        """The options of every item's run."""
        return RunOptions(headers=self.headers)

    def key(self, index: int, item: Any) -> str:
        """The key of item ``index``; `InvalidArgument` if ``key_fn`` returns no str."""
        if self.key_fn is None or isinstance(item, InvalidItem):
            return f"item-{index}"
        key = self.key_fn(index, item)
        if not isinstance(key, str) or not key:
            raise InvalidArgument(
                f"BulkOptions.key_fn returned {key!r} for item {index}: keys are non-empty str"
            )
        return key
