"""Webhook delivery against a real HTTP server on 127.0.0.1, and run callbacks.

The receiver is an aiohttp server in the test's event loop that answers each
request with the next scripted reply. The queue runs on a `MockClock`: a
nacked delivery is Scheduled one backoff out, and the test moves the clock
and promotes it by hand. The webhook worker handles one job at a time, so
"it and the queue's two background loops sleep on the clock" means it has
settled what it was doing. Only request timeouts use real time (0.2 s).
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import json
import socket
from collections import deque
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

import pytest
from aiohttp import web
from engine_helpers import BG, HOUR, QUEUE, Factory, Opener, Runner
from multidict import CIMultiDict

from durable.engine import (
    Cancel,
    Fail,
    RunOptions,
    RunOutcome,
    RunSpec,
    Step,
    StepOutcome,
    Succeed,
    TerminalEffects,
    TerminalStatus,
    WorkflowRuntime,
)
from durable.engine.webhooks import (
    DEFAULT_USER_AGENT,
    HEADER_METHOD,
    HEADER_TIMEOUT_MS,
    HEADER_URL,
    Verdict,
    WebhookOptions,
    WebhookRequest,
    WebhookTerminalHook,
    WebhookWorker,
    WebhookWorkerHandle,
    classify,
    enqueue_webhook,
    parse_delivery,
    verify_signature,
    webhook_request,
)
from durable.engine.webhooks.worker import DeliveryFailed
from durable.errors import InvalidArgument
from durable.store.clock import MockClock
from durable.store.queue import (
    Dead,
    Done,
    EnqueueOptions,
    JobRecord,
    JobStatus,
    NotFound,
    OpenOptions,
    Queue,
    QueueConfig,
    SettlementEffects,
)

WEBHOOKS = "webhooks"
#: The webhook queue's first retry delay (then 20 s, 40 s, ...).
BACKOFF = 10.0
SECRET = "whsec_" + base64.b64encode(b"a test signing key of 32 bytes!!").decode()

# ------------------------------------------------------------------ receiver


@dataclass(frozen=True)
class Reply:
    """What the receiver answers one request with; ``hang`` waits for the release first."""

    status: int = 200
    body: str = ""
    headers: dict[str, str] = field(default_factory=dict)
    hang: bool = False


#: A reply that never comes (until teardown, or `Receiver.release`).
HANG = Reply(hang=True)


@dataclass(frozen=True)
class Received:
    """One request the receiver got."""

    method: str
    path: str
    headers: CIMultiDict[str]
    body: bytes


class Receiver:
    """An HTTP server on 127.0.0.1 answering with scripted replies (200 when none left)."""

    def __init__(self) -> None:
        self.replies: deque[Reply] = deque()
        self.received: list[Received] = []
        self.arrivals: asyncio.Queue[Received] = asyncio.Queue()
        self.release = asyncio.Event()
        self.port = 0
        self._runner: web.AppRunner | None = None

    def script(self, *replies: Reply) -> None:
        self.replies.extend(replies)

    def url(self, path: str = "/hook") -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        got = Received(
            request.method, request.path_qs, CIMultiDict(request.headers), await request.read()
        )
        self.received.append(got)
        self.arrivals.put_nowait(got)
        reply = self.replies.popleft() if self.replies else Reply()
        if reply.hang:
            await self.release.wait()
        return web.Response(status=reply.status, text=reply.body, headers=reply.headers)

    async def next(self) -> Received:
        """The next request (a test that waits 10 s for one has failed)."""
        return await asyncio.wait_for(self.arrivals.get(), timeout=10)

    async def start(self, port: int = 0) -> None:
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self._handle)
        self._runner = web.AppRunner(
            app, handle_signals=False, access_log=None, shutdown_timeout=1.0
        )
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", port).start()
        self.port = self._runner.addresses[0][1]

    async def stop(self) -> None:
        self.release.set()
        if self._runner is not None:
            await self._runner.cleanup()


@pytest.fixture
async def receiver() -> AsyncIterator[Receiver]:
    r = Receiver()
    await r.start()
    yield r
    await r.stop()


def free_port() -> int:
    """A port nobody listens on (bound, then closed)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


# --------------------------------------------------------------- the queue


@pytest.fixture
async def open_store(make_objects: Factory, clock: MockClock) -> AsyncIterator[Opener]:
    """Open the test's store: the webhook queue retries with `BACKOFF`, up to 5 attempts."""
    opened: list[Queue] = []

    async def _open(**webhook_config: Any) -> Queue:
        webhook_config = {"retry_backoff_base": BACKOFF, "max_attempts": 5, **webhook_config}
        q = await Queue.open(
            make_objects(),
            OpenOptions(
                clock=clock,
                reaper_interval=HOUR,
                scheduler_interval=HOUR,
                queue_configs={
                    WEBHOOKS: QueueConfig(**webhook_config),
                    QUEUE: QueueConfig(retry_backoff_base=0.0),
                },
            ),
        )
        opened.append(q)
        return q

    yield _open
    for q in reversed(opened):
        await q.close()


@pytest.fixture
async def workers() -> AsyncIterator[Callable[..., WebhookWorkerHandle]]:
    """Spawn webhook workers (one job at a time unless told); stopped at teardown."""
    handles: list[WebhookWorkerHandle] = []

    def spawn(q: Queue, **options: Any) -> WebhookWorkerHandle:
        options.setdefault("max_concurrent", 1)
        handle = WebhookWorker(q, WebhookOptions(**options)).spawn()
        handles.append(handle)
        return handle

    yield spawn
    for handle in handles:  # abort: a failed test may leave a request hanging
        await handle.abort()


async def settled(clock: MockClock) -> None:
    """Wait until the (busy) worker has settled its job and sleeps on the clock again."""
    await asyncio.wait_for(clock.wait_for_sleepers(BG + 1), timeout=10)


async def retried(q: Queue, clock: MockClock, job_id: str, delay: float) -> JobRecord:
    """Check the job waits ``delay`` seconds for its retry, then make it due."""
    rec = q.job_record(job_id)
    assert rec is not None
    assert rec.status is JobStatus.SCHEDULED
    assert rec.run_at == clock.now_ms() + round(delay * 1000)
    assert q.promote_scheduled_now() == 0  # not before the backoff
    clock.advance(delay)
    assert q.promote_scheduled_now() == 1
    return rec


async def enqueue(q: Queue, request: WebhookRequest, body: bytes = b"{}") -> str:
    return (await enqueue_webhook(q, WEBHOOKS, request, body)).id


# ------------------------------------------------------------ the encoding


def test_a_request_is_encoded_in_job_headers_and_read_back() -> None:
    request = WebhookRequest(
        "https://example.com/hook",
        method="patch",
        timeout=1.5,
        headers={"Content-Type": "application/json", "X-Tenant": "t1"},
    )
    job = webhook_request(WEBHOOKS, request, b"body", dedup_key="k", priority=3, max_attempts=9)
    assert (job.queue, job.payload) == (WEBHOOKS, b"body")
    assert job.options.headers == {
        HEADER_URL: "https://example.com/hook",
        HEADER_METHOD: "PATCH",
        HEADER_TIMEOUT_MS: "1500",
        "http.Content-Type": "application/json",
        "http.X-Tenant": "t1",
    }
    assert (job.options.dedup_key, job.options.priority, job.options.max_attempts) == ("k", 3, 9)
    delivery = parse_delivery(job.options.headers)
    assert (delivery.url, delivery.method, delivery.timeout) == (
        "https://example.com/hook",
        "PATCH",
        1.5,
    )
    assert delivery.headers == {"Content-Type": "application/json", "X-Tenant": "t1"}
    plain = parse_delivery({HEADER_URL: "http://h/x", "other": "ignored"})
    assert (plain.method, plain.timeout, plain.headers) == ("POST", None, {})


@pytest.mark.parametrize(
    "kwargs",
    [
        {"url": ""},
        {"url": "not a url"},
        {"url": "ftp://example.com/x"},
        {"url": "https://exa mple.com/"},
        {"url": "http://h/", "method": "NOT A METHOD"},
        {"url": "http://h/", "method": ""},
        {"url": "http://h/", "timeout": 0},
        {"url": "http://h/", "timeout": -1.0},
        {"url": "http://h/", "timeout": float("nan")},
        {"url": "http://h/", "headers": {"X-Bad": "a\r\nInjected: 1"}},
        {"url": "http://h/", "headers": {"Bad Name": "v"}},
    ],
)
def test_a_bad_request_is_refused_when_built(kwargs: dict[str, Any]) -> None:
    with pytest.raises(InvalidArgument):
        WebhookRequest(**kwargs)


def test_status_classification() -> None:
    for status in (200, 201, 204, 299):
        assert classify(status) is Verdict.DELIVERED
    for status in (100, 301, 302, 304, 408, 429, 500, 502, 503, 599):
        assert classify(status) is Verdict.RETRY
    for status in (400, 401, 403, 404, 409, 410, 422, 499):
        assert classify(status) is Verdict.REJECTED


async def test_a_staged_webhook_exists_only_with_its_settlement(
    open_store: Opener, receiver: Receiver, workers: Any
) -> None:
    q = await open_store()
    job = webhook_request(WEBHOOKS, WebhookRequest(receiver.url("/staged")), b"staged")
    refused = SettlementEffects(enqueues=[job])
    assert await q.kv_compare_commit(b"guard", b"not this", refused) is None
    assert q.stats(WEBHOOKS).pending == 0  # the settlement did not commit: no delivery
    [result] = await q.commit_effects(SettlementEffects(enqueues=[job]))
    workers(q)
    assert isinstance(await q.wait_for_completion(result.id, None), Done | NotFound)
    got = await receiver.next()
    assert (got.path, got.body) == ("/staged", b"staged")


# ------------------------------------------------------------ the delivery


async def test_a_2xx_acks_the_job_and_sends_what_it_encodes(
    open_store: Opener, receiver: Receiver, workers: Any
) -> None:
    q = await open_store()
    receiver.script(Reply(204))
    request = WebhookRequest(
        receiver.url("/in?x=1"),
        method="PUT",
        headers={"Content-Type": "application/json", "X-Custom": "v"},
    )
    job_id = await enqueue(q, request, b'{"a":1}')
    workers(q)
    done = await q.wait_for_completion(job_id, None)
    assert isinstance(done, Done | NotFound)  # acked (done jobs are not kept)
    [got] = receiver.received
    assert (got.method, got.path, got.body) == ("PUT", "/in?x=1", b'{"a":1}')
    assert got.headers["Content-Type"] == "application/json"
    assert got.headers["X-Custom"] == "v"
    assert got.headers.getall("Webhook-Id") == [job_id]
    assert got.headers["User-Agent"] == DEFAULT_USER_AGENT
    assert "webhook-signature" not in got.headers
    assert "webhook-timestamp" not in got.headers
    assert q.stats(WEBHOOKS).done == 1


@pytest.mark.parametrize("status", [500, 502, 503, 408, 429, 302])
async def test_a_transient_status_retries_with_backoff_then_succeeds(
    open_store: Opener, receiver: Receiver, workers: Any, clock: MockClock, status: int
) -> None:
    q = await open_store()
    text = "x" * 150 + "é" * 100  # 250 characters: the error keeps the first 200
    redirect = {"Location": receiver.url("/elsewhere")} if status == 302 else {}
    receiver.script(Reply(status, text, redirect), Reply(status, "again", redirect), Reply(200))
    job_id = await enqueue(q, WebhookRequest(receiver.url()))
    workers(q)
    ids = []
    for attempt, delay in ((1, BACKOFF), (2, 2 * BACKOFF)):
        ids.append((await receiver.next()).headers["Webhook-Id"])
        await settled(clock)
        rec = await retried(q, clock, job_id, delay)
        assert rec.attempts == attempt
        assert rec.last_error == (
            f"HTTP {status}: {text[:200]}" if attempt == 1 else f"HTTP {status}: again"
        )
    ids.append((await receiver.next()).headers["Webhook-Id"])
    assert isinstance(await q.wait_for_completion(job_id, None), Done | NotFound)
    assert ids == [job_id] * 3  # the same idempotency key on every retry
    assert [r.path for r in receiver.received] == ["/hook"] * 3  # redirects not followed


async def test_a_timeout_retries_then_succeeds(
    open_store: Opener, receiver: Receiver, workers: Any, clock: MockClock
) -> None:
    q = await open_store()
    receiver.script(HANG, Reply(200))
    job_id = await enqueue(q, WebhookRequest(receiver.url(), timeout=0.2))
    workers(q)
    await receiver.next()
    await settled(clock)  # after 0.2 s of real time, the request timed out
    rec = await retried(q, clock, job_id, BACKOFF)
    assert rec.last_error == "timed out after 0.2 s"
    await receiver.next()
    assert isinstance(await q.wait_for_completion(job_id, None), Done | NotFound)


async def test_a_refused_connection_retries_then_succeeds(
    open_store: Opener, workers: Any, clock: MockClock
) -> None:
    q = await open_store()
    port = free_port()
    late = Receiver()
    job_id = await enqueue(q, WebhookRequest(f"http://127.0.0.1:{port}/hook"))
    workers(q)
    await settled(clock)  # the first attempt found nobody listening
    try:
        await late.start(port)  # the receiver comes up
        rec = await retried(q, clock, job_id, BACKOFF)
        assert rec.last_error is not None
        assert rec.last_error.startswith("transport error: ")
        got = await late.next()
        assert got.headers["Webhook-Id"] == job_id
        assert isinstance(await q.wait_for_completion(job_id, None), Done | NotFound)
    finally:
        await late.stop()


@pytest.mark.parametrize("status", [400, 404, 410, 401, 422])
async def test_a_client_error_dead_letters_at_once(
    open_store: Opener, receiver: Receiver, workers: Any, status: int
) -> None:
    q = await open_store()
    receiver.script(Reply(status, "no such hook"))
    job_id = await enqueue(q, WebhookRequest(receiver.url()))
    workers(q)
    dead = await q.wait_for_completion(job_id, None)
    assert isinstance(dead, Dead)
    assert dead.record.last_error == f"HTTP {status}: no such hook"
    assert dead.record.attempts == 1
    assert len(receiver.received) == 1


@pytest.mark.parametrize(
    ("headers", "reason"),
    [
        ({}, "webhook URL is missing"),
        ({HEADER_URL: ""}, "webhook URL is missing"),
        ({HEADER_URL: "not a url"}, "whitespace"),
        ({HEADER_URL: "nourl"}, "not an absolute http"),
        ({HEADER_URL: "ftp://127.0.0.1/x"}, "not an absolute http"),
        ({HEADER_METHOD: "NOT VALID"}, "is not an HTTP method"),
        ({HEADER_TIMEOUT_MS: "soon"}, "positive whole number of milliseconds"),
        ({HEADER_TIMEOUT_MS: "-5"}, "positive whole number of milliseconds"),
        ({HEADER_TIMEOUT_MS: "1.5"}, "positive whole number of milliseconds"),
        ({HEADER_TIMEOUT_MS: "0"}, "positive whole number of milliseconds"),
        ({"http.Bad Name": "v"}, "not a valid header name"),
    ],
)
async def test_an_unusable_job_dead_letters_without_a_request(
    open_store: Opener,
    receiver: Receiver,
    workers: Any,
    headers: dict[str, str],
    reason: str,
) -> None:
    q = await open_store()
    if headers and HEADER_URL not in headers:
        headers = {HEADER_URL: receiver.url(), **headers}
    result = await q.enqueue_with(WEBHOOKS, b"x", EnqueueOptions(headers=headers))
    workers(q)
    dead = await q.wait_for_completion(result.id, None)
    assert isinstance(dead, Dead)
    assert dead.record.attempts == 1
    assert dead.record.last_error is not None
    assert reason in dead.record.last_error
    assert receiver.received == []


async def test_the_lease_covers_a_long_timeout(
    open_store: Opener, receiver: Receiver, workers: Any, clock: MockClock
) -> None:
    q = await open_store(lease_duration=30.0)
    receiver.script(HANG)
    job_id = await enqueue(q, WebhookRequest(receiver.url(), timeout=120.0))
    workers(q)
    await receiver.next()
    # 120 s of request and the 5 s margin, from the (unmoved) claim time.
    assert q.lease_expiry(WEBHOOKS, job_id) == clock.now_ms() + 125_000
    receiver.release.set()
    assert isinstance(await q.wait_for_completion(job_id, None), Done | NotFound)


async def test_a_lease_that_cannot_be_extended_fails_transiently(
    open_store: Opener, receiver: Receiver
) -> None:
    q = await open_store()
    job_id = await enqueue(q, WebhookRequest(receiver.url()))
    claim = await q.claim(WEBHOOKS)
    assert claim is not None
    assert claim.id == job_id
    await q.cancel(job_id)  # fires the claim's token: the lease can no longer be extended
    async with WebhookWorker(q) as worker:
        with pytest.raises(DeliveryFailed, match="lease not extended"):
            await worker.process(claim, claim.lease)
    assert receiver.received == []


# ------------------------------------------------------------------ signing


async def test_signed_deliveries_verify_and_tampering_fails(
    open_store: Opener, receiver: Receiver, workers: Any, clock: MockClock
) -> None:
    q = await open_store()
    receiver.script(Reply(503))
    body = b'{"event":"paid"}'
    job_id = await enqueue(q, WebhookRequest(receiver.url()), body)
    workers(q, signing_secret=SECRET)
    first = await receiver.next()
    await settled(clock)
    await retried(q, clock, job_id, BACKOFF)
    second = await receiver.next()
    now = clock.now_ms() / 1000
    for got, stamp in ((first, int(now - BACKOFF)), (second, int(now))):
        assert got.headers.getall("webhook-id") == [job_id]  # one header, also the Webhook-Id
        assert got.headers["webhook-timestamp"] == str(stamp)  # the worker's clock
        assert got.headers["webhook-signature"].startswith("v1,")
        assert verify_signature(SECRET, got.headers, got.body, now=stamp)
        # Computed here from the spec, not by the library's own signer.
        content = f"{job_id}.{stamp}.".encode() + body
        key = base64.b64decode(SECRET.removeprefix("whsec_"))
        mac = base64.b64encode(hmac.new(key, content, hashlib.sha256).digest()).decode()
        assert got.headers["webhook-signature"] == f"v1,{mac}"
    headers = dict(second.headers)
    assert verify_signature(SECRET, headers, body, now=now)
    assert not verify_signature(SECRET, headers, body + b" ", now=now)
    assert not verify_signature(
        "whsec_" + base64.b64encode(b"other").decode(), headers, body, now=now
    )
    assert not verify_signature(SECRET, {**headers, "webhook-id": "other"}, body, now=now)
    stale = {**headers, "webhook-timestamp": str(int(now) + 1)}
    assert not verify_signature(SECRET, stale, body, now=now)
    assert not verify_signature(SECRET, headers, body, now=now + 301)  # a replay
    assert verify_signature(SECRET, headers, body, tolerance=400, now=now + 301)
    missing = {k: v for k, v in headers.items() if k.lower() != "webhook-signature"}
    assert not verify_signature(SECRET, missing, body, now=now)
    # Key rotation: any v1 signature in the list may match.
    rotated = {**headers, "webhook-signature": "v1,bm9wZQ== " + headers["webhook-signature"]}
    assert verify_signature(SECRET, rotated, body, now=now)


async def test_the_idempotency_header_can_be_renamed_or_dropped(
    open_store: Opener, receiver: Receiver, workers: Any
) -> None:
    q = await open_store()
    first = await enqueue(q, WebhookRequest(receiver.url("/renamed")))
    handle = workers(q, idempotency_header="Idempotency-Key", user_agent="acme/1")
    await q.wait_for_completion(first, None)
    await handle.shutdown()
    second = await enqueue(q, WebhookRequest(receiver.url("/none")))
    workers(q, idempotency_header=None)
    await q.wait_for_completion(second, None)
    renamed, none = receiver.received
    assert renamed.headers["Idempotency-Key"] == first
    assert "Webhook-Id" not in renamed.headers
    assert renamed.headers["User-Agent"] == "acme/1"
    assert "Webhook-Id" not in none.headers
    assert "Idempotency-Key" not in none.headers


def test_bad_worker_options_are_refused() -> None:
    for options in (
        {"default_timeout": 0},
        {"max_concurrent": 0},
        {"poll_interval": -1},
        {"idempotency_header": ""},
        {"signing_secret": ""},
        {"signing_secret": "whsec_not*base64"},
        {"idempotency_header": "Bad Name"},
        {"user_agent": "acme\r\nX-Injected: 1"},
        {"queue_name": "x" * 300},
    ):
        with pytest.raises(InvalidArgument):
            WebhookOptions(**options)


# --------------------------------------------------- callbacks of runs


async def body(step: Step) -> StepOutcome:
    """Ends each run the way its input says."""
    kind = step.payload
    if kind == b"fail":
        return Fail("boom")
    if kind == b"cancel":
        return Cancel("not wanted")
    if kind == b"binary":
        return Succeed(b"\xff\x00")
    return Succeed(b"result of " + kind)


def callback(receiver: Receiver, name: str) -> RunOptions:
    return RunOptions(headers={"callback_url": receiver.url(f"/cb/{name}"), "tenant": "t1"})


def document(got: Received) -> dict[str, Any]:
    assert got.headers["Content-Type"] == "application/json"
    doc: dict[str, Any] = json.loads(got.body)
    return doc


async def test_every_terminated_run_is_called_back_exactly_once(
    open_store: Opener, receiver: Receiver, workers: Any, clock: MockClock
) -> None:
    q = await open_store()
    rt = WorkflowRuntime(q, Runner(body), hook=WebhookTerminalHook())
    for name in ("ok", "binary", "fail", "cancel"):
        await rt.submit(RunSpec(name.encode(), run_id=name, options=callback(receiver, name)))
    await rt.submit(RunSpec(b"quiet", run_id="quiet", options=RunOptions(headers={"t": "1"})))
    later = RunOptions(
        headers=callback(receiver, "later").headers, run_at=clock.now_ms() + 3600_000
    )
    await rt.submit(RunSpec(b"later", run_id="later", options=later))
    assert await rt.cancel("later")  # removed while scheduled: terminated by the cancel
    runtime_worker = rt.spawn()
    webhook_worker = workers(q, max_concurrent=4)
    try:
        for run_id in ("ok", "binary", "fail", "cancel", "quiet", "later"):
            await asyncio.wait_for(rt.wait(run_id), timeout=10)
        got = {r.path: r for r in [await receiver.next() for _ in range(5)]}
    finally:
        await runtime_worker.shutdown()
        await webhook_worker.shutdown()
    assert receiver.arrivals.empty()  # nothing more: no second callback, none for "quiet"
    assert sorted(got) == ["/cb/binary", "/cb/cancel", "/cb/fail", "/cb/later", "/cb/ok"]
    stats = q.stats(WEBHOOKS)
    assert (stats.done, stats.pending, stats.scheduled, stats.dead) == (5, 0, 0, 0)
    # Five steps and five notifications (the run without a callback URL has none).
    steps = q.stats(QUEUE)
    assert (steps.done, steps.pending, steps.claimed) == (10, 0, 0)

    def expected(run_id: str, status: str, **fields: Any) -> dict[str, Any]:
        doc = {
            "run_id": run_id,
            "status": status,
            "final_step": 0,
            "result_base64": None,
            "result_text": None,
            "error": None,
            "headers": {"callback_url": receiver.url(f"/cb/{run_id}"), "tenant": "t1"},
        }
        return {**doc, **fields}

    assert document(got["/cb/ok"]) == expected(
        "ok",
        "succeeded",
        result_base64=base64.b64encode(b"result of ok").decode(),
        result_text="result of ok",
    )
    assert document(got["/cb/binary"]) == expected(
        "binary", "succeeded", result_base64=base64.b64encode(b"\xff\x00").decode()
    )
    assert document(got["/cb/fail"]) == expected("fail", "failed", error="boom")
    assert document(got["/cb/cancel"]) == expected("cancel", "cancelled", error="not wanted")
    assert document(got["/cb/later"])["status"] == "cancelled"
    for path, request in got.items():
        run_id = path.rsplit("/", 1)[1]
        assert request.method == "POST"
        assert request.headers["Workflow-Run-Id"] == run_id
        outcome = await rt.outcome(run_id)
        status = outcome.status if outcome is not None else TerminalStatus.CANCELLED
        assert request.headers["Workflow-Run-Status"] == status.as_str()
        assert request.headers["Webhook-Id"]


async def test_a_callback_survives_a_restart_between_termination_and_delivery(
    open_store: Opener, receiver: Receiver, workers: Any
) -> None:
    q = await open_store()
    rt = WorkflowRuntime(q, Runner(body), hook=WebhookTerminalHook())
    await rt.submit(RunSpec(b"ok", run_id="ok", options=callback(receiver, "ok")))
    runtime_worker = rt.spawn()
    await asyncio.wait_for(rt.wait("ok"), timeout=10)
    # The notification's ack creates the delivery job; no webhook worker runs yet.
    assert await q.wait_for_jobs_on(WEBHOOKS, HOUR)
    await runtime_worker.shutdown()
    await q.close()
    assert receiver.received == []

    q = await open_store()  # the next process
    assert q.stats(WEBHOOKS).pending == 1
    workers(q)
    got = await receiver.next()
    assert document(got)["result_text"] == "result of ok"
    assert got.headers["Workflow-Run-Status"] == "succeeded"
    assert len(receiver.received) == 1
    assert isinstance(await q.wait_for_completion(got.headers["Webhook-Id"], None), Done | NotFound)
    assert q.stats(WEBHOOKS).done == 1


async def test_a_delivery_cut_by_a_crash_is_sent_again_with_the_same_id(
    open_store: Opener, receiver: Receiver, workers: Any
) -> None:
    q = await open_store()
    receiver.script(HANG)
    job_id = await enqueue(q, WebhookRequest(receiver.url()))
    handle = workers(q)
    await receiver.next()
    await handle.abort()  # the process dies mid-request
    await q.close()
    q = await open_store()  # the claim is requeued at open
    workers(q)
    again = await receiver.next()
    assert again.headers["Webhook-Id"] == job_id
    assert isinstance(await q.wait_for_completion(job_id, None), Done | NotFound)


async def test_runs_without_the_url_header_are_not_observed() -> None:
    hook = WebhookTerminalHook(url_header="notify_to")
    ok = RunOutcome("r", TerminalStatus.SUCCEEDED, 0, headers={"notify_to": "http://h/"})
    assert hook.observes(ok)
    assert not hook.observes(RunOutcome("r", TerminalStatus.SUCCEEDED, 0))
    assert not hook.observes(RunOutcome("r", TerminalStatus.FAILED, 0, headers={"notify_to": ""}))
    effects = TerminalEffects()
    await hook.on_termination(RunOutcome("r", TerminalStatus.SUCCEEDED, 0), effects)
    assert effects.apply_to(SettlementEffects()).enqueues == []
    await hook.on_termination(ok, effects)
    [job] = effects.apply_to(SettlementEffects()).enqueues
    assert job.options.headers is not None
    assert job.options.headers[HEADER_URL] == "http://h/"
    assert job.options.dedup_key is not None
    assert job.options.dedup_key.startswith("webhook:r:")


async def test_a_bad_callback_url_dead_letters_the_notification(open_store: Opener) -> None:
    q = await open_store()
    rt = WorkflowRuntime(q, Runner(body), hook=WebhookTerminalHook())
    opts = RunOptions(headers={"callback_url": "mailto:someone"})
    await rt.submit(RunSpec(b"ok", run_id="bad-url", options=opts))
    runtime_worker = rt.spawn()
    try:
        end = await asyncio.wait_for(rt.wait("bad-url"), timeout=10)
        # The notification job, wherever it is now (no await between the reads).
        [notification] = [
            job
            for status in (JobStatus.PENDING, JobStatus.CLAIMED, JobStatus.DEAD)
            for job in q.list_jobs(QUEUE, status).jobs
        ]
        dead = await q.wait_for_completion(notification.id, None)
    finally:
        await runtime_worker.shutdown()
    assert end.termination.status is TerminalStatus.SUCCEEDED  # the run itself is unaffected
    assert isinstance(dead, Dead)
    assert dead.record.attempts == 1
    assert "'bad-url'" in (dead.record.last_error or "")
    assert "callback_url" in (dead.record.last_error or "")
    assert q.stats(WEBHOOKS).pending == 0


def test_bad_hook_options_are_refused() -> None:
    with pytest.raises(InvalidArgument):
        WebhookTerminalHook(url_header="")
    with pytest.raises(InvalidArgument):
        WebhookTerminalHook(method="NOT VALID")
    with pytest.raises(InvalidArgument):
        WebhookTerminalHook(timeout=0)
    with pytest.raises(InvalidArgument):
        WebhookTerminalHook(headers={"X": "a\nb"})
