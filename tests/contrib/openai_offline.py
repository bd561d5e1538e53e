"""An offline model for the OpenAI Agents SDK tests: the SDK's model interface,
answering from a script (no network)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from agents import ModelResponse, Usage
from agents.models.interface import Model
from openai.types.responses import (
    ResponseFunctionToolCall,
    ResponseOutputMessage,
    ResponseOutputText,
)

#: The script: the model's input items -> its output (a text or tool calls).
Script = Callable[[list[Any]], Awaitable[str | list[tuple[str, str, str]]]]


def tool_outputs(items: str | list[Any]) -> list[str]:
    """The tool results in the model's input, in order."""
    if isinstance(items, str):
        return []
    return [
        str(i["output"])
        for i in items
        if isinstance(i, dict) and i.get("type") == "function_call_output"
    ]


class ScriptedModel(Model):
    """``get_response`` answers with what ``script`` returns: a final text, or
    tool calls as (call id, tool name, JSON arguments)."""

    def __init__(self, script: Script) -> None:
        self.script = script

    async def get_response(self, system_instructions: Any, input: Any, *a: Any, **k: Any) -> Any:
        said = await self.script(input if isinstance(input, list) else [input])
        if isinstance(said, str):
            text = ResponseOutputText(type="output_text", text=said, annotations=[])
            output: list[Any] = [
                ResponseOutputMessage(
                    id="m", type="message", role="assistant", status="completed", content=[text]
                )
            ]
        else:
            output = [
                ResponseFunctionToolCall(
                    type="function_call", call_id=cid, name=name, arguments=args, id=cid
                )
                for cid, name, args in said
            ]
        return ModelResponse(output=output, usage=Usage(), response_id=None)

    def stream_response(self, *args: Any, **kwargs: Any) -> AsyncIterator[Any]:
        raise NotImplementedError("the scripted model does not stream")


def build(
    model_call: Callable[[int], Awaitable[None]], note: Callable[[str], None], calls: int
) -> Any:
    """The kill -9 test's workflow (tests/contrib/agent_child.py): ``calls``
    model calls, each but the last asking for ``bump(n)``."""
    from agents import Agent, RunConfig, function_tool

    import durable
    from durable.contrib.openai_agents import DurableRunner

    async def script(items: list[Any]) -> str | list[tuple[str, str, str]]:
        n = len(tool_outputs(items)) + 1
        await model_call(n)
        if n < calls:
            return [(f"t{n}", "bump", f'{{"n": {n}}}')]
        return "done"

    @function_tool
    async def bump(n: int) -> int:
        """Add one."""
        note(f"tool {n}")
        return n + 1

    agent = Agent(name="kill9", model=ScriptedModel(script), tools=[bump])

    @durable.workflow(name="tests.kill9_openai")
    async def run(prompt: str) -> str:
        result = await DurableRunner.run(agent, prompt, run_config=RunConfig(tracing_disabled=True))
        return str(result.final_output)

    return run
