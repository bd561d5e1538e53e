"""`WorkflowHandle`: a started workflow run, seen from outside it.

A handle is only a run id bound to a running `Engine`: ``start`` returns
one, and ``engine.handle(run_id)`` rebuilds one in another process or after
a restart. Everything it reports is read from the store.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any, Generic, TypeVar, overload

from durable.decorators.children import cancel_tree
from durable.decorators.moves import across_moves
from durable.decorators.outcome import read_result
from durable.decorators.published import wait_published
from durable.decorators.requests import send_request
from durable.decorators.stall import wait_or_stall
from durable.decorators.status import WorkflowStatus, read_status
from durable.decorators.stream_read import read_stream, stream_offset
from durable.decorators.typed import from_plain
from durable.decorators.waiting import Waiting, wait_until_waiting
from durable.engine.runs import validate_run_id
from durable.errors import InputMismatch, RunNotFound

if TYPE_CHECKING:
    from durable.decorators.base import EngineBase
    from durable.decorators.outcome import RunResult

__all__ = ["WorkflowHandle"]

R = TypeVar("R")
T = TypeVar("T")


class WorkflowHandle(Generic[R]):
    """A workflow run: wait for its result, read its status, cancel it."""

    __slots__ = ("_engine", "_input_digest", "result_type", "run_id")

    def __init__(
        self,
        engine: EngineBase,
        run_id: str,
        *,
        input_digest: bytes | None = None,
        result_type: Any = Any,
    ) -> None:
        self._engine = engine
        #: The annotation the result is validated into (the workflow's return
        #: annotation for a handle of ``wf.start`` or ``wf.handle``; Any for
        #: ``engine.handle``; `durable.decorators.typed`).
        self.result_type = result_type
        #: The run's id.
        self.run_id = validate_run_id(run_id)
        # The SHA-256 of the arguments this handle's `start` sent (None: a
        # handle on a run started elsewhere).
        self._input_digest = input_digest

    async def result(self, timeout: float | None = None) -> R:  # noqa: ASYNC109
        """Wait for the run to end (at most ``timeout`` seconds of the engine's
        clock: `TimeoutError` after); its return value.

        Raises what the workflow raised (its own type when the exception
        can be rebuilt, else `WorkflowFailed` with its type and message), or
        `RunCancelled`; `RunNotFound` if the store holds no such run.
        `InputMismatch` when this handle's `start` sent other arguments than
        the run that ran under its id (another process started the id first,
        and the clash was not visible when this one started: see
        `durable.cluster.client`). On a `MockClock`, `ClockNotAdvanced` when
        the run waits for a time of the clock that nothing advances
        (`durable.decorators.stall`).
        """
        result = await across_moves(self._engine, self.run_id, timeout, self._result)
        value: R = from_plain(
            result.value(self._engine.codec), self.result_type, f"the result of run {self.run_id!r}"
        )
        return value

    async def _result(self, engine: EngineBase, timeout: float | None) -> RunResult:  # noqa: ASYNC109
        """`result` on the mode of the run's store now (`across_moves`)."""
        runtime = engine.workflows.default
        end = await wait_or_stall(engine, self.run_id, runtime.wait_timeout(self.run_id, timeout))
        if end is None:
            raise RunNotFound(self.run_id, "handle.result()")
        if self._input_digest is not None:
            record = runtime.view.terminal_record(self.run_id)
            digest = record.input_sha256 if record is not None else None
            if digest is not None and digest != self._input_digest:
                raise InputMismatch(self.run_id)
        return await read_result(engine.codec, runtime, end, self.run_id)

    @overload
    async def get(self, key: str, timeout: float | None = None) -> Any: ...  # noqa: ASYNC109
    @overload
    async def get(self, key: str, timeout: float | None = None, *, type: type[T]) -> T: ...  # noqa: ASYNC109
    async def get(
        self,
        key: str,
        timeout: float | None = None,  # noqa: ASYNC109
        *,
        type: Any = Any,
    ) -> Any:
        """The latest value the run published under ``key`` (`durable.publish`);
        waits for the first one at most ``timeout`` seconds of the engine's
        clock (None: no limit), then raises `TimeoutError` naming the run and key.
        Once the run has terminated: its last value, or `NotPublished` if it
        never published ``key``; `RunNotFound` for an unknown run. With
        ``type=T`` the value is validated into ``T`` (a dataclass, a model,
        ``list[Model]``, ``int``...; `TypeMismatch` naming the run and key)."""
        value = await across_moves(
            self._engine,
            self.run_id,
            timeout,
            lambda part, left: wait_published(part, self.run_id, key, left),
        )
        if type is Any:
            return value
        return from_plain(
            value, type, f"the value run {self.run_id!r} published under {key!r}", strict=True
        )

    async def request(
        self,
        name: str,
        value: object = None,
        timeout: float | None = None,  # noqa: ASYNC109
    ) -> Any:
        """Send request ``name`` with ``value`` to the run, which takes it with
        ``durable.receive(name)``, and return its reply. Raises
        `RequestRejected` (with the run's reason) if it rejects the request,
        `RequestUnanswered` if the run ends without answering,
        `TimeoutError` after ``timeout`` seconds of the engine's clock (None:
        no limit; the request is withdrawn), `RunNotFound` for an unknown run
        and `WrongRunState` for one that has ended (nothing is sent). The
        request is durable once sent: a crash of the run's worker hands it to
        the replayed run, and the caller gets one answer. See
        `durable.decorators.requests`."""
        return await send_request(self._engine, self.run_id, name, value, timeout)

    def read_stream(self, key: str, offset: int = 0) -> AsyncIterator[Any]:
        """The items of the run's stream ``key`` (`durable.write_stream`) from
        ``offset`` on, as they are written: ``async for value in
        handle.read_stream(key)``. Each item is a written value, or a
        `StreamDiscarded` marker (a step attempt that wrote values was
        discarded). Ends once the stream is closed (`durable.close_stream`)
        or the run has ended, and every item is read; `RunNotFound` for an
        unknown run. Watches the store, no polling."""
        return read_stream(self._engine, self.run_id, key, offset)

    async def stream_offset(self, key: str) -> int:
        """How many items the run's stream ``key`` holds now (the offset of
        the next one; 0 if never written); `RunNotFound` for an unknown run."""
        return await stream_offset(self._engine, self.run_id, key)

    async def waiting(
        self,
        timeout: float | None = None,  # noqa: ASYNC109
        *,
        after: Waiting | None = None,
    ) -> Waiting | None:
        """Wait until the run waits durably (at once if it does), and where:
        a `Waiting` with the signal key it waits on and when it wakes anyway.

        With ``after`` (a `Waiting` this returned before), only a later wait
        counts. Returns None if the run terminates first (or had).
        `TimeoutError` after ``timeout`` seconds of the engine's clock (None:
        no limit); `RunNotFound` for an unknown run. Watches the store, no
        polling.
        """
        return await across_moves(
            self._engine,
            self.run_id,
            timeout,
            lambda part, left: wait_until_waiting(part, self.run_id, left, after),
        )

    async def status(self) -> WorkflowStatus | None:
        """Where the run is: a `WorkflowStatus` (its state, PENDING, RUNNING,
        WAITING, SUCCEEDED, FAILED or CANCELLED, its workflow, journaled
        steps, current step, what it waits on, its error); None if the store
        does not know the run. Reads the store's memory, no journal scan
        (see `durable.decorators.status`)."""
        return await across_moves(
            self._engine, self.run_id, None, lambda part, _: read_status(part, self.run_id)
        )

    async def cancel(self) -> bool:
        """Cancel the run and its child runs; False if it was unknown or had
        already terminated. Durable when this returns; a delivery in flight
        is cancelled at once and the run ends as cancelled."""
        return await cancel_tree(self._engine, self.run_id)

    def __repr__(self) -> str:
        return f"WorkflowHandle({self.run_id!r})"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, WorkflowHandle):
            return NotImplemented
        return self.run_id == other.run_id and self._engine is other._engine

    def __hash__(self) -> int:
        return hash(self.run_id)
