"""`BulkContext`: what the pipeline sees for one item.

The item's decoded ``input`` and ``key``, its run id, the submitter's
headers, the item's memo, the item's `CostReport`, and the delivery's
cancellation token and lease. The memo helpers map their failures to step
errors the way a bulk run needs them:

- a cache hit returns the stored value in its decoded form; an entry that
  does not decode is treated as absent and computed again;
- an exception from the compute function propagates as itself (nothing is
  cached, the pipeline's error rules apply);
- a memo read or write that fails in the store is a transient `StepError`
  (the item is retried);
- a value that cannot be stored (not plain data) is a permanent `StepError`.

The ``*_with_cached_cost`` variants cache the value together with the
`CostReport` the compute function returns, and merge that report into the
item's cost on a hit as on a miss: the cost of the work is reported once
per item whatever the retries. `record_cost` counts only when it runs, so
inside a plain `memoized` function it counts on a miss only.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from typing import Any

from durable.engine.bulk.cost import CostReport
from durable.engine.delivery import Step
from durable.engine.memo import Memo
from durable.engine.outcomes import StepError
from durable.errors import StoreError
from durable.store.queue import CancelToken, LeaseHandle

__all__ = ["BulkContext"]

_VALUE, _COST = "value", "cost"


class _ComputeFailed(Exception):
    """Carries an exception of the compute function through `Memo.memoized`."""

    def __init__(self, error: Exception) -> None:
        super().__init__(str(error))
        self.error = error


async def _call(compute: Callable[[], Any]) -> Any:
    result = compute()
    if inspect.isawaitable(result):
        result = await result
    return result


def _split(entry: Any) -> tuple[Any, CostReport] | None:
    """The value and cost of a cached-cost entry; None if it is not one."""
    if not isinstance(entry, dict) or set(entry) != {_VALUE, _COST}:
        return None
    try:
        return entry[_VALUE], CostReport.from_map(entry[_COST])
    except ValueError:  # InvalidArgument: not a cost map
        return None


class BulkContext:
    """One delivery of one bulk item; see the module docstring."""

    __slots__ = ("cost", "delivery", "input", "key")

    def __init__(self, delivery: Step, key: str, input: Any) -> None:
        #: The step carrying the item (an item is a single-step run).
        self.delivery = delivery
        #: The item's key in the batch (``item-{i}`` unless ``key_fn`` says otherwise).
        self.key = key
        #: The item's input, decoded (dataclasses read back as dicts).
        self.input = input
        #: What this delivery of the item cost; reported when the item succeeds.
        self.cost = CostReport()

    def __repr__(self) -> str:
        return f"<BulkContext key={self.key!r} run_id={self.run_id!r} attempt={self.attempt}>"

    @property
    def run_id(self) -> str:
        """The item's run id (hex SHA-256 of ``"{group_id}/{key}"``)."""
        return self.delivery.run_id

    @property
    def attempt(self) -> int:
        """Claims of this item so far, this one included (1 on the first run)."""
        return self.delivery.attempts

    @property
    def headers(self) -> Mapping[str, str]:
        """The headers given in `BulkOptions.headers`."""
        return self.delivery.headers

    @property
    def memo(self) -> Memo:
        """The item's memo: a retry, or a later bulk run of the same batch,
        reads back what an earlier attempt stored."""
        return self.delivery.memo

    @property
    def cancel_token(self) -> CancelToken:
        """Fires when the item's run is cancelled while it runs."""
        return self.delivery.cancel_token

    @property
    def lease(self) -> LeaseHandle:
        """The delivery's lease; extend it before a long call."""
        return self.delivery.lease

    def record_cost(self, metric: str, amount: float) -> None:
        """Add ``amount`` to this item's ``metric``."""
        self.cost.record(metric, amount)

    # ----------------------------------------------------------------- memo

    async def memoized(self, key: str, compute: Callable[[], Any]) -> Any:
        """The value memoized under ``key``, else ``compute()`` (sync or async,
        no arguments) stored there; see the module docstring for errors."""
        return await self._memoized(lambda: key, compute)

    async def memoized_by_content(self, input: Any, compute: Callable[[], Any]) -> Any:
        """`memoized` under the memo's content key of ``input`` (`Memo.content_key`)."""
        return await self._memoized(lambda: self.memo.content_key(input), compute)

    async def memoized_with_cached_cost(self, key: str, compute: Callable[[], Any]) -> Any:
        """`memoized` for a ``compute`` returning ``(value, CostReport)``: both are
        cached; the cost is merged into the item's on a hit and on a miss.
        Returns the value."""
        return await self._with_cached_cost(lambda: key, compute)

    async def memoized_by_content_with_cached_cost(
        self, input: Any, compute: Callable[[], Any]
    ) -> Any:
        """`memoized_with_cached_cost` under the memo's content key of ``input``."""
        return await self._with_cached_cost(lambda: self.memo.content_key(input), compute)

    async def _with_cached_cost(self, key: Callable[[], str], compute: Callable[[], Any]) -> Any:
        async def both() -> dict[str, Any]:
            result = await _call(compute)
            if (
                not isinstance(result, tuple)
                or len(result) != 2
                or not isinstance(result[1], CostReport)
            ):
                raise StepError.permanent(
                    f"bulk item {self.key!r}: a *_with_cached_cost function must return "
                    f"(value, CostReport), got {result!r:.120}"
                )
            return {_VALUE: result[0], _COST: result[1].to_map()}

        entry = _split(await self._memoized(key, both))
        if entry is None:  # an entry of another shape under this key: recompute
            entry = _split(await self._memoized(key, both, overwrite=True))
            assert entry is not None  # both() returned one
        value, cost = entry
        self.cost.merge(cost)
        return value

    async def _memoized(
        self, key: Callable[[], str], compute: Callable[[], Any], *, overwrite: bool = False
    ) -> Any:
        """`Memo.memoized`, with its failures mapped (see the module docstring)."""
        if not callable(compute):
            if inspect.iscoroutine(compute):
                compute.close()  # never run; close it so it does not warn
            raise StepError.permanent(
                f"bulk item {self.key!r}: compute must be a function of no arguments (sync or "
                f"async), got {type(compute).__name__}; pass the function itself (`fetch`) or "
                "wrap the call (`lambda: fetch(x)`)"
            )

        async def guarded() -> Any:
            try:
                return await _call(compute)
            except Exception as e:
                raise _ComputeFailed(e) from e

        failure: Exception
        try:
            name = key()
            if not overwrite:
                return await self.memo.memoized(name, guarded)
            await self.memo.put(name, await guarded())
            return await self.memo.get(name)  # in its decoded form, as a hit reads it
        except _ComputeFailed as e:
            failure = e.error
        except TypeError as e:  # not plain data (or compute is not a function)
            raise StepError.permanent(f"bulk item {self.key!r}: {e}") from e
        except StoreError as e:
            raise StepError.transient(
                f"bulk item {self.key!r}: the memo is unavailable ({e})"
            ) from e
        raise failure  # outside the handler: the compute error as itself
