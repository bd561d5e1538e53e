"""durable.contrib.openai_agents: ``DurableRunner.run`` inside a workflow.

An offline model implementing the SDK's model interface (`ScriptedModel`),
counting calls: each model call and each tool call is a journaled step, the
tool calls of one response run concurrently, a tool that needs approval
waits durably for a signal, and the replay after it repeats no call.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

import pytest

pytest.importorskip("agents")

from agents import Agent, RunConfig, function_tool
from openai_offline import ScriptedModel, tool_outputs

import durable
from durable import Engine
from durable.contrib.openai_agents import DurableRunner
from durable.decorators.archive import load_journal

NO_TRACING = RunConfig(tracing_disabled=True)


def two_tools_then_answer(calls: Counter[str]) -> ScriptedModel:
    async def script(items: list[Any]) -> str | list[tuple[str, str, str]]:
        calls["model"] += 1
        outputs = tool_outputs(items)
        if not outputs:
            return [("c1", "add", '{"a": 1, "b": 2}'), ("c2", "mul", '{"a": 3, "b": 4}')]
        return " ".join(outputs)

    return ScriptedModel(script)


def runner_workflow(name: str, agent: Agent[Any]) -> durable.Workflow[[str], str]:
    @durable.workflow(name=name)
    async def run(prompt: str) -> str:
        result = await DurableRunner.run(agent, prompt, run_config=NO_TRACING)
        return str(result.final_output)

    return run


async def journal_names(engine: Engine, run_id: str) -> list[str]:
    journal = await load_journal(engine, run_id)
    return [entry.name for _, entry in journal.entries()]


async def test_each_model_call_and_tool_call_is_a_step(durable_engine: Engine) -> None:
    calls: Counter[str] = Counter()

    @function_tool
    async def add(a: int, b: int) -> int:
        """Add."""
        calls["add"] += 1
        return a + b

    @function_tool
    async def mul(a: int, b: int) -> int:
        """Multiply."""
        calls["mul"] += 1
        return a * b

    agent = Agent(name="oa", model=two_tools_then_answer(calls), tools=[add, mul])
    wf = runner_workflow("tests.oa_steps", agent)
    handle = await wf.options(run_id="oa-1").start("go")
    assert await handle.result() == "3 12"
    assert calls == Counter(model=2, add=1, mul=1)
    assert await journal_names(durable_engine, "oa-1") == [
        "oa.model",
        "oa.tool:add",
        "oa.tool:mul",
        "oa.model",
    ]


async def test_the_tool_calls_of_one_response_run_concurrently(durable_engine: Engine) -> None:
    add_started, mul_started = asyncio.Event(), asyncio.Event()

    @function_tool
    async def add(a: int, b: int) -> int:
        """Add, once mul has started."""
        add_started.set()
        await mul_started.wait()
        return a + b

    @function_tool
    async def mul(a: int, b: int) -> int:
        """Multiply, once add has started."""
        mul_started.set()
        await add_started.wait()
        return a * b

    agent = Agent(name="oa2", model=two_tools_then_answer(Counter()), tools=[add, mul])
    handle = await runner_workflow("tests.oa_together", agent).start("go")
    assert await asyncio.wait_for(handle.result(), 30) == "3 12"


async def test_an_approval_waits_durably_and_the_replay_repeats_no_call(
    durable_engine: Engine,
) -> None:
    calls: Counter[str] = Counter()

    @function_tool
    async def add(a: int, b: int) -> int:
        """Add."""
        calls["add"] += 1
        return a + b

    @function_tool(needs_approval=True)
    async def mul(a: int, b: int) -> int:
        """Multiply (needs approval)."""
        calls["mul"] += 1
        return a * b

    agent = Agent(name="oa3", model=two_tools_then_answer(calls), tools=[add, mul])
    handle = await runner_workflow("tests.oa_approve", agent).options(run_id="oa-3").start("go")
    waiting = await asyncio.wait_for(handle.waiting(), 30)
    assert waiting is not None
    assert waiting.signal_key == "approve:oa-3:c2"
    assert calls == Counter(model=1, add=1)
    await durable_engine.signal("approve:oa-3:c2", True)
    assert await asyncio.wait_for(handle.result(), 30) == "3 12"
    assert calls == Counter(model=2, add=1, mul=1)  # the replay made no call again


async def test_outside_a_workflow_it_is_runner_run(durable_engine: Engine) -> None:
    calls: Counter[str] = Counter()

    @function_tool
    async def add(a: int, b: int) -> int:
        """Add."""
        return a + b

    @function_tool
    async def mul(a: int, b: int) -> int:
        """Multiply."""
        return a * b

    agent = Agent(name="oa4", model=two_tools_then_answer(calls), tools=[add, mul])
    result = await DurableRunner.run(agent, "go", run_config=NO_TRACING)
    assert result.final_output == "3 12"
    assert calls["model"] == 2
