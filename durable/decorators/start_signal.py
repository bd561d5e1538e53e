"""``wf.options(run_id=...).start_with_signal(*args, key=..., value=...)``.

Start a run if it is absent and deliver a signal to it, in one call, so a
chat's first message (which starts the session) and its later ones (sent to
the running session) take the same path:

- the run is active: the signal is sent (`Engine.signal`: delivered to the
  run if it waits on ``key``, else buffered for its next wait on it);
- the run has ended: `WrongRunState` naming it; nothing is sent;
- the run is absent and ``key``'s home is the run's partition (always on
  an unpartitioned store, and for every key of
  `durable.decorators.request_keys`): the signal is buffered *in the
  submission's own commit* (on a client, in its submit request), so the
  run and its signal are durable together or not at all;
- the run is absent and ``key`` lives in another partition: the signal is
  sent first (durable, buffered), then the run is started. A crash between
  the two leaves the signal buffered for the run's first wait on ``key``
  once the call is made again.

Two processes starting the same absent run at the same moment: the second
submission finds the run and is not new, and its signal goes with nothing;
use `start_with_signal` for the first message of a run from one caller.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from durable.cluster.manifest import partition_of
from durable.decorators.current import current_engine
from durable.decorators.partitioned import signal_home
from durable.decorators.status import WorkflowState, read_status
from durable.engine import keys
from durable.engine.signals import check_signal
from durable.errors import InvalidArgument, WrongRunState

if TYPE_CHECKING:
    from durable.decorators.handles import WorkflowHandle
    from durable.decorators.workflow import WorkflowStarter

__all__ = ["start_with_signal"]

_ENDED = frozenset({WorkflowState.SUCCEEDED, WorkflowState.FAILED, WorkflowState.CANCELLED})


async def start_with_signal(
    starter: WorkflowStarter[Any, Any],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    key: str,
    value: object,
) -> WorkflowHandle[Any]:
    """See the module docstring."""
    name = starter.definition.name
    run_id = starter.run_id
    if run_id is None:
        raise InvalidArgument(
            f"workflow {name!r}: start_with_signal starts the run if it is absent: give it "
            "an id with .options(run_id=...)"
        )
    if starter.debounce is not None:
        raise InvalidArgument(f"workflow {name!r}: start_with_signal cannot be debounced")
    engine = current_engine(f"start_with_signal of workflow {name!r}")
    payload = engine.codec.dumps(value, what=f"the signal for {key!r}")
    check_signal(key, payload)
    status = await read_status(engine, run_id)
    if status is not None and status.state in _ENDED:
        raise WrongRunState(
            run_id, f"start_with_signal({key!r})", status.state.value, "absent or active"
        )
    partitions = engine.partition_count
    together = partitions is None or signal_home(key, partitions) == partition_of(
        run_id, partitions
    )
    if status is None and together:
        return await starter._start(args, kwargs, {keys.signal_buffer_key(key): payload})
    await engine.signal(key, value)
    return await starter._start(args, kwargs, None)
