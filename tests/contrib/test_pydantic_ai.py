"""durable.contrib.pydantic_ai: a Pydantic AI agent whose run is a workflow.

Offline models only (Pydantic AI's `FunctionModel`), counting their calls:
each model request and each tool call is a journaled step, the tool calls of
one response run concurrently, a tool that needs approval waits durably for
a signal, and a replayed run answers from the journal without calling the
model or a tool again.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

import pytest

pytest.importorskip("pydantic_ai")

from pydantic_ai import Agent
from pydantic_ai.capabilities import RequestInput
from pydantic_ai.messages import (
    ModelMessage,
    ModelMessagesTypeAdapter,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
)
from pydantic_ai.models.function import AgentInfo, DeltaToolCall, FunctionModel
from pydantic_ai.tools import DeferredToolRequests, DeferredToolResults

import durable
from durable import Engine, workflow
from durable.contrib.pydantic_ai import Durability, DurableAgent, resolve_external_event
from durable.decorators.archive import load_journal


def tool_returns(messages: list[ModelMessage]) -> list[ToolReturnPart]:
    return [p for m in messages for p in m.parts if isinstance(p, ToolReturnPart)]


def two_tools_then_answer(calls: Counter[str]) -> FunctionModel:
    """First response: calls of ``add`` and ``mul``; then their results as text."""

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        calls["model"] += 1
        returns = tool_returns(messages)
        if not returns:
            return ModelResponse(
                parts=[
                    ToolCallPart("add", {"a": 1, "b": 2}, tool_call_id="c1"),
                    ToolCallPart("mul", {"a": 3, "b": 4}, tool_call_id="c2"),
                ]
            )
        return ModelResponse(parts=[TextPart(" ".join(str(r.content) for r in returns))])

    async def stream(messages: list[ModelMessage], info: AgentInfo) -> Any:
        response = model(messages, info)
        for i, part in enumerate(response.parts):
            if isinstance(part, TextPart):
                for word in part.content.split(" "):
                    yield word + " "
            else:
                assert isinstance(part, ToolCallPart)
                yield {
                    i: DeltaToolCall(
                        part.tool_name, part.args_as_json_str(), tool_call_id=part.tool_call_id
                    )
                }

    return FunctionModel(model, stream_function=stream)


async def journal_names(engine: Engine, run_id: str) -> list[str]:
    journal = await load_journal(engine, run_id)
    return [entry.name for _, entry in journal.entries()]


async def test_each_model_request_and_tool_call_is_a_step(durable_engine: Engine) -> None:
    calls: Counter[str] = Counter()
    agent = Agent(two_tools_then_answer(calls), name="steps", capabilities=[Durability()])

    async def check(ctx: Any, a: int, b: int) -> None:
        calls["check"] += 1  # pure: runs inline in workflow code, not as a step

    @agent.tool_plain(args_validator=check)
    async def add(a: int, b: int) -> int:
        calls["add"] += 1
        return a + b

    @agent.tool_plain
    def mul(a: int, b: int) -> int:  # a plain def tool: run in a thread, still a step
        calls["mul"] += 1
        return a * b

    durable_agent = DurableAgent(agent)
    assert await durable_agent.run("go", run_id="steps-1") == "3 12"
    assert calls == Counter(model=2, add=1, mul=1, check=1)
    assert await journal_names(durable_engine, "steps-1") == [
        "steps__model.request",
        "steps__function_toolset__<agent>.call_tool:add",
        "steps__function_toolset__<agent>.call_tool:mul",
        "steps__model.request",
    ]


async def test_the_tool_calls_of_one_response_run_concurrently(durable_engine: Engine) -> None:
    calls: Counter[str] = Counter()
    agent = Agent(two_tools_then_answer(calls), name="together", capabilities=[Durability()])
    add_started, mul_started = asyncio.Event(), asyncio.Event()

    # Each tool waits for the other to have started: run one after the
    # other, the first would wait for ever.
    @agent.tool_plain
    async def add(a: int, b: int) -> int:
        add_started.set()
        await mul_started.wait()
        return a + b

    @agent.tool_plain
    async def mul(a: int, b: int) -> int:
        mul_started.set()
        await add_started.wait()
        return a * b

    answer = await asyncio.wait_for(DurableAgent(agent).run("go", run_id="together-1"), 30)
    assert answer == "3 12"


async def test_an_approval_waits_durably_and_the_replay_repeats_no_call(
    durable_engine: Engine,
) -> None:
    calls: Counter[str] = Counter()
    asked: list[str] = []

    def ask(ctx: Any, requests: DeferredToolRequests, token: str) -> None:
        asked.append(token)  # e.g. post the token to a reviewer; answer later

    agent = Agent(
        two_tools_then_answer(calls),
        name="approve",
        capabilities=[Durability(), RequestInput(ask)],
    )

    @agent.tool_plain
    async def add(a: int, b: int) -> int:
        calls["add"] += 1
        return a + b

    @agent.tool_plain(requires_approval=True)
    async def mul(a: int, b: int) -> int:
        calls["mul"] += 1
        return a * b

    handle = await DurableAgent(agent).start("go", run_id="approve-1")
    waiting = await asyncio.wait_for(handle.waiting(), 30)
    assert waiting is not None
    assert asked == [waiting.signal_key]  # the token is the signal key
    assert calls == Counter(model=1, add=1)  # mul waits; add ran
    outcome = await resolve_external_event(
        durable_engine, asked[0], DeferredToolResults(approvals={"c2": True})
    )
    assert outcome.name == "DELIVERED"
    assert await asyncio.wait_for(handle.result(), 30) == "3 12"
    # The run resumed by running the workflow again from the top: the first
    # model request, add and the ask answered from the journal.
    assert calls == Counter(model=2, add=1, mul=1)
    assert asked == [waiting.signal_key]
    names = await journal_names(durable_engine, "approve-1")
    assert names.count("approve__model.request") == 2
    assert "approve__external_event.deferred_tool_calls.ask" in names


async def test_a_denied_tool_is_not_called(durable_engine: Engine) -> None:
    calls: Counter[str] = Counter()
    agent = Agent(
        two_tools_then_answer(calls),
        name="deny",
        capabilities=[Durability(), RequestInput(lambda ctx, requests, token: None)],
    )

    @agent.tool_plain
    async def add(a: int, b: int) -> int:
        return a + b

    @agent.tool_plain(requires_approval=True)
    async def mul(a: int, b: int) -> int:
        calls["mul"] += 1
        return a * b

    handle = await DurableAgent(agent).start("go", run_id="deny-1")
    waiting = await asyncio.wait_for(handle.waiting(), 30)
    assert waiting is not None
    assert waiting.signal_key is not None
    denied = DeferredToolResults(approvals={"c2": False})
    await resolve_external_event(durable_engine, waiting.signal_key, denied)
    answer = await asyncio.wait_for(handle.result(), 30)
    assert answer.startswith("3 ")
    assert calls["mul"] == 0


async def test_a_streaming_run_journals_the_streamed_response(durable_engine: Engine) -> None:
    calls: Counter[str] = Counter()
    agent = Agent(
        two_tools_then_answer(calls), name="streamed", capabilities=[Durability(stream="out")]
    )

    @agent.tool_plain
    async def add(a: int, b: int) -> int:
        return a + b

    @agent.tool_plain
    async def mul(a: int, b: int) -> int:
        return a * b

    answer = await DurableAgent(agent).run("go", run_id="streamed-1")
    assert answer.split() == ["3", "12"]
    names = await journal_names(durable_engine, "streamed-1")
    assert names.count("streamed__model.request_stream") == 2
    # The model's text went through the run's durable stream as it came.
    handle = durable_engine.handle("streamed-1")
    text = [piece async for piece in handle.read_stream("out")]
    assert "".join(text).split() == ["3", "12"]
    assert len(text) >= 2  # piece by piece, not one final write


async def test_outside_a_workflow_the_agent_runs_as_usual(durable_engine: Engine) -> None:
    calls: Counter[str] = Counter()
    agent = Agent(two_tools_then_answer(calls), name="plain", capabilities=[Durability()])

    @agent.tool_plain
    async def add(a: int, b: int) -> int:
        return a + b

    @agent.tool_plain
    async def mul(a: int, b: int) -> int:
        return a * b

    result = await agent.run("go")
    assert result.output == "3 12"
    assert calls["model"] == 2


def test_an_agent_without_the_capability_is_refused() -> None:
    agent = Agent(FunctionModel(lambda m, i: ModelResponse(parts=[])), name="bare")
    with pytest.raises(ValueError, match="no Durability capability"):
        DurableAgent(agent)


async def test_an_agent_runs_again_in_each_incarnation_of_a_continued_run(
    durable_engine: Engine,
) -> None:
    # A chat loop: one agent run per incarnation, the history carried in the
    # arguments. Journal positions start again at 0 after continue_as_new, so
    # the agent's run ids (and approval tokens) must name the incarnation.
    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        return ModelResponse(parts=[TextPart(f"seen {len(messages)}")])

    agent = Agent(FunctionModel(model), name="looping", capabilities=[Durability()])

    @workflow(name="tests.pydantic_ai.loop")
    async def loop(history: list[Any] | None = None, turns: int = 0) -> list[str]:
        past = ModelMessagesTypeAdapter.validate_python(history) if history else None
        result = await agent.run(f"turn {turns}", message_history=past)
        if turns == 2:
            return [str(r.content) for r in texts(result.all_messages())]
        messages = ModelMessagesTypeAdapter.dump_python(result.all_messages(), mode="json")
        durable.continue_as_new(messages, turns + 1)
        raise AssertionError("unreachable")

    handle = await loop.options(run_id="loop-1").start()
    assert await asyncio.wait_for(handle.result(), 30) == ["seen 1", "seen 3", "seen 5"]
    status = await handle.status()
    assert status is not None
    assert status.incarnation == 2


def texts(messages: list[ModelMessage]) -> list[TextPart]:
    return [p for m in messages for p in m.parts if isinstance(p, TextPart)]
