"""The replayer: today's workflow code against the journal of a past run.

``await replay(workflow, run)`` runs the code of ``workflow`` as a delivery
would replay it, against the journal of a run that was recorded earlier,
and reports the first position where the code no longer does what the
journal says (`ReplayResult.divergence`), or success. Nothing runs for real:
every ``@step``, durable wait and child run at a journaled position answers
from the journal, and the replay stops where the journal does. In CI, it
catches a change that would break the runs in flight before a deploy does
(what Temporal's ``Replayer`` does).

``run`` is one of:

- a `RunHistory` (`fetch_history`, `RunHistory.load`);
- the path of a file written by ``durable export URL RUN_ID`` (or
  `RunHistory.dump`);
- a run id, with ``store=`` the store's URL (read as a client: nothing is
  written there) or a running `Engine`.

What counts as a divergence (`Divergence`):

- a position where the code calls another step, wait or child than the
  journal holds (the check every delivery makes, `NonDeterminismError`);
- the code returns or raises while the journal holds more positions;
- the run ended (succeeded or failed) after the journal's last position,
  and the code calls something more;
- the run succeeded and the code now raises, or the reverse;
- the stored arguments no longer fit the function's signature.

The replay ends without a divergence where the journal ends for a run
still in flight (or cancelled): the code may go on from there. Signal and
child waits the journal holds without an answer are where the run waits:
the replay stops there too.

A `RunHistory` file is a MessagePack map ``{"format": "durable.run",
"v": 1, "run_id", "workflow", "state", "invocation", "journal": [[position,
entry], ...]}`` holding the stored invocation and journal entries (values
the store kept in the run memo are inlined). Arguments and results are in
the codec's bytes: replaying a store that signs its pickles needs its
``signing_key``.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Container
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import msgpack

from durable.decorators.archive import load_invocation, load_journal
from durable.decorators.context import RunContext
from durable.decorators.engine import Engine
from durable.decorators.invocation import decode_invocation
from durable.decorators.journal import (
    CHILD,
    SIGNAL,
    START,
    Entry,
    Journal,
    decode_entry,
    encode_entry,
    entry_key,
)
from durable.decorators.status import read_status
from durable.decorators.suspend import Abort
from durable.engine.delivery import Step
from durable.errors import (
    ArgumentMismatch,
    CorruptEngineRecord,
    InvalidArgument,
    NonDeterminismError,
    RunNotFound,
)
from durable.store.clock import MockClock
from durable.store.objects.memory import MemoryObjectStore

if TYPE_CHECKING:
    from durable.decorators.workflow import Workflow

__all__ = ["HISTORY_FORMAT", "Divergence", "ReplayResult", "RunHistory", "fetch_history", "replay"]

#: The ``format`` field of a run-history file.
HISTORY_FORMAT = "durable.run"
#: Its version.
HISTORY_VERSION = 1


@dataclass(frozen=True, slots=True)
class RunHistory:
    """What a replay needs of a run: its invocation and its journal."""

    #: The run's id.
    run_id: str
    #: The workflow's name.
    workflow: str
    #: The run's state when it was read (``"succeeded"``, ``"waiting"``...).
    state: str
    #: The stored invocation (the workflow's name and encoded arguments).
    invocation: bytes
    #: ``(position, stored entry)`` of every journal position, values inline.
    journal: tuple[tuple[int, bytes], ...]

    def to_bytes(self) -> bytes:
        """The history as a file holds it; see the module docstring."""
        packed: bytes = msgpack.packb(
            {
                "format": HISTORY_FORMAT,
                "v": HISTORY_VERSION,
                "run_id": self.run_id,
                "workflow": self.workflow,
                "state": self.state,
                "invocation": self.invocation,
                "journal": [[p, e] for p, e in self.journal],
            },
            use_bin_type=True,
        )
        return packed

    @classmethod
    def from_bytes(cls, data: bytes, what: str = "a run history") -> RunHistory:
        """`to_bytes` reversed; `CorruptEngineRecord` naming ``what`` if it is not one."""
        try:
            m = msgpack.unpackb(data, raw=False)
            if not isinstance(m, dict) or m.get("format") != HISTORY_FORMAT:
                raise ValueError(f"not a {HISTORY_FORMAT!r} file (write one with durable export)")
            version = m.get("v")
            if not isinstance(version, int) or version > HISTORY_VERSION:
                raise ValueError(
                    f"format version {version!r}; this durable reads {HISTORY_VERSION}"
                )
            journal = tuple((int(p), bytes(e)) for p, e in m["journal"])
            history = cls(
                run_id=str(m["run_id"]),
                workflow=str(m["workflow"]),
                state=str(m["state"]),
                invocation=bytes(m["invocation"]),
                journal=journal,
            )
        except (ValueError, TypeError, KeyError, msgpack.UnpackException) as e:
            raise CorruptEngineRecord(what, str(e) or type(e).__name__) from None
        return history

    def dump(self, path: str | os.PathLike[str]) -> None:
        """Write the history to the file ``path``."""
        Path(path).write_bytes(self.to_bytes())

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> RunHistory:
        """The history in the file ``path`` (`dump`, ``durable export``)."""
        return cls.from_bytes(Path(path).read_bytes(), what=f"the run history {str(path)!r}")

    @property
    def ended(self) -> bool:
        """True when the run had ended when it was read."""
        return self.state in ("succeeded", "failed", "cancelled")


async def fetch_history(
    store: Engine | str | os.PathLike[str],
    run_id: str,
    *,
    storage_options: dict[str, Any] | None = None,
    signing_key: bytes | str | None = None,
) -> RunHistory:
    """The `RunHistory` of run ``run_id``, read from ``store``: a running
    `Engine`, or a store URL opened as a client (nothing is written).
    `RunNotFound` for a run the store does not hold."""
    if isinstance(store, Engine):
        return await _read_history(store, run_id)
    engine = Engine(store, role="client", storage_options=storage_options, signing_key=signing_key)
    async with engine:
        return await _read_history(engine, run_id)


async def _read_history(engine: Engine, run_id: str) -> RunHistory:
    status = await read_status(engine, run_id)
    if status is None:
        raise RunNotFound(run_id, "durable.testing.fetch_history()")
    payload = await load_invocation(engine, run_id)
    if payload is None or status.workflow is None:
        raise InvalidArgument(
            f"run {run_id!r} has no workflow invocation in the store: it was not started "
            "by @workflow, or by a durable older than its invocation records"
        )
    journal = await load_journal(engine, run_id)
    rows = []
    for position, entry in journal.entries():
        if entry.ref:  # the value is in the run memo: inline it
            ok, err = await journal.values(position, entry)
            entry = entry.replace(ok=ok, err=err, ref=False)
        rows.append((position, encode_entry(entry)))
    return RunHistory(run_id, status.workflow, str(status.state), payload, tuple(rows))


@dataclass(frozen=True, slots=True)
class Divergence:
    """Where today's code stops agreeing with the run's journal."""

    #: The journal position (None: the arguments, before any position).
    position: int | None
    #: What the journal holds there (a step's name, ``sleep durable.sleep``,
    #: ``the end of the run``...).
    expected: str
    #: What the code does there.
    got: str

    def __str__(self) -> str:
        where = "the arguments" if self.position is None else f"position {self.position}"
        return f"{where}: the journal holds {self.expected}, the code {self.got}"


@dataclass(frozen=True, slots=True)
class ReplayResult:
    """The outcome of `replay`."""

    #: The run replayed.
    run_id: str
    #: Its workflow's name.
    workflow: str
    #: How many journal positions the code went through in agreement.
    replayed: int
    #: The first divergence, or None: the code agrees with the journal.
    divergence: Divergence | None

    @property
    def ok(self) -> bool:
        """True when the code agrees with the journal."""
        return self.divergence is None

    def check(self) -> None:
        """Raise `NonDeterminismError` naming the divergence, if there is one."""
        d = self.divergence
        if d is not None:
            raise NonDeterminismError(
                self.run_id, -1 if d.position is None else d.position, d.expected, d.got
            )

    def __str__(self) -> str:
        head = f"replay of run {self.run_id!r} ({self.workflow})"
        if self.divergence is None:
            return f"{head}: ok, {self.replayed} position(s) agree with the journal"
        return f"{head}: diverges at {self.divergence}"


class _End(BaseException):
    """The replay reached the end of what the journal answers."""

    def __init__(self, position: int, call: str, *, past: bool) -> None:
        super().__init__(position, call)
        self.position = position
        self.call = call
        #: True: the code calls past the journal's last position.
        self.past = past


class _ReplayContext(RunContext):
    """A `RunContext` that answers only from the journal and stops where it ends."""

    end: _End | None = None

    def entry_at(self, position: int, kinds: Container[str], name: str, new: str) -> Entry | None:
        entry = super().entry_at(position, kinds, name, new)
        if entry is None or (not entry.resolved and entry.kind in (SIGNAL, CHILD, START)):
            end = _End(position, new, past=entry is None)
            if self.end is None:
                self.end = end
            raise end
        return entry


async def replay(
    workflow: Workflow[..., Any],
    run: RunHistory | str | os.PathLike[str],
    *,
    store: Engine | str | os.PathLike[str] | None = None,
    storage_options: dict[str, Any] | None = None,
    signing_key: bytes | str | None = None,
    codec: Literal["auto", "msgpack"] = "auto",
) -> ReplayResult:
    """Replay the code of ``workflow`` against the journal of ``run``; see
    the module docstring. ``store``: where ``run`` (a run id) is; without
    it ``run`` is a `RunHistory` or a history file's path. ``signing_key``
    and ``codec``: the recording engine's, to decode its values.
    `InvalidArgument` when the run is of another workflow."""
    if isinstance(run, RunHistory):
        history = run
    elif store is not None:
        history = await fetch_history(
            store, str(run), storage_options=storage_options, signing_key=signing_key
        )
    else:
        history = RunHistory.load(run)
    definition = workflow.definition
    if history.workflow != definition.name:
        raise InvalidArgument(
            f"run {history.run_id!r} is a run of workflow {history.workflow!r}, "
            f"not of {definition.name!r}"
        )
    run_id = history.run_id
    entries = {p: decode_entry(e, run_id, p) for p, e in history.journal}
    invocation = decode_invocation(history.invocation, run_id)
    try:
        invocation.check_fits(definition.fn, run_id)
    except ArgumentMismatch as e:
        return ReplayResult(
            run_id,
            definition.name,
            0,
            Divergence(None, "the run's arguments", f"refuses them: {e}"),
        )
    # Every recorded time has passed on this clock: journaled sleeps return.
    clock = MockClock(max([e.time for e in entries.values()], default=0) + 1, stall_after=None)
    async with Engine(
        MemoryObjectStore(), clock=clock, codec=codec, signing_key=signing_key
    ) as engine:
        args, kwargs = invocation.decode_args(engine.codec, run_id)
        kv = engine.queue.kv.internal()
        memo = engine.workflows.default.memos.run_memo(run_id)
        rows = [(entry_key(run_id, p), e) for p, e in history.journal]
        journal = Journal.decode(kv, memo, run_id, rows)
        delivery = Step.detached(history.invocation, run_id=run_id, step_number=1)
        ctx = _ReplayContext(engine, delivery, journal, asyncio.Event())
        return await _drive(ctx, definition.fn, args, kwargs, history, entries)


async def _drive(
    ctx: _ReplayContext,
    fn: Any,
    args: list[Any],
    kwargs: dict[str, Any],
    history: RunHistory,
    entries: dict[int, Entry],
) -> ReplayResult:
    run_id, name = history.run_id, history.workflow
    main = asyncio.create_task(fn(*args, **kwargs), context=ctx.context())
    parking = asyncio.create_task(ctx.parking.until_suspended())
    try:
        await asyncio.wait({main, parking}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in (main, parking, *ctx.inflight):
            task.cancel()
        await asyncio.gather(main, parking, *ctx.inflight, return_exceptions=True)

    def result(replayed: int, divergence: Divergence | None) -> ReplayResult:
        return ReplayResult(run_id, name, replayed, divergence)

    nd = ctx.nondeterminism
    if nd is not None:
        return result(nd.position, Divergence(nd.position, nd.journaled, f"calls {nd.new}"))
    end = ctx.end
    if end is not None:
        if end.past and history.state in ("succeeded", "failed"):
            what = f"the end of the run ({history.state})"
            return result(end.position, Divergence(end.position, what, f"calls {end.call}"))
        return result(end.position, None)
    if not main.done() or main.cancelled():  # parked with nothing journaled to answer
        return result(len(entries), None)
    taken = ctx.next_position()  # how many positions the code took
    error = main.exception()
    if isinstance(error, Abort):  # a journaled value this engine cannot read
        raise error.__cause__ or InvalidArgument(error.reason)
    ended = "returns" if error is None else f"raises {type(error).__name__}: {error}"
    later = sorted(p for p in entries if p >= taken)
    if later:
        p = later[0]
        return result(p, Divergence(p, entries[p].describe(), ended))
    if history.state == "succeeded" and error is not None:
        return result(taken, Divergence(taken, "the end of the run (it returned)", ended))
    if history.state == "failed" and error is None:
        return result(taken, Divergence(taken, "the end of the run (it raised)", ended))
    return result(taken, None)
