"""The crash torture's worker process: runs the workload until it is killed
(or, at the finish, until every run and batch has ended).

    python torture_child.py STORE OPTIONS_JSON WORKDIR CYCLE KILLS MODE

MODE is ``work`` (run until killed) or ``finish`` (run until done). WORKDIR
holds the side channel (``side.jsonl``, see `torture_workload`) and the
signal requests the driver writes (``signals.jsonl``: one JSON line
``{"key": ..., "value": ...}`` each). The worker sends each request with
``engine.signal`` and notes ``sent`` once it is durable; a worker killed in
between sends it again (a duplicate goes to a key its run no longer waits
on, where it stays buffered). The driver cannot send signals itself: only
one process may own the store.

Every worker starts what the plan has started by its cycle (idempotently:
fixed run ids, one idempotency key per batch), then notes the result of
each run and batch as it ends; the finishing one also notes the last value
each mixed run published.
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any

import torture_workload as w

import durable


async def _pump_signals(engine: durable.Engine, requests: Path, sent: set[str]) -> None:
    """Send every signal request not yet sent; poll the file for new ones."""
    offset = 0
    while True:
        data = await asyncio.to_thread(_read, requests)
        end = data.rfind(b"\n") + 1
        for line in data[offset:end].splitlines():
            request = json.loads(line)
            if request["key"] not in sent:
                await engine.signal(request["key"], request["value"])
                w.note("sent", key=request["key"])
                sent.add(request["key"])
        offset = end
        await asyncio.sleep(0.02)


def _read(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        return b""


async def _report(name: str, wait: Any) -> None:
    try:
        value = await wait
    except Exception as e:  # the driver compares it with the expected result
        w.note("result", run=name, error=f"{type(e).__name__}: {e}")
    else:
        w.note("result", run=name, value=value)


async def main(store: str, options: str, workdir: str, cycle: str, kills: str, mode: str) -> None:
    finishing = mode == "finish"
    side = Path(workdir) / "side.jsonl"
    w.open_channel(str(side), int(cycle), finishing)
    sent = {e["key"] for e in w.read_events(side) if e["ev"] == "sent"}
    plan = w.Plan(int(kills))
    async with durable.Engine(store, storage_options=json.loads(options)) as engine:
        w.note("ready")
        waits: list[asyncio.Task[None]] = []
        handle = await w.marathon.options(run_id="marathon").start(plan.marathon_steps, w.PACE)
        waits.append(asyncio.create_task(_report("marathon", handle.result())))
        waves = range(plan.waves) if finishing else plan.waves_by(int(cycle))
        for run in plan.mixed_runs(waves):
            handle = await w.mixed.options(run_id=run).start(w.mixed_input(run))
            waits.append(asyncio.create_task(_report(run, handle.result())))
        for batch in waves:
            items = [(batch, i) for i in range(w.ITEMS)]
            mapped = w.square.options(idempotency_key=w.batch_name(batch)).map(items)
            waits.append(asyncio.create_task(_report(w.batch_name(batch), mapped)))
        w.note("started", waves=len(waves))
        pump = asyncio.create_task(_pump_signals(engine, Path(workdir) / "signals.jsonl", sent))
        if not finishing:
            await asyncio.Event().wait()  # until killed
        await asyncio.gather(*waits)
        pump.cancel()
        for run in plan.mixed_runs():
            w.note("published", run=run, value=await engine.handle(run).get("progress", timeout=60))
    w.note("finished")


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:]))
