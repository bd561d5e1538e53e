"""Agent: an LLM-style tool loop as a durable workflow, with a human approval.

    python -m examples.agent [DIR]

The "model" is a fake HTTP server on 127.0.0.1 that this example starts
itself (aiohttp, on a free port). It answers deterministically: first a
``calculator`` tool call, then a ``send_email`` tool call, then a final
answer built from the tool results it was sent.

The agent is a ``@workflow`` that loops: call the model (a ``@step``: an
HTTP request), run the tool it asks for (a ``@step``), feed the result back.
``send_email`` is *dangerous*: before it runs, the workflow waits durably for
an approval with ``durable.wait_for_signal(f"approve:{run id}", timeout=...)``.
While it waits the run holds no worker; when the wait ends the workflow
function runs again from the top, and every model call and tool call it had
already made answers from the journal: the model server sees each request
exactly once.

Two runs show both ends of the approval:

1. ``agent-approved``: the example approves with ``engine.signal(key, True)``;
   the email is sent and the model writes its final answer.
2. ``agent-timeout``: nobody answers. The engine runs on a ``MockClock``,
   so the example moves time past the timeout instead of waiting for it:
   the wait returns None, the email is not sent, and the model is told so.
"""

from __future__ import annotations

import asyncio
import re
from collections import Counter
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web

import durable
from durable import Engine, WorkflowHandle, step, workflow
from durable.store.clock import MockClock
from examples._store_dir import run_with_store

TASK = "What is 17 * 23? Email the answer to ops@example.com."
#: Seconds a dangerous tool call waits for a human's approval.
APPROVAL_TIMEOUT = 3600.0
#: The tools that need an approval before they run.
DANGEROUS = {"send_email"}
MAX_TURNS = 8

MODEL_URL: list[str] = []  # set once the fake model server listens
executions: Counter[str] = Counter()  # what ran in this process (side effects)


# ----------------------------------------------------------------- the model


def scripted_reply(messages: list[dict[str, Any]]) -> dict[str, Any]:
    """The fake model: its next message given the conversation so far."""
    results = [m["content"] for m in messages if m["role"] == "tool"]
    if not results:
        return {"type": "tool", "tool": "calculator", "args": {"expression": "17 * 23"}}
    if len(results) == 1:
        body = f"17 * 23 = {results[0]}"
        return {
            "type": "tool",
            "tool": "send_email",
            "args": {"to": "ops@example.com", "body": body},
        }
    return {"type": "final", "content": f"17 * 23 = {results[0]}; email: {results[1]}"}


async def model_endpoint(request: web.Request) -> web.Response:
    """``POST /v1/chat``: count the request (per run), answer from the script."""
    body = await request.json()
    request.app[REQUESTS][body["run_id"]] += 1
    return web.json_response(scripted_reply(body["messages"]))


REQUESTS = web.AppKey("requests", Counter[str])


async def start_model_server() -> tuple[web.AppRunner, Counter[str]]:
    """Start the fake model on 127.0.0.1 (a free port); its runner and request counts."""
    app = web.Application()
    app[REQUESTS] = Counter()
    app.router.add_post("/v1/chat", model_endpoint)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    host, port = runner.addresses[0][:2]
    MODEL_URL.append(f"http://{host}:{port}/v1/chat")
    return runner, app[REQUESTS]


# ----------------------------------------------------------------- the steps


@step(name="agent.call_model", max_attempts=3, retry_on=(aiohttp.ClientError,))
async def call_model(messages: list[dict[str, Any]]) -> dict[str, Any]:
    """Ask the model for its next message (an HTTP request, journaled)."""
    payload = {"run_id": durable.run_id(), "messages": messages}
    async with aiohttp.ClientSession() as http, http.post(MODEL_URL[0], json=payload) as resp:
        resp.raise_for_status()
        reply: dict[str, Any] = await resp.json()
    executions["model"] += 1
    said = f"tool call {reply['tool']}({reply['args']})" if reply["type"] == "tool" else "final"
    print(f"  [{durable.run_id()}] model call -> {said}", flush=True)
    return reply


@step(name="agent.calculator")
async def calculator(expression: str) -> str:
    """A safe calculator tool: ``a <op> b`` on integers."""
    match = re.fullmatch(r"\s*(-?\d+)\s*([-+*])\s*(-?\d+)\s*", expression)
    if match is None:
        return f"error: cannot compute {expression!r}"
    a, op, b = int(match[1]), match[2], int(match[3])
    value = a + b if op == "+" else a - b if op == "-" else a * b
    executions["calculator"] += 1
    print(f"  [{durable.run_id()}] tool calculator({expression!r}) = {value}", flush=True)
    return str(value)


@step(name="agent.send_email", at_most_once=True)
async def send_email(to: str, body: str) -> str:
    """The dangerous tool: it "sends" an email (at most once, even after a crash)."""
    executions["send_email"] += 1
    print(f"  [{durable.run_id()}] tool send_email to {to}: {body!r}", flush=True)
    return f"sent to {to}"


@step(name="agent.request_approval")
async def request_approval(tool: str, args: dict[str, Any]) -> None:
    """Tell a human that a dangerous call waits for approval (runs once)."""
    key = f"approve:{durable.run_id()}"
    print(f"  [{durable.run_id()}] approval needed for {tool}({args}): signal {key!r}", flush=True)


#: The tools the model may call, by name.
TOOLS: dict[str, Callable[..., Awaitable[str]]] = {
    "calculator": calculator,
    "send_email": send_email,
}


# -------------------------------------------------------------- the workflow


@workflow(name="examples.agent")
async def agent(task: str) -> str:
    """Loop: model -> tool -> model ... until the model gives a final answer."""
    executions["workflow"] += 1  # how often the function ran (replays included)
    messages: list[dict[str, Any]] = [{"role": "user", "content": task}]
    for _ in range(MAX_TURNS):
        executions["asked"] += 1  # model calls awaited (replays included)
        reply = await call_model(messages)
        if reply["type"] == "final":
            answer: str = reply["content"]
            return answer
        tool, args = reply["tool"], reply["args"]
        approved = True
        if tool in DANGEROUS:
            await request_approval(tool, args)
            key = f"approve:{durable.run_id()}"
            # None when the timeout passes first; the run holds no worker meanwhile.
            approved = await durable.wait_for_signal(key, timeout=APPROVAL_TIMEOUT)
        result = await TOOLS[tool](**args) if approved else "not sent: no approval"
        messages += [{"role": "assistant", **reply}, {"role": "tool", "content": result}]
    raise RuntimeError(f"no final answer after {MAX_TURNS} model calls")


# --------------------------------------------------------------------- demo


async def waiting_for_approval(handle: WorkflowHandle[str]) -> durable.Waiting:
    """Return once the run waits durably for its approval (it holds no worker)."""
    waiting = await asyncio.wait_for(handle.waiting(), 30)  # a KV watch, no polling
    if waiting is None:
        raise SystemExit(f"run {handle.run_id!r} ended before it asked for approval")
    return waiting


async def run_agent(
    engine: Engine, clock: MockClock, requests: Counter[str], run_id: str, approve: bool
) -> None:
    """One run of the agent; approve its dangerous call, or let the wait time out."""
    before = executions.copy()
    print(f"run {run_id!r}: {TASK}")
    handle = await agent.options(run_id=run_id).start(TASK)
    waiting = await waiting_for_approval(handle)
    print(f"run {run_id!r} is waiting for approval (model requests so far: {requests[run_id]})")
    print(
        f"run {run_id!r} waits on signal {waiting.signal_key!r} for at most "
        f"{(waiting.until_ms - waiting.since_ms) / 1000:.0f} s"
    )
    status = await handle.status()
    assert status is not None
    print(
        f"run {run_id!r} status: {status.state}, {status.steps} journaled steps, "
        f"in {status.current_step}"
    )
    if approve:
        assert waiting.signal_key is not None
        outcome = await engine.signal(waiting.signal_key, True)
        print(f"approved: signal {outcome.name}")
    else:
        clock.advance(APPROVAL_TIMEOUT)
        print(f"nobody approved: moved the clock {APPROVAL_TIMEOUT:.0f} s past the timeout")
    answer = await handle.result()
    ran = executions - before
    print(f"run {run_id!r} answered: {answer!r}")
    print(
        f"run {run_id!r}: workflow function ran {ran['workflow']} times, awaited "
        f"{ran['asked']} model calls: {ran['asked'] - ran['model']} answered from the journal, "
        f"{ran['model']} made"
    )
    print(
        f"run {run_id!r}: model server requests {requests[run_id]}, "
        f"calculator ran {ran['calculator']}, send_email ran {ran['send_email']}"
    )


async def main(store: Path) -> None:
    """Start the fake model, open the engine on a mock clock, run both paths."""
    print(f"store: {store}")
    server, requests = await start_model_server()
    print(f"fake model listening on {MODEL_URL[0]}")
    clock = MockClock()
    try:
        async with Engine(store, clock=clock) as engine:
            await run_agent(engine, clock, requests, "agent-approved", approve=True)
            await run_agent(engine, clock, requests, "agent-timeout", approve=False)
        print(f"model server requests in total: {sum(requests.values())}")
    finally:
        await server.cleanup()


if __name__ == "__main__":
    run_with_store(main)
