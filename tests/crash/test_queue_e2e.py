"""A queue end to end on every backend, reopened in a new process."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from durable.store.queue import EnqueueOptions, Queue, SettlementEffects
from durable.testing.cloud import StoreLocation

INSPECT = str(Path(__file__).with_name("queue_inspect.py"))


async def test_enqueue_claim_ack_with_effects_then_reopen_elsewhere(
    shared_location: StoreLocation,
) -> None:
    where = shared_location
    q = await Queue.open(where.url, storage_options=where.options)
    await q.enqueue_with("work", b"small", EnqueueOptions(id_override="a-small"))
    await q.enqueue_with("work", b"B" * 300_000, EnqueueOptions(id_override="b-big"))  # a blob
    claim = await q.claim("work")
    assert claim is not None
    assert claim.id == "a-small"  # ids order the claims
    effects = SettlementEffects().kv_put(b"result/small", b"ok").enqueue("next", b"step 2")
    await q.ack_with(claim, effects)
    await q.close()

    done = subprocess.run(  # noqa: ASYNC221 (this loop has nothing else to run)
        [sys.executable, INSPECT, *where.argv()], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["pending"] == 1  # "big"
    assert report["done"] == 1
    assert report["kv"] == "ok"
    assert report["big_payload_ok"] is True
    assert report["follow_up"] == "step 2"

    q = await Queue.open(where.url, storage_options=where.options)  # the child's ack landed
    assert q.stats("next").done == 1
    assert q.stats("next").pending == 0
    await q.close()
