"""A client process of the scale-out tests (run as a script).

    python scaleout_client.py URL OPTIONS SIDE SCENARIO ARGS...

Opens ``Engine(URL, role="client")`` and plays SCENARIO, noting in the
side channel SIDE (see `scaleout_app`) each call that returned:
``started`` (run), ``signalled`` (run, value), ``cancelled`` (run, and what
``cancel()`` answered) and ``result`` (run, and ``value`` or ``error``,
the exception's type name). It prints ``ready`` once the engine is open and
waits for a line on stdin before it starts (so that several clients start
together).

Scenarios:

- ``mix NAME N PAUSE``: N runs of each kind, interleaved: `plain` runs,
  `signalled` runs it signals (value ``v-<run id>``), `signalled` runs it
  cancels; then the result of each through ``handle.result()``.
- ``stream NAME PAUSE EVERY``: until stdin says ``stop``, start a `plain`
  run and a `signalled` run and signal the latter, every EVERY seconds;
  then the result of each.
- ``plain NAME N STEPS PAUSE EVERY``: N `plain` runs of STEPS steps (run
  ids ``NAME-p<k>``, input k), one every EVERY seconds; then the result of
  each.
- ``adopt``: the result of every run the side channel says was started
  but whose result nobody noted yet (its starter died).
- ``same PREFIX N INPUT``: start `plain` (one step) with INPUT under run ids
  PREFIX0 .. PREFIX<N-1>, all at once, then wait for the result of each
  that started; ``start`` notes ``ok`` or the error's type name.
- ``stale RUN_ID INPUT``: as ``same`` for one run id, but the engine's
  view of the store freezes on ``go`` (its log is not read; noted
  ``frozen``), the start waits for the line ``start`` and the view thaws on
  the line ``thaw``, which comes after the start returned: a client that
  cannot see the run another process started under RUN_ID.
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))  # as a script: the workload beside it

import scaleout_app as app

from durable import Engine, WorkflowHandle
from durable.errors import DurableError
from durable.store.log.format import LOG_PREFIX
from durable.store.objects import open_object_store
from durable.store.objects.base import ObjectLock, ObjectStore


async def line() -> str:
    """The next line of stdin."""
    return (await asyncio.to_thread(sys.stdin.readline)).strip()


async def mix(engine: Engine, name: str, n: str, pause: str) -> None:
    handles = []
    for k in range(int(n)):
        p = await app.plain.options(run_id=f"{name}-p{k}").start(k, app.PLAIN_STEPS, float(pause))
        app.note("started", run=p.run_id)
        s = await app.signalled.options(run_id=f"{name}-s{k}").start(k, float(pause))
        app.note("started", run=s.run_id)
        x = await app.signalled.options(run_id=f"{name}-x{k}").start(k, float(pause))
        app.note("started", run=x.run_id)
        value = f"v-{s.run_id}"
        await engine.signal(app.signal_key(s.run_id), value)
        app.note("signalled", run=s.run_id, value=value)
        app.note("cancelled", run=x.run_id, answer=await x.cancel())
        handles += [p, s, x]
    await app.note_results(handles)


async def stream(engine: Engine, name: str, pause: str, every: str) -> None:
    stop = asyncio.create_task(line())
    handles: list[WorkflowHandle[Any]] = []
    k = 0
    while not stop.done():
        p = await app.plain.options(run_id=f"{name}-p{k}").start(k, app.PLAIN_STEPS, float(pause))
        app.note("started", run=p.run_id)
        s = await app.signalled.options(run_id=f"{name}-s{k}").start(k, float(pause))
        app.note("started", run=s.run_id)
        value = f"v-{s.run_id}"
        await engine.signal(app.signal_key(s.run_id), value)
        app.note("signalled", run=s.run_id, value=value)
        handles += [p, s]
        k += 1
        await asyncio.sleep(float(every))
    await app.note_results(handles)


async def plain(engine: Engine, name: str, n: str, steps: str, pause: str, every: str) -> None:
    handles = []
    for k in range(int(n)):
        if k:
            await asyncio.sleep(float(every))
        handle = await app.plain.options(run_id=f"{name}-p{k}").start(k, int(steps), float(pause))
        app.note("started", run=handle.run_id)
        handles.append(handle)
    await app.note_results(handles)


async def adopt(engine: Engine, side: str) -> None:
    events = app.read_events(side)
    ended = {e["run"] for e in events if e["ev"] == "result"}
    orphans = [e["run"] for e in events if e["ev"] == "started" and e["run"] not in ended]
    app.note("adopting", runs=orphans)
    await app.note_results(engine.handle(run) for run in orphans)


async def same(engine: Engine, prefix: str, n: str, input: str) -> None:
    async def one(run_id: str) -> WorkflowHandle[Any] | None:
        try:
            handle = await app.plain.options(run_id=run_id).start(int(input), 1)
        except DurableError as e:
            app.note("start", run=run_id, input=int(input), error=type(e).__name__)
            return None
        app.note("start", run=run_id, input=int(input), ok=True)
        return handle

    handles = await asyncio.gather(*(one(f"{prefix}{i}") for i in range(int(n))))
    await app.note_results(h for h in handles if h is not None)


class FrozenLog(ObjectStore):
    """A store whose log and checkpoints read as they were while frozen
    (their reads wait), everything else as it is."""

    def __init__(self, inner: ObjectStore) -> None:
        self.inner = inner
        self.guarantees = inner.guarantees
        self.thawed = asyncio.Event()
        self.thawed.set()

    @property
    def url(self) -> str:
        return self.inner.url

    @property
    def is_local(self) -> bool:
        return self.inner.is_local

    async def _gate(self, name: str) -> None:
        if name.startswith((LOG_PREFIX, "ckpt/")):
            await self.thawed.wait()

    async def get(self, name: str) -> bytes:
        await self._gate(name)
        return await self.inner.get(name)

    async def list(self, prefix: str) -> list[str]:
        await self._gate(prefix)
        return await self.inner.list(prefix)

    async def put(self, name: str, data: bytes) -> None:
        await self.inner.put(name, data)

    async def create(self, name: str, data: bytes) -> None:
        await self.inner.create(name, data)

    async def delete(self, names: Iterable[str]) -> None:
        await self.inner.delete(names)

    async def try_lock(self, name: str) -> ObjectLock | None:
        return await self.inner.try_lock(name)

    async def close(self) -> None:
        await self.inner.close()


async def stale(engine: Engine, store: FrozenLog, run_id: str, input: str) -> None:
    store.thawed.clear()
    app.note("frozen")
    assert await line() == "start"
    handle: WorkflowHandle[Any] | None = None
    try:
        handle = await app.plain.options(run_id=run_id).start(int(input), 1)
    except DurableError as e:
        app.note("start", run=run_id, input=int(input), error=type(e).__name__)
    else:
        app.note("start", run=run_id, input=int(input), ok=True)
    assert await line() == "thaw"
    store.thawed.set()
    if handle is not None:
        await app.note_results([handle])


async def main(url: str, options: str, side: str, scenario: str, *args: str) -> None:
    app.open_channel(side)
    target: str | ObjectStore = url
    frozen: FrozenLog | None = None
    if scenario == "stale":
        frozen = FrozenLog(await open_object_store(url, json.loads(options)))
        target = frozen
    store_options = None if frozen is not None else json.loads(options)
    async with Engine(target, storage_options=store_options, role="client") as engine:
        print("ready", flush=True)
        assert await line() == "go"
        if scenario == "mix":
            await mix(engine, *args)
        elif scenario == "stream":
            await stream(engine, *args)
        elif scenario == "plain":
            await plain(engine, *args)
        elif scenario == "adopt":
            await adopt(engine, side)
        elif scenario == "same":
            await same(engine, *args)
        elif scenario == "stale":
            assert frozen is not None
            await stale(engine, frozen, *args)
        else:
            raise SystemExit(f"unknown scenario {scenario!r}")
    if frozen is not None:
        await frozen.close()
    app.note("client-done", scenario=scenario)


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:]))
