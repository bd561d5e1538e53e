"""`DurableRunner`: the OpenAI Agents SDK's ``Runner.run`` with durable steps."""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator
from typing import Any

from agents import Agent, FunctionTool, RunConfig, Runner, RunResult, ToolApprovalItem
from agents.models.interface import Model, ModelProvider
from agents.models.multi_provider import MultiProvider
from agents.tool_context import ToolContext

import durable
from durable.decorators.context import active_run

__all__ = ["DurableModel", "DurableRunner", "approval_key"]


class DurableModel(Model):
    """A model whose ``get_response`` is the step ``<name>.model`` in a workflow.

    The response (``agents.ModelResponse``) is journaled through the engine's
    codec; outside a workflow, and inside a step's body, it is a plain call.
    """

    def __init__(self, model: Model, name: str) -> None:
        self.model = model
        #: The prefix of the step name (the agent's name).
        self.name = name

    async def get_response(self, *args: Any, **kwargs: Any) -> Any:
        """The wrapped model's response, journaled in a workflow."""
        if active_run() is None:
            return await self.model.get_response(*args, **kwargs)

        async def model_request() -> Any:
            return await self.model.get_response(*args, **kwargs)

        return await durable.step(name=f"{self.name}.model")(model_request)()

    def stream_response(self, *args: Any, **kwargs: Any) -> AsyncIterator[Any]:
        """The wrapped model's stream (not journaled: use ``get_response`` in a workflow)."""
        if active_run() is not None:
            raise RuntimeError(
                "a streamed model response is not journaled: use DurableRunner.run "
                "(not Runner.run_streamed) inside a workflow"
            )
        return self.model.stream_response(*args, **kwargs)

    async def close(self) -> None:
        """Close the wrapped model."""
        await self.model.close()


class _DurableProvider(ModelProvider):
    """Models looked up by name, each wrapped in a `DurableModel`."""

    def __init__(self, provider: ModelProvider, name: str) -> None:
        self.provider = provider
        self.name = name

    def get_model(self, model_name: str | None) -> Model:
        return DurableModel(self.provider.get_model(model_name), self.name)


def _durable_tool(tool: FunctionTool, agent: str) -> FunctionTool:
    """``tool`` whose invocation is the step ``<agent>.tool:<name>`` in a workflow."""
    invoke = tool.on_invoke_tool
    name = f"{agent}.tool:{tool.name}"

    async def on_invoke_tool(ctx: ToolContext[Any], arguments: str) -> Any:
        if active_run() is None:
            return await invoke(ctx, arguments)

        async def call_tool() -> Any:
            return await invoke(ctx, arguments)

        return await durable.step(name=name)(call_tool)()

    return dataclasses.replace(tool, on_invoke_tool=on_invoke_tool)


def _durable_agent(agent: Agent[Any], done: dict[int, Agent[Any]]) -> Agent[Any]:
    """A clone of ``agent`` (and of the agents it hands off to) with durable
    models and function tools."""
    if id(agent) in done:
        return done[id(agent)]
    clone = agent.clone()
    done[id(agent)] = clone
    if isinstance(agent.model, Model) and not isinstance(agent.model, DurableModel):
        clone.model = DurableModel(agent.model, agent.name)
    clone.tools = [
        _durable_tool(t, agent.name) if isinstance(t, FunctionTool) else t for t in agent.tools
    ]
    clone.handoffs = [
        _durable_agent(h, done) if isinstance(h, Agent) else h for h in agent.handoffs
    ]
    return clone


def approval_key(run_id: str, item: ToolApprovalItem) -> str:
    """The signal key a tool call waiting for approval waits on:
    ``approve:<run id>:<call id>``; send ``True`` (approve) or ``False``."""
    call_id = getattr(item.raw_item, "call_id", None) or getattr(item.raw_item, "id", None)
    return f"approve:{run_id}:{call_id}"


class DurableRunner:
    """A drop-in for ``Runner.run`` inside a ``@workflow``.

    Each model call (``<agent>.model``) and each function-tool call
    (``<agent>.tool:<name>``) is a journaled step: a run that a crash
    interrupts resumes without calling the model or a tool again for what the
    journal holds. A tool with ``needs_approval`` waits durably, holding no
    worker, for ``engine.signal(approval_key(run_id, item), True or False)``
    (`durable.wait_for_signal`; at most ``approval_timeout`` seconds, then
    rejected), and the run goes on.
    """

    @staticmethod
    async def run(
        starting_agent: Agent[Any],
        input: Any,
        *,
        run_config: RunConfig | None = None,
        approval_timeout: float | None = None,
        **kwargs: Any,
    ) -> RunResult:
        """``Runner.run(starting_agent, input, ...)`` with durable steps."""
        agent = _durable_agent(starting_agent, {})
        config = run_config or RunConfig()
        if not isinstance(config.model_provider, _DurableProvider):
            provider = config.model_provider or MultiProvider()
            config = dataclasses.replace(
                config, model_provider=_DurableProvider(provider, starting_agent.name)
            )
        result = await Runner.run(agent, input, run_config=config, **kwargs)
        while result.interruptions:
            state = result.to_state()
            for item in result.interruptions:
                key = approval_key(durable.run_id(), item)
                approved = await durable.wait_for_signal(key, timeout=approval_timeout)
                if approved is True:
                    state.approve(item)
                else:
                    state.reject(item)
            result = await Runner.run(agent, state, run_config=config, **kwargs)
        return result
