"""`DurableAgent`: a Pydantic AI agent whose run is a ``@workflow``."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Generic, TypeVar

from pydantic_ai.agent import AbstractAgent
from pydantic_ai.messages import ModelMessage, ModelMessagesTypeAdapter

from durable.decorators.handles import WorkflowHandle
from durable.decorators.workflow import Workflow, workflow

from ._durability import Durability

__all__ = ["DurableAgent"]

DepsT = TypeVar("DepsT")
OutputT = TypeVar("OutputT")


class DurableAgent(Generic[DepsT, OutputT]):
    """A Pydantic AI agent whose run is the ``@workflow`` ``<name>.run``.

    The agent carries the `Durability` capability (``Agent(model, name=...,
    capabilities=[Durability()])``), so inside the workflow each model
    request and each tool call is a journaled step: a run that a crash
    interrupts resumes in any process that constructs the same
    `DurableAgent` (at import time, as any ``@workflow``), without making a
    finished model call or tool call again.

    ``run`` starts the workflow and returns the agent's output;
    ``start`` returns its handle; `workflow` is the ``@workflow`` itself
    (``.options(run_id=...)``, a child run inside another workflow).
    """

    def __init__(self, agent: AbstractAgent[DepsT, OutputT], *, name: str | None = None) -> None:
        capability = Durability.from_agent(agent)
        if capability is None:
            raise ValueError(
                f"agent {agent.name!r} has no Durability capability: build it with "
                "Agent(..., capabilities=[Durability()])"
            )
        self.agent = agent
        #: The workflow's name prefix (default: the agent's name).
        self.name: str = name or capability.name or agent.name or ""

        async def run_agent(
            prompt: str | None,
            message_history: list[Any] | None = None,
            deps: Any = None,
        ) -> Any:
            history = (
                ModelMessagesTypeAdapter.validate_python(message_history)
                if message_history
                else None
            )
            result = await agent.run(prompt, message_history=history, deps=deps)
            return result.output

        run_agent.__qualname__ = f"DurableAgent[{self.name}].run"
        #: The ``@workflow`` that runs the agent once: (prompt, message_history, deps) -> output.
        self.workflow: Workflow[..., Any] = workflow(name=f"{self.name}.run")(run_agent)

    async def start(
        self,
        prompt: str | None,
        *,
        message_history: Sequence[ModelMessage] | None = None,
        deps: DepsT | None = None,
        run_id: str | None = None,
    ) -> WorkflowHandle[OutputT]:
        """Start a run of the agent (a workflow run); its handle."""
        history = (
            ModelMessagesTypeAdapter.dump_python(list(message_history), mode="json")
            if message_history
            else None
        )
        starter = self.workflow if run_id is None else self.workflow.options(run_id=run_id)
        handle: WorkflowHandle[OutputT] = await starter.start(prompt, history, deps)
        return handle

    async def run(
        self,
        prompt: str | None,
        *,
        message_history: Sequence[ModelMessage] | None = None,
        deps: DepsT | None = None,
        run_id: str | None = None,
    ) -> OutputT:
        """Run the agent as a workflow run and return its output."""
        handle = await self.start(prompt, message_history=message_history, deps=deps, run_id=run_id)
        return await handle.result()
