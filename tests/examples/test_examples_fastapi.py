"""examples/fastapi_app.py: a web app (a client of the store) and a worker process."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
from example_helpers import run_example

from durable import Engine
from examples.fastapi_app import create_app, start_worker, stop_worker

pytestmark = pytest.mark.slow


def test_fastapi_app_runs_as_a_user_would() -> None:
    """``python -m examples.fastapi_app``: both orders end charged, the large one
    after its approval signal; the server and the worker stop cleanly."""
    out = run_example("fastapi_app").splitlines()
    assert out[0].startswith("app: serving on http://127.0.0.1:")
    assert out[1:] == [
        "POST /orders order-1 (30) -> run order-1",
        "POST /orders order-2 (500) -> run order-2",
        "GET /orders/order-1/result -> order-1: charged 30",
        "GET /orders/order-2/waiting -> approve:order-2",
        "GET /orders/order-2 -> waiting",
        "POST /orders/order-2/approve -> SENT",
        "GET /orders/order-2/result -> order-2: charged 500",
        "GET /orders/order-2 -> succeeded",
        "GET /orders/order-9 -> 404",
        "app: stopped",
        "worker: stopped",
    ]


async def test_endpoints_against_a_live_worker(tmp_path: Path) -> None:
    """The app's endpoints, over httpx, with the runs executed by a worker
    process: a rejected order, a repeated POST (one run), an unknown id."""
    store = tmp_path / "store"
    worker = start_worker(store)
    try:
        async with Engine(store, role="client") as engine:
            assert not engine.owner  # the worker runs the workflows, not this process
            transport = httpx.ASGITransport(app=create_app(engine))
            async with httpx.AsyncClient(transport=transport, base_url="http://app") as http:
                body = {"order_id": "big", "amount": 1000}
                first = await http.post("/orders", json=body)
                again = await http.post("/orders", json=body)
                assert first.json() == again.json() == {"run_id": "big"}

                waiting = await http.get("/orders/big/waiting", params={"wait": 30})
                assert waiting.json()["signal_key"] == "approve:big"
                status = await http.get("/orders/big")
                assert status.json()["state"] == "waiting"
                assert status.json()["steps"] == 2  # reserve, the wait

                r = await http.post("/orders/big/approve", json={"approved": False})
                assert r.json() == {"run_id": "big", "signal": "SENT"}
                result = await http.get("/orders/big/result")
                assert result.json() == {"run_id": "big", "result": "big: rejected"}

                assert (await http.get("/orders/nope")).status_code == 404
                assert (await http.get("/orders/nope/result")).status_code == 404
    finally:
        assert stop_worker(worker) == "worker: stopped"
