"""Remote work that replies through the bucket, with no inbound endpoint.

    python -m examples.remote_reply [DIR]

A step hands work to another machine and waits for the answer as a
durable signal. The other machine needs no access to the queue and this
process opens no port: the remote worker only writes one object, at a
reply key the step chose, and a `ReplyWatcher` in this process turns the
object's arrival into the signal that resumes the run.

- Step 0 registers the reply it expects (`ReplyWatcher.expect`: a marker
  naming the reply key and the correlation key, durable before the request
  goes out), sends the request (here: starts the remote worker as a
  separate process, given only the store's path, the reply key and the
  text), and returns ``continue_on_signal``. The step settles; no lease is
  held while the remote works.
- The remote process translates (upper-cases) the text and writes the
  reply object with `durable.store.objects.open_object_store`.
- The watcher polls the markers, finds the reply, signals its correlation
  key with the reply's bytes, and removes the reply object and the marker.
- Step 1 reads the reply from ``Step.signal`` and the run succeeds.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

from durable.engine import RunSpec, RuntimeOptions, Step, StepOutcome, Succeed, WorkflowRuntime
from durable.engine.remote import ReplyWatcher
from durable.store.objects import open_object_store
from durable.store.queue import Queue

RUN_ID = "translate-invoice-118"
REPLY_TIMEOUT = 60.0


class Dispatcher:
    """Step 0 sends the request to the remote worker; step 1 collects the reply."""

    def __init__(self, store: Path) -> None:
        self.store = store
        self.watcher: ReplyWatcher
        self.remotes: list[asyncio.subprocess.Process] = []

    async def run_step(self, step: Step) -> StepOutcome:
        if step.step_number == 0:
            reply_key = self.watcher.reply_key(step.run_id, step.step_number)
            key = self.watcher.correlation_key(step.run_id, step.step_number)
            await self.watcher.expect(reply_key, key)  # durable before the request
            print(f"[step 0] sending {step.payload.decode()!r}; reply expected at {reply_key}")
            remote = await asyncio.create_subprocess_exec(
                sys.executable,
                "-m",
                "examples.remote_reply",
                "--remote",
                str(self.store),
                reply_key,
                step.payload.decode(),
            )
            self.remotes.append(remote)
            return StepOutcome.continue_on_signal(step.payload, key, REPLY_TIMEOUT)
        if step.signal is None:
            return Succeed(b"no reply in time")
        print(f"[step 1] reply received: {step.signal.decode()!r}")
        return Succeed(step.signal)


def remote_worker(store: str, reply_key: str, text: str) -> None:
    """The other machine: it only writes one object into the bucket."""

    async def reply() -> None:
        objects = await open_object_store(store)
        try:
            await objects.put(reply_key, text.upper().encode())
        finally:
            await objects.close()

    time.sleep(0.3)  # the "work"
    asyncio.run(reply())
    print(f"[remote pid {os.getpid()}] wrote the reply to {reply_key}", flush=True)


async def main(store: Path) -> None:
    dispatcher = Dispatcher(store)
    async with await Queue.open(store) as queue:
        runtime = WorkflowRuntime(queue, dispatcher, options=RuntimeOptions(poll_interval=0.05))
        dispatcher.watcher = ReplyWatcher(runtime, interval=0.1)
        watching = dispatcher.watcher.spawn()
        worker = runtime.spawn()
        try:
            await runtime.submit(RunSpec(b"invoice 118: three chairs, one table", run_id=RUN_ID))
            print(f"[pid {os.getpid()}] submitted run {RUN_ID!r}")
            end = await asyncio.wait_for(runtime.wait(RUN_ID), timeout=60)
        finally:
            await worker.shutdown()
            await watching.shutdown()
            for remote in dispatcher.remotes:
                await remote.wait()
        assert end is not None
        assert end.outcome is not None
        assert end.outcome.result is not None
        print(f"run {RUN_ID!r} {end.outcome.status.as_str()}: {end.outcome.result.decode()!r}")
        print(f"replies still pending: {len(await dispatcher.watcher.pending())}")


if __name__ == "__main__":
    if len(sys.argv) == 5 and sys.argv[1] == "--remote":
        remote_worker(*sys.argv[2:])
        sys.exit(0)
    base = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(tempfile.mkdtemp(prefix="durable-"))
    shutil.rmtree(base, ignore_errors=True)
    try:
        asyncio.run(main(base / "store"))
    finally:
        if len(sys.argv) == 1:
            shutil.rmtree(base, ignore_errors=True)
