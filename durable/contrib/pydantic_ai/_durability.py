"""`Durability`: the Pydantic AI capability that makes an agent's I/O durable steps.

Built on Pydantic AI's own durable-execution base
(``pydantic_ai.durable_exec.BaseDurabilityCapability``), as its Temporal, DBOS
and Prefect integrations are: the base wraps the model and the toolsets and
hands each operation (a model request, a tool call, an event for the event
stream handler) to a backend as an async callback; the backend here runs
that callback as a `durable.step` named after the operation, so its result
is journaled and a replay answers from the journal.

Inside a ``@workflow``:

- each model request is one step (``<agent>__model.request``, or
  ``..._stream`` when the run streams);
- each call of a function tool is one step (``<agent>__function_toolset__<id>
  .call_tool:<tool>``); the calls of one model response run concurrently
  and take their journal positions in the order the model listed them
  (argument validation is pure and runs inline, so nothing awaits between
  the start of a call and its step);
- a wait for an external event (``RequestInput``: a tool that needs
  approval) is a step that hands a token to ``ask`` and then a durable
  ``durable.wait_for_signal(token)``: the run holds no worker while it
  waits, and `resolve_external_event` (or ``engine.signal(token, ...)``)
  ends it.

Outside a workflow the agent runs as a plain Pydantic AI agent.
"""

from __future__ import annotations

import datetime as _dt
from collections.abc import AsyncIterable, Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypedDict

from pydantic import JsonValue, TypeAdapter
from pydantic_ai.agent import EventStreamHandler
from pydantic_ai.capabilities.abstract import WrapRunHandler
from pydantic_ai.durable_exec import (
    JSON_CODEC,
    BaseDurabilityCapability,
    DurabilityEngineSpec,
    DurableOperationBackend,
    DurableOperationId,
    ExternalEventError,
    ExternalEventWaiter,
    JournalCallableOperationBackend,
    RoleBasedOperationConfig,
    ToolsetKind,
    ToolsetValidateToolArgumentsId,
    external_event_scope,
)
from pydantic_ai.messages import (
    AgentStreamEvent,
    PartDeltaEvent,
    PartStartEvent,
    TextPart,
    TextPartDelta,
)
from pydantic_ai.models import Model
from pydantic_ai.run import AgentRunResult
from pydantic_ai.tools import AgentDepsT, DeferredToolResults, RunContext

import durable
from durable.decorators.backoff import Backoff
from durable.decorators.context import RunContext as _RunContext
from durable.decorators.context import active_run
from durable.decorators.engine import Engine
from durable.decorators.streams import write_stream
from durable.engine.signals import SignalOutcome

__all__ = ["Durability", "StepOptions", "resolve_external_event"]


class StepOptions(TypedDict, total=False):
    """Options of the steps an operation runs in (those of ``@step``)."""

    max_attempts: int
    backoff: Backoff
    retry_on: type[Exception] | tuple[type[Exception], ...]
    timeout: float


_DEFERRED = TypeAdapter(DeferredToolResults)


class _StepBackend(JournalCallableOperationBackend[StepOptions]):
    """Runs each operation as a `durable.step` named after it."""

    async def execute(
        self,
        *,
        operation_id: DurableOperationId,
        name: str,
        body: Callable[[], Awaitable[object]],
        cache_key: tuple[object, ...],
        config: StepOptions,
    ) -> object:
        if isinstance(operation_id, ToolsetValidateToolArgumentsId):
            # Pure: validating arguments does no I/O; inline, it keeps a tool
            # call's step the first thing its task numbers.
            return await body()

        async def operation() -> object:
            return await body()

        return await durable.step(name=name, **(config or {}))(operation)()


def _run_name(run: _RunContext) -> str:
    """The run's id, and its incarnation after a ``continue_as_new`` (the
    journal positions start again at 0 in each incarnation)."""
    return run.run_id if not run.incarnation else f"{run.run_id}.i{run.incarnation}"


@dataclass
class _SignalWaiter(ExternalEventWaiter):
    """A wait for an external event as a step (``ask``) and a durable signal wait."""

    agent: str

    async def wait(
        self,
        name: str,
        *,
        ask: Callable[[str], Awaitable[JsonValue]],
        timeout: _dt.timedelta | None,  # noqa: ASYNC109 (pydantic-ai's interface)
    ) -> JsonValue:
        run = active_run()
        assert run is not None  # installed in workflow code only
        # The positions of the ask step and the wait: the same on every replay.
        token = f"{_run_name(run)}:{self.agent}:{name}:{run.peek_position()}"

        async def asked() -> JsonValue:
            return await ask(token)

        answer = await durable.step(name=f"{self.agent}__external_event.{name}.ask")(asked)()
        if answer is not None:
            return answer
        limit = None if timeout is None else timeout.total_seconds()
        payload = await durable.wait_for_signal(token, timeout=limit)
        if payload is None:
            raise ExternalEventError(f"no answer to {name!r} (token {token!r}) within {timeout}")
        if isinstance(payload, dict) and set(payload) == {"error"}:
            raise ExternalEventError(str(payload["error"]))
        result: JsonValue = payload
        return result


async def resolve_external_event(
    engine: Engine, token: str, results: DeferredToolResults | JsonValue
) -> SignalOutcome:
    """End the durable wait that handed out ``token`` with ``results`` (for
    ``RequestInput``: the `DeferredToolResults` with each approval).

    ``engine.signal(token, payload)`` with the JSON form; works from a client
    engine (``Engine(url, role="client")``) too.
    """
    if isinstance(results, DeferredToolResults):
        results = _DEFERRED.dump_python(results, mode="json")
    return await engine.signal(token, results)


class Durability(BaseDurabilityCapability[AgentDepsT]):
    """Capability: run the agent's model requests and tool calls as `durable` steps.

    Attach it to the agent (``Agent(model, name="support", capabilities=
    [Durability()])``) and call ``agent.run(...)`` inside a ``@workflow``, or
    wrap the agent in `DurableAgent`, whose run is one. The agent needs a
    unique ``name`` (or ``name=`` here): it names the steps, which must stay
    stable while runs are in flight.

    Args:
        models: More models by id, for runs that pick one at run time (the
            agent's own model is always ``"default"``).
        stream: The durable stream (``durable.write_stream``) each model
            request writes its text to as it arrives, from inside its step;
            None: none. Model requests stream when it is set.
        event_stream_handler: A Pydantic AI event stream handler; model
            events reach it live inside the model-request step, other events
            each in a step of their own.
        name: The name in the step names (default: the agent's).
        model_step, tool_step: `StepOptions` of the model-request and
            tool-call steps (retries, timeout); default one attempt.
    """

    engine_spec = DurabilityEngineSpec(
        engine_name="durable",
        durable_unit_noun="step",
        durable_container_noun="workflow",
        codec=JSON_CODEC,  # journal engine: values become plain data
        unsupported_runtime_toolset_kinds=frozenset({"function", "mcp", "dynamic"}),
        wrapped_toolset_kinds=frozenset({"function", "mcp", "dynamic"}),
        toolset_lifecycles={
            "function": "enter-always",
            "mcp": "enter-in-durable-unit",
            "dynamic": "enter-never",
        },
        journal_discovery=True,
        sequential_tools_in_durable_context=False,
        tool_config_key="durable",
    )

    def __init__(
        self,
        *,
        models: Mapping[str, Model] | None = None,
        stream: str | None = None,
        event_stream_handler: EventStreamHandler[AgentDepsT] | None = None,
        name: str | None = None,
        model_step: StepOptions | None = None,
        tool_step: StepOptions | None = None,
    ) -> None:
        if stream is not None and event_stream_handler is not None:
            raise ValueError("pass stream= or event_stream_handler=, not both")
        handler = event_stream_handler if stream is None else _stream_text(stream)
        super().__init__(models=models, event_stream_handler=handler, name=name)
        self.stream = stream
        self._model_step: StepOptions = dict(model_step or {})  # type: ignore[assignment]
        self._tool_step: StepOptions = dict(tool_step or {})  # type: ignore[assignment]

    @property
    def in_durable_context(self) -> bool:
        """Whether this code is workflow code (not a step's body)."""
        return active_run() is not None

    def get_default_run_id(self) -> str | None:
        """A run id the journal fixes: the workflow run's id and position."""
        run = active_run()
        return None if run is None else f"{_run_name(run)}:{run.peek_position()}"

    async def get_run_start_time(self, run_id: str) -> _dt.datetime | None:
        """When the agent run first started (a step, so a replay keeps it)."""
        run = active_run()
        if run is None:
            return None
        clock = run.clock

        async def run_start_time() -> int:
            return clock.now_ms()

        ms = await durable.step(name=f"{self.name}__run_start_time")(run_start_time)()
        return _dt.datetime.fromtimestamp(ms / 1000, tz=_dt.UTC)

    def get_durable_operation_backend(self) -> DurableOperationBackend[StepOptions]:
        """The backend that runs each operation as a step."""
        return _StepBackend(
            agent_name=self.name,
            default_model_id=self.default_model_id,
            config=RoleBasedOperationConfig(
                model=self._model_step,
                event=StepOptions(),
                capability=StepOptions(),
                tool=self._tool_step,
            ),
        )

    def _toolset_base_config(self, kind: ToolsetKind) -> Any:
        return self._tool_step

    async def wrap_run(
        self, ctx: RunContext[AgentDepsT], *, handler: WrapRunHandler
    ) -> AgentRunResult[Any]:
        """In a workflow, waits for external events become durable signal waits."""
        if not self.in_durable_context:
            return await super().wrap_run(ctx, handler=handler)
        with external_event_scope(_SignalWaiter(self.name)):
            return await super().wrap_run(ctx, handler=handler)


def _stream_text(key: str) -> EventStreamHandler[Any]:
    """The event stream handler that writes the model's text to stream ``key``."""

    async def handler(ctx: RunContext[Any], events: AsyncIterable[AgentStreamEvent]) -> None:
        async for event in events:
            text = None
            if isinstance(event, PartStartEvent) and isinstance(event.part, TextPart):
                text = event.part.content
            elif isinstance(event, PartDeltaEvent) and isinstance(event.delta, TextPartDelta):
                text = event.delta.content_delta
            if text:
                await write_stream(key, text)

    return handler
