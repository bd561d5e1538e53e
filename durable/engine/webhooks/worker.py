"""The webhook delivery worker: claims webhook jobs and sends them over HTTP.

Per job (semantics 3.2): read the job (`parse_delivery`; unusable →
dead-letter), extend the lease to cover the request timeout (failure →
retry), send it, and classify the answer with `classify`:

- 2xx: delivered, the job is acked;
- 408, 429, any other status that is not 4xx (1xx, 3xx, 5xx), a transport
  error or a timeout: transient, the job is nacked and retried with the
  queue's backoff (dead-lettered once its attempts run out);
- any other 4xx: the receiver refused it, the job is dead-lettered now.

The error stored on the job is ``HTTP {status}: {first 200 chars of the body}``.
Every request carries the job id in ``Webhook-Id`` (configurable), the same
on every retry, so receivers can drop duplicates; with a signing secret it
is also signed (`durable.engine.webhooks.signing`).
"""

from __future__ import annotations

import asyncio
import enum
from dataclasses import dataclass

from durable import __version__
from durable._logging import get_logger
from durable.engine._checks import U32_MAX, check_int, check_seconds
from durable.engine.webhooks.request import (
    DEFAULT_WEBHOOK_QUEUE,
    Delivery,
    check_http_header,
    parse_delivery,
)
from durable.engine.webhooks.signing import signature_headers, signing_key
from durable.engine.webhooks.transport import HttpTransport
from durable.errors import DurableError, InvalidArgument
from durable.store.clock import Clock
from durable.store.queue import (
    Claim,
    LeaseHandle,
    PermanentFailure,
    Queue,
    SettlementEffects,
    run_worker_concurrent,
)
from durable.store.queue.options import validate_queue_name

__all__ = [
    "DEFAULT_USER_AGENT",
    "Verdict",
    "WebhookOptions",
    "WebhookWorker",
    "WebhookWorkerHandle",
    "classify",
]

log = get_logger("durable.webhooks")

#: The ``User-Agent`` of every delivery unless configured otherwise.
DEFAULT_USER_AGENT = f"durable-webhooks/{__version__}"


class Verdict(enum.Enum):
    """What a response status means for the delivery job."""

    #: 2xx: ack.
    DELIVERED = "delivered"
    #: 408, 429, 1xx, 3xx, 5xx (and transport failures): nack, retry later.
    RETRY = "retry"
    #: Any other 4xx: dead-letter now.
    REJECTED = "rejected"


def classify(status: int) -> Verdict:
    """The verdict on an HTTP response ``status``."""
    if 200 <= status < 300:
        return Verdict.DELIVERED
    if 400 <= status < 500 and status not in (408, 429):
        return Verdict.REJECTED
    return Verdict.RETRY


class DeliveryFailed(Exception):
    """A delivery attempt failed in a way a retry may fix (the job is nacked)."""


@dataclass(frozen=True, slots=True)
class WebhookOptions:
    """How a `WebhookWorker` delivers. Durations in seconds."""

    #: The queue of webhook jobs.
    queue_name: str = DEFAULT_WEBHOOK_QUEUE
    #: Timeout of a request whose job names none.
    default_timeout: float = 30.0
    #: Requests in flight at once.
    max_concurrent: int = 16
    #: How long an idle worker waits (on the queue's clock) before polling again.
    poll_interval: float = 1.0
    #: Header carrying the job id for receiver-side deduplication; None sends none.
    idempotency_header: str | None = "Webhook-Id"
    #: Sign every request with this secret (Standard Webhooks); None: unsigned.
    signing_secret: str | bytes | None = None
    #: The ``User-Agent`` header (a job's ``http.User-Agent`` overrides it).
    user_agent: str = DEFAULT_USER_AGENT
    #: Clock of the signature timestamps; None: the queue's.
    clock: Clock | None = None

    def __post_init__(self) -> None:
        try:
            validate_queue_name(self.queue_name)
        except DurableError as e:
            raise InvalidArgument(f"WebhookOptions.queue_name: {e}") from None
        for name in ("default_timeout", "poll_interval"):
            seconds = check_seconds(f"WebhookOptions.{name}", getattr(self, name), positive=True)
            object.__setattr__(self, name, seconds)
        check_int("WebhookOptions.max_concurrent", self.max_concurrent, 1, U32_MAX)
        if self.idempotency_header is not None:
            if not isinstance(self.idempotency_header, str):
                raise InvalidArgument(
                    "WebhookOptions.idempotency_header must be a header name or None, "
                    f"got {self.idempotency_header!r}"
                )
            check_http_header(self.idempotency_header, "")
        if self.signing_secret is not None:
            signing_key(self.signing_secret)
        if not isinstance(self.user_agent, str):
            raise InvalidArgument(f"WebhookOptions.user_agent must be a str: {self.user_agent!r}")
        check_http_header("User-Agent", self.user_agent)
        if self.clock is not None and not isinstance(self.clock, Clock):
            raise InvalidArgument(f"WebhookOptions.clock must be a Clock, got {self.clock!r}")


class WebhookWorker:
    """Delivers the jobs of a webhook queue; a queue `Worker`.

    `spawn` runs it (once per instance). To drive it with your own
    `run_worker` loop instead, use it as an async context manager (or call
    `aclose`) so its HTTP session is closed.
    """

    def __init__(self, queue: Queue, options: WebhookOptions | None = None) -> None:
        self.queue = queue
        self.options = options if options is not None else WebhookOptions()
        if not isinstance(self.options, WebhookOptions):
            raise InvalidArgument(f"options must be WebhookOptions, got {self.options!r}")
        self.clock: Clock = self.options.clock or queue.clock
        self._transport = HttpTransport(self.options.user_agent)
        self._spawned = False

    def request_headers(self, job_id: str, delivery: Delivery, body: bytes) -> dict[str, str]:
        """The HTTP headers of a delivery: the job's, then the id, then the signature.

        Later ones replace earlier ones of the same name (case-insensitive).
        """
        merged: dict[str, tuple[str, str]] = {}
        for name, value in delivery.headers.items():
            merged[name.lower()] = (name, value)
        if self.options.idempotency_header is not None:
            name = self.options.idempotency_header
            merged[name.lower()] = (name, job_id)
        if self.options.signing_secret is not None:
            stamp = self.clock.now_ms() // 1000
            signed = signature_headers(self.options.signing_secret, job_id, stamp, body)
            for name, value in signed.items():
                merged[name.lower()] = (name, value)
        return dict(merged.values())

    async def process(self, job: Claim, lease: LeaseHandle) -> SettlementEffects | None:
        """Deliver one job: None (ack), `PermanentFailure` (dead-letter) or another
        exception (nack); see the module docstring."""
        try:
            delivery = parse_delivery(job.record.headers)
        except InvalidArgument as e:
            raise PermanentFailure(f"webhook job {job.id}: {e}") from None
        timeout = delivery.timeout if delivery.timeout is not None else self.options.default_timeout
        try:
            lease.ensure_at_least(timeout)
        except DurableError as e:
            raise DeliveryFailed(
                f"lease not extended to cover the {timeout:g} s request: {e}"
            ) from e
        body = job.payload
        headers = self.request_headers(job.id, delivery, body)
        reply = await self._transport.send(delivery.method, delivery.url, headers, body, timeout)
        verdict = classify(reply.status)
        if verdict is Verdict.DELIVERED:
            log.debug("webhook delivered", job=job.id, status=reply.status)
            return None
        message = f"HTTP {reply.status}: {reply.preview}"
        if verdict is Verdict.REJECTED:
            raise PermanentFailure(message)
        raise DeliveryFailed(message)

    def spawn(self) -> WebhookWorkerHandle:
        """Start delivering on this event loop; `WebhookWorkerHandle.shutdown` stops."""
        if self._spawned:
            raise InvalidArgument("a WebhookWorker is spawned once; create another to run twice")
        self._spawned = True
        stop = asyncio.Event()
        name = self.options.queue_name
        task = asyncio.create_task(
            run_worker_concurrent(
                self.queue,
                self,
                name=name,
                concurrency=self.options.max_concurrent,
                poll_interval=self.options.poll_interval,
                shutdown=stop,
            ),
            name=f"durable-webhooks {name}",
        )
        return WebhookWorkerHandle(task, stop, self)

    async def aclose(self) -> None:
        """Close the HTTP session (idempotent)."""
        await self._transport.aclose()

    async def __aenter__(self) -> WebhookWorker:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


class WebhookWorkerHandle:
    """A running `WebhookWorker`; `shutdown` stops claiming and drains requests in flight."""

    def __init__(
        self, task: asyncio.Task[None], stop: asyncio.Event, worker: WebhookWorker
    ) -> None:
        self._task = task
        self._stop = stop
        self._worker = worker

    async def shutdown(self) -> None:
        """Stop claiming, wait for the requests in flight to settle, close the session."""
        self._stop.set()
        try:
            await self._task
        finally:
            await self._worker.aclose()

    async def abort(self) -> None:
        """Stop at once, as a crash would: jobs in flight keep their claims
        (they are delivered again when their leases expire, or at the next open)."""
        self._task.cancel()
        await asyncio.gather(self._task, return_exceptions=True)
        await self._worker.aclose()

    @property
    def running(self) -> bool:
        """True until the worker has stopped."""
        return not self._task.done()

    async def __aenter__(self) -> WebhookWorkerHandle:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.shutdown()
