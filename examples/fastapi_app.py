"""A web app that starts workflows, and a worker process that runs them.

    python -m examples.fastapi_app [DIR]

The web app (FastAPI, served by uvicorn) opens the store as a client,
``Engine(store, role="client")``: its endpoints start runs, read their
status and results, and send signals, and it never runs a workflow or
fences the worker. A worker process (``python -m examples.fastapi_app
worker DIR``) owns the store and runs the workflows, with
``engine.serve()``.

This script starts both: the worker as a subprocess, uvicorn on 127.0.0.1
on a free port, in this process. Then it drives a few requests itself, as a
browser or another service would: it places a small order (approved at
once) and a large one (which waits for a manager), reads the status of the
large one, approves it with a signal, reads both results, and stops the
server and the worker (SIGTERM: it drains and exits 0).

The endpoints:

- ``POST /orders`` ``{"order_id": ..., "amount": ...}``: start a run (its id
  is the order id: posting the order again returns the same run);
- ``GET /orders/{id}``: the run's status;
- ``GET /orders/{id}/waiting``: once the run waits on a signal, its key;
- ``POST /orders/{id}/approve`` ``{"approved": true}``: the manager's signal;
- ``GET /orders/{id}/result``: the result (waits up to ``wait`` seconds).

The app calls ``place_order.start`` and the handles of the `Engine` that is
open where uvicorn serves it: start uvicorn (``uvicorn.Server(...).serve()``)
inside ``async with Engine(...)``, as `serve_app` does.
"""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
import tempfile
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import httpx
import uvicorn
from fastapi import FastAPI, HTTPException
from pydantic import BaseModel

import durable
from durable import Engine, step, workflow

#: Orders above this amount wait for a manager's approval.
APPROVAL_LIMIT = 100


@step
async def reserve(order_id: str, amount: int) -> str:
    """Reserve the stock of an order (a side effect: a step runs once)."""
    return f"{order_id}: reserved {amount}"


@step
async def charge(order_id: str, amount: int) -> str:
    """Charge the customer."""
    return f"{order_id}: charged {amount}"


@workflow(name="fastapi_app.place_order")
async def place_order(order_id: str, amount: int) -> str:
    """Reserve, wait for a manager above `APPROVAL_LIMIT`, charge."""
    await reserve(order_id, amount)
    if amount > APPROVAL_LIMIT:
        approved = await durable.wait_for_signal(f"approve:{order_id}", timeout=7 * 86400)
        if not approved:
            return f"{order_id}: rejected"
    return await charge(order_id, amount)


# ------------------------------------------------------------------ the app


class Order(BaseModel):
    """The body of ``POST /orders``."""

    order_id: str
    amount: int


class Decision(BaseModel):
    """The body of ``POST /orders/{id}/approve``."""

    approved: bool


def create_app(engine: Engine) -> FastAPI:
    """The web app: its endpoints use ``engine`` (open it as a client)."""
    app = FastAPI(title="orders")

    @app.post("/orders")
    async def start_order(order: Order) -> dict[str, str]:
        handle = await place_order.options(run_id=order.order_id).start(
            order.order_id, order.amount
        )
        return {"run_id": handle.run_id}

    @app.get("/orders/{run_id}")
    async def order_status(run_id: str) -> dict[str, object]:
        status = await engine.handle(run_id).status()
        if status is None:
            raise HTTPException(404, f"no order {run_id!r}")
        return {"run_id": run_id, "state": status.state.value, "steps": status.steps}

    @app.get("/orders/{run_id}/waiting")
    async def order_waiting(run_id: str, wait: float = 30.0) -> dict[str, object]:
        waiting = await engine.handle(run_id).waiting(timeout=wait)
        return {"run_id": run_id, "signal_key": waiting.signal_key if waiting else None}

    @app.post("/orders/{run_id}/approve")
    async def approve(run_id: str, decision: Decision) -> dict[str, str]:
        outcome = await engine.signal(f"approve:{run_id}", decision.approved)
        return {"run_id": run_id, "signal": outcome.name}

    @app.get("/orders/{run_id}/result")
    async def order_result(run_id: str, wait: float = 30.0) -> dict[str, object]:
        try:
            result = await engine.handle(run_id).result(timeout=wait)
        except durable.RunNotFound:
            raise HTTPException(404, f"no order {run_id!r}") from None
        return {"run_id": run_id, "result": result}

    return app


@asynccontextmanager
async def serve_app(store: Path | str) -> AsyncIterator[str]:
    """Open ``store`` as a client and serve the app on 127.0.0.1 (a free port).

    Yields the app's base URL; on exit stops uvicorn, then closes the engine.
    """
    async with Engine(store, role="client") as engine:
        config = uvicorn.Config(create_app(engine), host="127.0.0.1", port=0, log_level="warning")
        server = uvicorn.Server(config)
        serving = asyncio.create_task(server.serve())
        while not server.started:  # uvicorn offers no event; serve() ends on failure
            if serving.done():
                await serving
                raise RuntimeError("uvicorn stopped before it started")
            await asyncio.sleep(0.01)
        port = server.servers[0].sockets[0].getsockname()[1]
        try:
            yield f"http://127.0.0.1:{port}"
        finally:
            server.should_exit = True
            await serving


# ------------------------------------------------------------------ the worker


async def work(store: Path) -> None:
    """The worker process: own the store and run its workflows until SIGTERM."""
    async with Engine(store) as engine:
        await engine.wait_owner()
        print("worker: owns the store", flush=True)
        await engine.serve()  # until SIGTERM or SIGINT; then drain and hand over
    print("worker: stopped", flush=True)


def start_worker(store: Path) -> subprocess.Popen[str]:
    """Start ``python -m examples.fastapi_app worker STORE``; return once it owns the store."""
    worker = subprocess.Popen(
        [sys.executable, "-m", "examples.fastapi_app", "worker", str(store)],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert worker.stdout is not None
    line = worker.stdout.readline()  # blocks until the worker says it owns the store
    if line.strip() != "worker: owns the store":
        worker.kill()
        raise RuntimeError(f"the worker did not start: {line!r}")
    return worker


def stop_worker(worker: subprocess.Popen[str]) -> str:
    """SIGTERM the worker and wait for it; its last output line."""
    worker.send_signal(signal.SIGTERM)
    out, _ = worker.communicate(timeout=60)
    if worker.returncode != 0:
        raise RuntimeError(f"the worker exited with {worker.returncode}")
    return out.strip()


# ------------------------------------------------------------------ the demo


async def drive(base_url: str) -> None:
    """Act as the app's users: two orders, a status, an approval, the results."""
    async with httpx.AsyncClient(base_url=base_url, timeout=60) as http:
        for order_id, amount in [("order-1", 30), ("order-2", 500)]:
            r = await http.post("/orders", json={"order_id": order_id, "amount": amount})
            r.raise_for_status()
            print(f"POST /orders {order_id} ({amount}) -> run {r.json()['run_id']}")

        r = await http.get("/orders/order-1/result")
        print(f"GET /orders/order-1/result -> {r.json()['result']}")

        r = await http.get("/orders/order-2/waiting")
        print(f"GET /orders/order-2/waiting -> {r.json()['signal_key']}")
        r = await http.get("/orders/order-2")
        print(f"GET /orders/order-2 -> {r.json()['state']}")
        r = await http.post("/orders/order-2/approve", json={"approved": True})
        print(f"POST /orders/order-2/approve -> {r.json()['signal']}")
        r = await http.get("/orders/order-2/result")
        print(f"GET /orders/order-2/result -> {r.json()['result']}")
        r = await http.get("/orders/order-2")
        print(f"GET /orders/order-2 -> {r.json()['state']}")
        r = await http.get("/orders/order-9")
        print(f"GET /orders/order-9 -> {r.status_code}")


async def demo(store: Path) -> None:
    """Start the worker and the app, drive them, stop both."""
    worker = start_worker(store)
    try:
        async with serve_app(store) as base_url:
            print(f"app: serving on {base_url}")
            await drive(base_url)
        print("app: stopped")
    finally:
        print(stop_worker(worker))


def main() -> None:
    """``worker DIR``: the worker process; ``[DIR]``: the demo (a temporary store by default)."""
    if sys.argv[1:2] == ["worker"]:
        asyncio.run(work(Path(sys.argv[2])))
        return
    if len(sys.argv) > 1:
        asyncio.run(demo(Path(sys.argv[1])))
        return
    with tempfile.TemporaryDirectory() as tmp:
        asyncio.run(demo(Path(tmp) / "store"))


if __name__ == "__main__":
    main()
