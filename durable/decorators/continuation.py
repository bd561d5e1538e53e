"""``durable.continue_as_new``: a run that starts over, under its own id.

A workflow that loops for ever (a chat session, a monitor) would journal
for ever. ``durable.continue_as_new(*args, **kwargs)`` ends the run's
current *incarnation* instead: it raises `ContinueAsNew` out of the
workflow body (a `BaseException`, like the engine's other control-flow
signals, so ``except Exception:`` does not swallow it), and the delivery
ends with a ``Continue`` whose settlement, one transaction, does all of:

- acks the delivery and enqueues the run's next one with the new
  invocation (the same workflow, the new arguments, ``"inc": n + 1``;
  `durable.decorators.invocation`), claimable at once;
- deletes every journal entry of the run (`continuation_writes`);
- rewrites the run's invocation record (``engine.fork`` and the CLI read
  the current incarnation's arguments) and its run index entry (its
  ``incarnation`` count, shown by ``handle.status()`` and ``engine.runs()``);
- restarts the ordinals of the run's published values and attributes (the
  values stay; `durable.decorators.publish.restart_ordinal`): the new
  incarnation's ``publish`` and ``set_attributes`` calls count from 0;
- commits what the carry-over hooks return (`register_carry_over`).

So a crash leaves the run either wholly in its old incarnation (the
delivery runs again from its journal) or wholly in its new one. What is
keyed by the run id stays as it is: the run record (the run never
terminates between incarnations, so ``handle.result()``, from this process
or a client, waits for the final incarnation's outcome), buffered signals
(a signal sent between incarnations is taken by the next
``wait_for_signal`` on its key), published values, a pending cancellation
and the run's ``timeout`` (which counts from the first start). Values the
old journal offloaded to the run memo (over the inline limit) are not
deleted: the next incarnation overwrites them position by position, and the
run's retention removes the rest. A child run started by incarnation n gets
an id that names it (`durable.decorators.children.child_run_id`), so the
next incarnation's children never collide with earlier ones; a child still
running when its parent's incarnation ends runs on, no longer in the
parent's journal (a later cancel of the run does not reach it).

Refused: inside a step's body (`NotInWorkflow` naming the step and the run:
a step is retried and journaled, a new incarnation is the workflow's
decision) and outside a workflow; arguments that do not fit the workflow's
signature (`ArgumentMismatch`) or that the codec cannot encode
(`CodecError`) raise at the call, inside the workflow, nothing written.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, NoReturn

from durable.decorators.archive import invocation_record
from durable.decorators.context import current_run
from durable.decorators.index import decode_entry, encode_entry, find_entry
from durable.decorators.invocation import bind_arguments, encode_invocation
from durable.decorators.journal import journal_prefix
from durable.decorators.publish import published_prefix, restart_ordinal
from durable.decorators.streams import continue_records
from durable.errors import NotInWorkflow

if TYPE_CHECKING:
    from durable.decorators.context import RunContext

__all__ = [
    "CarryOver",
    "ContinueAsNew",
    "continuation_writes",
    "continue_as_new",
    "register_carry_over",
]

#: A carry-over hook: called with the run and its next incarnation number in
#: the delivery that continues it as new; returns reserved KV writes (None
#: deletes) to commit with the reset.
CarryOver = Callable[["RunContext", int], Mapping[bytes, bytes | None]]

_CARRY_OVER: list[CarryOver] = []


def register_carry_over(hook: CarryOver) -> None:
    """Add ``hook`` to what every continue-as-new commits: the writes it
    returns join the one transaction that starts the next incarnation (for a
    layer that keeps per-incarnation records of a run: a stream's or a
    request's reserved keys). Records keyed by the run id alone carry over
    without a hook. Registering the same hook twice adds it once."""
    if hook not in _CARRY_OVER:
        _CARRY_OVER.append(hook)


class ContinueAsNew(BaseException):
    """Raised by `continue_as_new` out of the workflow body: the delivery
    ends and the run starts over with ``payload`` (the encoded invocation of
    its next incarnation). Let it propagate."""

    def __init__(self, run_id: str, incarnation: int, payload: bytes) -> None:
        super().__init__(f"run {run_id!r} continues as new (incarnation {incarnation})")
        self.run_id = run_id
        self.incarnation = incarnation
        self.payload = payload


def continue_as_new(*args: Any, **kwargs: Any) -> NoReturn:
    """End this run's incarnation and start the workflow again, under the same
    run id, with ``args`` and ``kwargs``, in one transaction: the journal
    starts empty, handles and buffered signals carry over
    (`durable.decorators.continuation`). Raises out of the workflow body; only
    in a workflow, never in a step (`NotInWorkflow`)."""
    run = current_run("durable.continue_as_new()")  # refused in a step, naming it
    definition = run.definition
    if definition is None:  # a RunContext built by hand, not by the runner
        raise NotInWorkflow("durable.continue_as_new() (this run has no workflow definition)")
    bind_arguments(definition.fn, "workflow", definition.name, args, kwargs, run.run_id)
    incarnation = run.incarnation + 1
    payload = encode_invocation(run.codec, definition.name, args, kwargs, incarnation=incarnation)
    error = ContinueAsNew(run.run_id, incarnation, payload)
    if run.continued is None:  # the first call decides, even if the workflow caught it
        run.continued = error
    raise error


async def continuation_writes(
    run: RunContext, request: ContinueAsNew
) -> tuple[tuple[bytes, bytes | None], ...]:
    """The reserved KV writes that start incarnation ``request.incarnation``
    of ``run`` (see the module docstring), read once the delivery's steps and
    waits have stopped; an invocation over the inline limit is written to the
    run memo first."""
    definition = run.definition
    assert definition is not None  # continue_as_new checked it
    engine = run.engine.for_run(run.run_id)
    memos = engine.workflows.runtime_for(definition.queue).memos
    writes: dict[bytes, bytes | None] = {}
    writes.update(await invocation_record(memos, run.run_id, request.payload))
    kv = run.journal.kv
    for key, _ in kv.snapshot(journal_prefix(run.run_id)):
        writes[key] = None
    # Publishes and set_attributes are ordered by ordinals the workflow takes
    # as it runs (replays skip the ones stored): the new incarnation's start at 0.
    prefix = published_prefix(run.run_id)
    for key, data in kv.snapshot(prefix):
        writes[key] = restart_ordinal(data, run.run_id, key[len(prefix) :].decode())
    found = find_entry(kv, run.run_id)
    if found is not None:
        entry = decode_entry(run.run_id, found[1])
        writes[found[0]] = encode_entry(entry.replace(incarnation=request.incarnation, seq=0))
    # A stream's body writes are numbered per incarnation too (its items stay).
    writes.update(continue_records(kv, run.run_id))
    for hook in _CARRY_OVER:
        writes.update(hook(run, request.incarnation))
    return tuple(writes.items())
