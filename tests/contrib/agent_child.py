"""A worker process for the agent kill -9 tests (tests/contrib/test_agents_kill9.py).

    python agent_child.py STORE LOG start|finish RUN_ID pydantic_ai|openai_agents

An agent whose offline model makes four calls: the first three each ask for
the tool ``bump(n)``, the fourth answers. Every model call and tool call
appends a line to LOG (``model-start N``, ``model-done N``, ``tool N``),
flushed to disk before it returns. ``start`` starts the run and blocks for
ever inside model call 3 (the test kills it there); ``finish`` opens the
store again, lets the run finish, and prints its output as JSON.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path
from typing import Any

import durable

STORE, LOG, MODE, RUN_ID, FRAMEWORK = sys.argv[1:6]
CALLS = 4
BLOCK_AT = 3 if MODE == "start" else None


def note(line: str) -> None:
    with open(LOG, "a") as f:
        f.write(f"{line}\n")
        f.flush()
        os.fsync(f.fileno())


async def model_call(n: int) -> None:
    """Count model call ``n``; in ``start`` mode, never return from call 3."""
    note(f"model-start {n}")
    if n == BLOCK_AT:
        await asyncio.Event().wait()  # killed here
    note(f"model-done {n}")


def pydantic_ai_agent() -> Any:
    from pydantic_ai import Agent
    from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
    from pydantic_ai.models.function import AgentInfo, FunctionModel

    from durable.contrib.pydantic_ai import Durability, DurableAgent

    async def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        n = sum(isinstance(m, ModelResponse) for m in messages) + 1
        await model_call(n)
        if n < CALLS:
            return ModelResponse(parts=[ToolCallPart("bump", {"n": n}, tool_call_id=f"t{n}")])
        return ModelResponse(parts=[TextPart("done")])

    agent = Agent(FunctionModel(model), name="kill9", capabilities=[Durability()])

    @agent.tool_plain
    async def bump(n: int) -> int:
        note(f"tool {n}")
        return n + 1

    return DurableAgent(agent).workflow


def openai_agents_workflow() -> Any:
    from openai_offline import build

    return build(model_call, note, CALLS)


async def main() -> None:
    wf = pydantic_ai_agent() if FRAMEWORK == "pydantic_ai" else openai_agents_workflow()
    async with durable.Engine(Path(STORE)):
        if MODE == "start":
            handle = await wf.options(run_id=RUN_ID).start("go")
        else:
            handle = wf.handle(RUN_ID)
        output = await handle.result()
    print(json.dumps(output))


if __name__ == "__main__":
    asyncio.run(main())
