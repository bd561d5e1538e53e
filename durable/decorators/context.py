"""The run context: what the code of a running workflow sees.

A delivery runs the workflow function inside a `RunContext`, held in a
`contextvars.ContextVar`, so every task the workflow starts (each branch of
an ``asyncio.gather``) sees the same run. It carries the run id, the
engine, the delivery's `durable.engine.Step`, the run's journal and the
*position counter*: every ``@step`` call, durable wait and child run takes
the next position synchronously, when it is called, so positions do not
depend on which branch of a gather finishes first. A position holding a
patch marker (`durable.decorators.patching`) is only taken by the
``durable.patched()`` call that asks for it: every other call steps over
it.

While a step's body runs, the context also names that step: inside a step
``@step`` calls are plain calls and durable waits are refused.

The context also counts what the delivery is busy with: every step and
wait runs between `RunContext.track` and `RunContext.untrack`, and a wait
that cannot complete now parks (`RunContext.park`); its `Parking` decides
when the delivery suspends (`durable.decorators.parking`).

While a step's body runs, its name is also kept by engine and run
(`RunContext.executing`), in this process's memory only, so a status read
by the process running the run names its step in flight (`executing_step`).
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Callable, Container, Mapping
from contextvars import Context, ContextVar, Token, copy_context
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from durable.decorators.journal import PATCH
from durable.decorators.parking import Parked, Parking
from durable.decorators.suspend import Abort
from durable.engine import keys
from durable.errors import NonDeterminismError, NotInWorkflow, StoreError, UntrustedPayload

if TYPE_CHECKING:
    from durable.decorators.base import EngineBase
    from durable.decorators.codec import Codec
    from durable.decorators.continuation import ContinueAsNew
    from durable.decorators.journal import Entry, Journal
    from durable.decorators.registry import WorkflowDefinition
    from durable.engine.delivery import Step
    from durable.store.clock import Clock
    from durable.store.log import Durable

__all__ = [
    "RunContext",
    "active_run",
    "current_run",
    "executing_step",
    "in_step",
    "journaled_here",
    "run_id",
    "running_step",
]

_T = TypeVar("_T")

_run: ContextVar[RunContext | None] = ContextVar("durable_run", default=None)
_step: ContextVar[str | None] = ContextVar("durable_step", default=None)
#: engine -> run id -> position -> name of each step whose body runs now.
_executing: weakref.WeakKeyDictionary[EngineBase, dict[str, dict[int, str]]] = (
    weakref.WeakKeyDictionary()
)


class RunContext:
    """One delivery of one workflow run; see the module docstring."""

    def __init__(
        self,
        engine: EngineBase,
        delivery: Step,
        journal: Journal,
        draining: asyncio.Event,
    ) -> None:
        self.engine = engine
        self.delivery = delivery
        self.journal = journal
        self.draining = draining
        self._next = 0
        #: Tasks running steps and waits of this delivery: cancelled when it ends.
        self.inflight: set[asyncio.Task[object]] = set()
        #: Child-run starts of this delivery: awaited before it ends.
        self.starts: set[asyncio.Task[None]] = set()
        #: The parked waits of this delivery, and when it suspends.
        self.parking = Parking(engine.clock, self.starts, self.signal_buffered)
        #: The first non-determinism met, even if the workflow caught it.
        self.nondeterminism: NonDeterminismError | None = None
        #: ``durable.patched(id)`` answers so far, by id (the first call decides).
        self.patches: dict[str, bool] = {}
        #: The run's workflow (set by the runner; ``durable.continue_as_new`` needs it).
        self.definition: WorkflowDefinition | None = None
        #: How many times the run has continued as new (its invocation's count).
        self.incarnation = 0
        #: The first ``durable.continue_as_new`` of this delivery, if any.
        self.continued: ContinueAsNew | None = None
        #: The commit of the last entry `record_later` wrote, until it is
        #: known durable (`journaled`).
        self._pending: Durable | None = None
        #: The stream writes' buffer of this delivery's store (`streams`).
        self.stream_buffer: object | None = None

    @property
    def run_id(self) -> str:
        """The run's id."""
        return self.delivery.run_id

    @property
    def codec(self) -> Codec:
        """The engine's codec."""
        return self.engine.codec

    @property
    def clock(self) -> Clock:
        """The engine's clock."""
        return self.engine.clock

    def next_position(self) -> int:
        """Take the next journal position (stepping over patch markers)."""
        position = self.peek_position()
        self._next = position + 1
        return position

    def peek_position(self) -> int:
        """The position `next_position` would take, without taking it."""
        position = self._next
        while (entry := self.journal.get(position)) is not None and entry.kind == PATCH:
            position += 1
        return position

    def markers_from(self) -> dict[str, int]:
        """The patch markers journaled from the next position on, up to the
        first position that holds another call: patch id -> position."""
        found: dict[str, int] = {}
        position = self._next
        while (entry := self.journal.get(position)) is not None and entry.kind == PATCH:
            found.setdefault(entry.name, position)
            position += 1
        return found

    def take_through(self, position: int) -> None:
        """Take every position up to and including ``position``."""
        self._next = max(self._next, position + 1)

    def nondeterministic(self, position: int, journaled: str, new: str) -> NonDeterminismError:
        """The error for a call that differs from the journal (remembered, so
        the run fails even if the workflow catches it)."""
        error = NonDeterminismError(self.run_id, position, journaled, new)
        if self.nondeterminism is None:
            self.nondeterminism = error
        return error

    def entry_at(self, position: int, kinds: Container[str], name: str, new: str) -> Entry | None:
        """The journal entry at ``position``, checked against the call being
        made there (``name`` of one of ``kinds``, described as ``new``):
        `NonDeterminismError` if the journal holds another call."""
        entry = self.journal.get(position)
        if entry is not None and (entry.kind not in kinds or entry.name != name):
            raise self.nondeterministic(position, entry.describe(), new)
        return entry

    async def record(
        self,
        position: int,
        entry: Entry,
        extra: Callable[[], Mapping[bytes, bytes]] | None = None,
    ) -> Entry:
        """Journal ``entry`` at ``position``, durably, in one commit with the
        puts ``extra()`` returns (`Journal.write`); a failed write ends the
        delivery with `Abort` (the queue redelivers it)."""
        try:
            return await self.journal.write(position, entry, extra)
        except Exception as e:
            raise Abort(
                f"run {self.run_id!r}: the journal entry at position {position} could not "
                f"be written: {e}",
                e,
            ) from e

    async def record_later(
        self,
        position: int,
        entry: Entry,
        extra: Callable[[], Mapping[bytes, bytes]] | None = None,
    ) -> Entry:
        """Journal ``entry`` at ``position`` like `record`, without waiting
        for the commit (`Journal.write_later`): the run's next effectful
        point waits for it (`journaled`), and a run that returns now has it
        ride one group commit with its terminal record."""
        try:
            stored, durable = await self.journal.write_later(position, entry, extra)
        except Exception as e:
            raise Abort(
                f"run {self.run_id!r}: the journal entry at position {position} could not "
                f"be written: {e}",
                e,
            ) from e
        self._pending = durable  # later commits are durable after earlier ones
        return stored

    async def journaled(self) -> None:
        """Wait until every entry this delivery journaled is durable: before
        anything builds on them outside this process's memory (another
        step's body, a durable wait, a signal, a child start, a stream
        write...). A commit that failed ends the delivery with `Abort`, as a
        failed `record` does (the queue redelivers the run; nothing after
        the entry is trusted)."""
        pending = self._pending
        if pending is None:
            return
        try:
            kv = self.journal.kv
            if not pending.done() and not kv.flush_inline(pending):
                kv.flush_within(0)  # its group's flush starts now
            await pending
        except Exception as e:
            raise Abort(f"run {self.run_id!r}: a journal entry could not be written: {e}", e) from e
        if self._pending is pending:
            self._pending = None

    def check_writable(self, position: int, name: str) -> None:
        """Before the body of step ``name`` at ``position`` starts: `Abort`
        (the queue redelivers the run) unless its journal could be written
        now (`Journal.check_writable`). A body starts only while this
        process may still commit as the store's owner: an owner woken from
        a pause longer than the ttl, whose last commit became durable while
        it was stopped, starts no step (another process may own the store
        and run it)."""
        try:
            self.journal.check_writable()
        except StoreError as e:
            raise Abort(
                f"run {self.run_id!r}: step {name!r} at position {position} not started: "
                f"its journal cannot be written: {e}",
                e,
            ) from e

    async def replay(self, position: int, entry: Entry) -> Any:
        """The recorded result of ``entry``, or raise its recorded exception.

        A pickle that cannot be verified ends the delivery with `Abort` (the
        runner releases the run for an engine that can verify it): the
        workflow never sees another value, or exception, than the first run
        saw."""
        ok, err = await self.journal.values(position, entry)
        what = f"the {entry.describe()} at position {position} of run {self.run_id!r}"
        try:
            if err is None:
                return self.codec.loads(ok or b"", what=f"the result of {what}")
            error = self.codec.loads_error(err, what=f"the exception of {what}", strict=True)
        except UntrustedPayload as e:
            raise Abort(str(e), e) from e
        raise error

    def executing(self, position: int, name: str) -> _Executing:
        """Mark step ``name`` at ``position`` as running its body, for
        `executing_step`, until the block ends."""
        return _Executing(self, position, name)

    def track(self) -> asyncio.Task[object] | None:
        """Register the current task as running a step or wait of this
        delivery (the delivery is busy until `untrack`)."""
        task = asyncio.current_task()
        if task is not None:
            self.inflight.add(task)
        self.parking.begin()
        return task

    def untrack(self, task: asyncio.Task[object] | None) -> None:
        """Undo `track`."""
        if task is not None:
            self.inflight.discard(task)
        self.parking.end()

    async def park(
        self,
        position: int,
        until_ms: int | None,
        *,
        key: str | None = None,
        pending: Entry | None = None,
    ) -> None:
        """Park the wait at ``position`` (a tracked operation) until its
        deadline ``until_ms`` (engine-clock ms; None: none) passes; ``key``
        is the signal key it waits on, ``pending`` the journal entry to write
        if the delivery suspends on it. Returns when the deadline has passed
        and the wait completes in place; when the delivery suspends instead,
        the waiting task is cancelled."""
        await self.parking.park(Parked(position, until_ms, key, pending))

    def signal_buffered(self, key: str) -> bool:
        """True if a signal is buffered under ``key`` (sent while no run waited
        on it); the engine hands it to the next run that waits on ``key``.
        On a partitioned store the buffer is at the key's home partition
        (read through a view when another process owns it)."""
        return self.engine.for_key(key).queue.kv.get(keys.signal_buffer_key(key)) is not None

    def context(self) -> Context:
        """A copy of the calling context in which this is the current run
        (run the workflow's task in it)."""
        ctx = copy_context()
        ctx.run(_run.set, self)
        return ctx


def active_run() -> RunContext | None:
    """The run whose workflow code is executing here; None outside a workflow
    and inside a step's body."""
    if _step.get() is not None:
        return None
    return _run.get()


async def journaled_here() -> None:
    """In a run (its workflow code or a step's body): `RunContext.journaled`,
    before an operation that may reach another log than the run's (a
    submission, a signal): what the run journaled so far is durable before
    it. Outside a run: nothing."""
    run = _run.get()
    if run is not None:
        await run.journaled()


def current_run(what: str) -> RunContext:
    """`active_run`, or `NotInWorkflow` naming ``what``."""
    step = _step.get()
    if step is not None:
        run = _run.get()
        of = f" of run {run.run_id!r}" if run is not None else ""
        raise NotInWorkflow(f"{what} (here inside the body of step {step!r}{of})")
    run = _run.get()
    if run is None:
        raise NotInWorkflow(what)
    return run


class Setting(Generic[_T]):
    """A context manager that sets a `ContextVar` for its block and resets
    it after (a class, not a generator: it runs around every step body)."""

    __slots__ = ("_token", "_value", "_var")

    def __init__(self, var: ContextVar[_T], value: _T) -> None:
        self._var = var
        self._value = value
        self._token: Token[_T] | None = None

    def __enter__(self) -> _T:
        self._token = self._var.set(self._value)
        return self._value

    def __exit__(self, *exc: object) -> None:
        if self._token is not None:
            self._var.reset(self._token)
            self._token = None


def in_step(name: str) -> Setting[str | None]:
    """Mark the calling context as running the body of step ``name`` (tasks
    created inside inherit the mark) until the block ends."""
    return Setting(_step, name)


class _Executing:
    """`RunContext.executing`'s context manager."""

    __slots__ = ("_name", "_position", "_run")

    def __init__(self, run: RunContext, position: int, name: str) -> None:
        self._run = run
        self._position = position
        self._name = name

    def __enter__(self) -> None:
        runs = _executing.setdefault(self._run.engine, {})
        runs.setdefault(self._run.run_id, {})[self._position] = self._name

    def __exit__(self, *exc: object) -> None:
        runs = _executing.get(self._run.engine)
        if runs is None:
            return
        steps = runs.get(self._run.run_id)
        if steps is None:
            return
        steps.pop(self._position, None)
        if not steps:
            del runs[self._run.run_id]


def executing_step(engine: EngineBase, run_id: str) -> str | None:
    """The name of the step of run ``run_id`` whose body ``engine`` runs now
    (of several gathered ones, the one called first); None if none does."""
    steps = _executing.get(engine, {}).get(run_id)
    return steps[min(steps)] if steps else None


def running_step() -> str | None:
    """The name of the step whose body runs here, or None."""
    return _step.get()


def run_id() -> str:
    """The id of the workflow run this code belongs to (also inside its steps).

    `NotInWorkflow` outside a workflow.
    """
    run = _run.get()
    if run is None:
        raise NotInWorkflow("durable.run_id()")
    return run.run_id
