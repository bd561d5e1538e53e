"""A durable chat agent: a Pydantic AI agent in a worker, a client that chats with it.

    python -m examples.agent_chat [DIR]

Runs offline in a few seconds (the "model" is Pydantic AI's ``FunctionModel``
with a script: deterministic, and it streams its answers piece by piece).

- **The worker** is a child process (``python -m examples.agent_chat
  --worker``) that owns a local directory store and serves it
  (``engine.serve()``). It runs ``chat_session``, a ``@workflow`` that takes
  one chat message at a time with ``durable.receive("chat")``, runs the agent
  on it (each model request and each tool call a journaled step, through
  ``durable.contrib.pydantic_ai.Durability``), replies with the answer, and
  then ``durable.continue_as_new(...)`` with the conversation so far: a
  session that never ends keeps a journal of one turn.
- **The client** is this process (``Engine(store, role="client")``, as a web
  app would be). It sends each message with ``handle.request("chat", text)``
  and prints the agent's text as the model generates it, read from the run's
  durable stream (``handle.read_stream("output")``), where
  ``Durability(stream="output")`` writes it from inside the model-request
  step.
- **An approval.** ``delete_logs`` is dangerous (``requires_approval=True``):
  Pydantic AI's ``RequestInput`` capability calls ``ask`` once (a step),
  which writes an approval request with its token to the stream; the run
  then waits durably, holding no worker, until the client approves with
  ``resolve_external_event(engine, token, ...)``.
- **A kill -9.** While the model streams its answer after the tool ran, the
  client kills the worker (SIGKILL) and starts a new one. The client's
  request still waits; the new worker replays the turn from its journal
  (the request it received, the first model call, the approval and the tool
  call are not made again), the stream tells the client that the partial
  answer was discarded (``durable.StreamDiscarded``), and the model call that
  was cut short runs again.

Every model call appends ``start N`` and ``done N`` to ``model-calls.log``
beside the store (N numbers a call by the conversation it was sent: the
same call gets the same number in any process), so the client can show
that no finished model call was paid twice.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path
from typing import IO, Any

from pydantic_ai import Agent
from pydantic_ai.capabilities import RequestInput
from pydantic_ai.messages import (
    ModelMessage,
    ModelMessagesTypeAdapter,
    ModelRequest,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models.function import AgentInfo, DeltaToolCall, DeltaToolCalls, FunctionModel
from pydantic_ai.tools import (
    DeferredToolRequests,
    DeferredToolResults,
    RunContext,
    ToolApproved,
    ToolDenied,
)

import durable
from durable import Engine, WorkflowHandle, workflow
from durable.contrib.pydantic_ai import Durability, resolve_external_event

STREAM = "output"  # the run's durable stream the model's text goes to
MESSAGES = ["Hi! What can you do?", "Please clean up the old log files.", "bye"]
KILL_AFTER = 4  # pieces of the answer after the tool call the client sees before the kill
LOG: list[Path] = []  # model-calls.log (the worker's side channel; outside the store)
STALL: list[bool] = []  # True in the first worker: its model stalls where the kill lands

# ------------------------------------------------------------------- the model


def call_number(messages: list[ModelMessage]) -> int:
    """Which model call of the conversation this is (the same in every process)."""
    return len(messages)


def record(line: str) -> None:
    """Append a line to the model-call log (one ``write``: atomic for appends)."""
    with LOG[0].open("a") as f:
        f.write(line + "\n")


async def scripted_model(
    messages: list[ModelMessage], info: AgentInfo
) -> AsyncIterator[str | DeltaToolCalls]:
    """The offline model: streams a scripted answer to the conversation so far."""
    n = call_number(messages)
    record(f"start {n}")
    last = messages[-1]
    assert isinstance(last, ModelRequest)
    returned = [p for p in last.parts if isinstance(p, ToolReturnPart)]
    prompt = " ".join(str(p.content) for p in last.parts if isinstance(p, UserPromptPart))
    if returned:
        text = f"Done: {returned[0].content}. Your disk has room again; anything else?"
    elif "log" in prompt:
        yield {0: DeltaToolCall("delete_logs", '{"older_than_days": 30}', tool_call_id="call-1")}
        text = ""
    else:
        text = "I can answer questions and clean up your log files (with your approval)."
    for i, word in enumerate(text.split(" ") if text else []):
        await asyncio.sleep(0.02)  # a model generates its tokens over time
        yield word if i == 0 else " " + word
        if returned and STALL and i + 1 == KILL_AFTER:
            await asyncio.Event().wait()  # the first worker is killed in here
    record(f"done {n}")


async def ask_for_approval(
    ctx: RunContext[Any], requests: DeferredToolRequests, token: str
) -> None:
    """``RequestInput``'s ``ask`` (run once, in a step): post the token to the chat."""
    calls = [
        {"id": c.tool_call_id, "tool": c.tool_name, "args": c.args} for c in requests.approvals
    ]
    await durable.write_stream(STREAM, {"approve": token, "calls": calls})


agent = Agent(
    FunctionModel(stream_function=scripted_model),
    name="chat",
    capabilities=[Durability(stream=STREAM), RequestInput(ask_for_approval)],
)


@agent.tool_plain(requires_approval=True)
async def delete_logs(older_than_days: int) -> str:
    """The dangerous tool: it runs only once a human approved the call."""
    record("tool delete_logs")
    return f"deleted 3 log files older than {older_than_days} days"


# ---------------------------------------------------------------- the session


@workflow(name="examples.agent_chat")
async def chat_session(user: str, history: list[Any] | None = None, turns: int = 0) -> int:
    """One turn per incarnation: receive a message, answer it, continue as new."""
    req = await durable.receive("chat", timeout=3600)
    if req is None or req.value == "bye":  # an hour of silence, or goodbye
        if req is not None:
            await req.reply(f"Bye, {user}!")
        return turns
    past = ModelMessagesTypeAdapter.validate_python(history) if history else None
    result = await agent.run(req.value, message_history=past)
    await durable.write_stream(STREAM, {"end_of_turn": turns + 1})  # from the body: exactly once
    await req.reply(result.output)
    messages = ModelMessagesTypeAdapter.dump_python(result.all_messages(), mode="json")
    durable.continue_as_new(user, messages, turns + 1)  # a fresh journal for the next turn
    raise AssertionError("unreachable")  # continue_as_new raises


# -------------------------------------------------------------------- workers


async def serve(store: Path) -> None:
    """A worker process: own the store and run its workflows until SIGTERM."""
    async with Engine(store, ttl=4.0, heartbeat=0.5) as engine:
        print("ready" if engine.owner else "standby", flush=True)
        await engine.serve()


class Worker:
    """A worker child process."""

    def __init__(self, store: Path, stall: bool) -> None:
        cmd = [sys.executable, "-m", "examples.agent_chat", "--worker", str(store)]
        self.proc = subprocess.Popen(
            cmd + (["--stall"] if stall else []), stdout=subprocess.PIPE, text=True
        )
        out: IO[str] | None = self.proc.stdout
        assert out is not None
        if out.readline().strip() != "ready":
            raise SystemExit(f"worker {self.proc.pid} did not take the store")


# --------------------------------------------------------------------- client


class Chat:
    """The client's side of the chat: it shows the run's stream as it comes."""

    def __init__(self, engine: Engine, handle: WorkflowHandle[int]) -> None:
        self.engine = engine
        self.handle = handle
        self.turn_shown = asyncio.Event()  # the stream reached the end of a turn
        self.pieces_after_approval = 0
        self.cut_short = asyncio.Event()  # KILL_AFTER pieces of the answer after the tool
        self.approved = False
        self.discarded: list[durable.StreamDiscarded] = []
        self.shown: list[str] = []  # the text of the current turn, as a UI keeps it
        self.line_open = False  # an "agent> " line is being printed

    def end_line(self) -> None:
        """End the agent's line if one is open."""
        if self.line_open:
            print(flush=True)
            self.line_open = False

    async def show_stream(self) -> None:
        """Print the run's stream as it arrives (ends when the session ends)."""
        async for item in self.handle.read_stream(STREAM):
            if isinstance(item, str):
                self.shown.append(item)
                print(item if self.line_open else f"agent> {item}", end="", flush=True)
                self.line_open = True
                if self.approved:
                    self.pieces_after_approval += 1
                    if self.pieces_after_approval == KILL_AFTER:
                        self.cut_short.set()
            elif isinstance(item, durable.StreamDiscarded):
                self.discarded.append(item)
                del self.shown[len(self.shown) - item.count :]  # a UI erases the partial text
                self.end_line()
                print(
                    f"  [stream: attempt {item.attempt} of step {item.step!r} was discarded "
                    f"after {item.count} pieces: dropped them]",
                    flush=True,
                )
            elif "approve" in item:
                await self.approve(item)
            else:
                self.end_line()
                self.turn_shown.set()

    async def approve(self, item: dict[str, Any]) -> None:
        """Approve the dangerous calls the agent waits on (a human would click)."""
        self.end_line()
        for call in item["calls"]:
            print(f"[approval needed: {call['tool']}({call['args']})] approving", flush=True)
        approvals: dict[str, bool | ToolApproved | ToolDenied] = {
            c["id"]: True for c in item["calls"]
        }
        await resolve_external_event(
            self.engine, item["approve"], DeferredToolResults(approvals=approvals)
        )
        self.approved = True

    async def say(self, text: str) -> str:
        """Send one message as a request; print the streamed answer; the reply."""
        self.turn_shown.clear()
        self.shown = []
        print(f"you> {text}", flush=True)
        answer: str = await self.handle.request("chat", text, timeout=60)
        if text != "bye":
            await self.turn_shown.wait()
            same = "".join(self.shown) == answer
            verdict = "matches" if same else "differs from"
            print(f"  (the reply to the request {verdict} the streamed text)")
        else:
            print(f"agent> {answer}")
        return answer


def model_calls(log: Path) -> Counter[str]:
    """The model-call log's lines, counted."""
    return Counter(log.read_text().splitlines())


async def client(store: Path, log: Path, first: Worker) -> Worker:
    """Chat with the agent; kill the worker mid-answer; the chat goes on. The live worker."""
    async with Engine(store, role="client") as engine:
        handle = await chat_session.options(run_id="chat-ada").start("ada")
        chat = Chat(engine, handle)
        reader = asyncio.create_task(chat.show_stream())
        worker, before = first, Counter[str]()
        for text in MESSAGES:
            said = asyncio.create_task(chat.say(text))
            if text == MESSAGES[1]:  # the kill lands in the answer after the approved tool
                cut = asyncio.create_task(chat.cut_short.wait())
                await asyncio.wait([said, cut], return_when=asyncio.FIRST_COMPLETED)
                if said.done():  # the request failed (or the model never got there)
                    cut.cancel()
                    await said
                    raise SystemExit("the answer ended before the kill")
                os.kill(first.proc.pid, signal.SIGKILL)
                first.proc.wait()
                before = model_calls(log)
                chat.end_line()
                call = max_call(before)
                print(f"  [killed the worker (kill -9) in the middle of model call {call}]")
                worker = await asyncio.to_thread(Worker, store, False)
                print(f"  [started a new worker, pid {worker.proc.pid}]", flush=True)
            await said
        turns = await handle.result(timeout=60)
        await reader
        status = await handle.status()
        assert status is not None
        print(
            f"session ended after {turns} turns; it continued as new {status.incarnation} times "
            f"(each turn began with an empty journal)"
        )
    report(before, model_calls(log))
    return worker


def max_call(calls: Counter[str]) -> int:
    """The number of the last model call started."""
    return max(int(line.split()[1]) for line in calls if line.startswith("start"))


def report(before: Counter[str], after: Counter[str]) -> None:
    """Show that no model call finished before the kill was made again."""
    started = sorted({int(line.split()[1]) for line in after if line.startswith("start")})
    finished_before = sorted(int(line.split()[1]) for line in before if line.startswith("done"))
    again = [n for n in started if after[f"start {n}"] > 1]
    paid_twice = [n for n in finished_before if after[f"start {n}"] > 1]
    print(f"model calls: {len(started)} ({', '.join(map(str, started))})")
    print(f"finished before the kill: {', '.join(map(str, finished_before))}")
    print(
        f"made again after the kill: {', '.join(map(str, again)) or 'none'} (in flight at the kill)"
    )
    print(f"finished model calls paid twice: {', '.join(map(str, paid_twice)) or 'none'}")
    print(f"delete_logs ran {after['tool delete_logs']} time(s)")


def main() -> None:
    """Run the demo (or, with ``--worker STORE``, be a worker)."""
    if len(sys.argv) > 2 and sys.argv[1] == "--worker":
        store = Path(sys.argv[2])
        LOG.append(store.parent / "model-calls.log")
        STALL.extend([True] if "--stall" in sys.argv else [])
        asyncio.run(serve(store))
        return
    given = len(sys.argv) > 1
    base = Path(sys.argv[1]) if given else Path(tempfile.mkdtemp(prefix="durable-"))
    shutil.rmtree(base, ignore_errors=True)
    store, log = base / "store", base / "model-calls.log"
    store.mkdir(parents=True)
    log.touch()
    print(f"store: {store}")
    workers = [Worker(store, stall=True)]
    print(f"worker {workers[0].proc.pid} serves the store")
    try:
        workers.append(asyncio.run(client(store, log, workers[0])))
        workers[-1].proc.send_signal(signal.SIGTERM)
        print(f"worker stopped (SIGTERM): exit code {workers[-1].proc.wait(60)}")
    finally:
        for w in workers:
            if w.proc.poll() is None:
                w.proc.kill()
                w.proc.wait()
        if not given:
            shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
