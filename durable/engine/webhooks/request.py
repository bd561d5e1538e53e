"""A webhook delivery as a queue job: its encoding in job headers, and back.

A delivery is an ordinary job of the webhook queue. Its body is the job's
payload; everything else travels in the job's headers:

| Header | Required | Meaning |
|---|---|---|
| ``webhook.url`` | yes | Target URL (``http`` or ``https``, non-empty) |
| ``webhook.method`` | no | HTTP method (default ``POST``) |
| ``webhook.timeout_ms`` | no | Per-request timeout in whole milliseconds |
| ``http.<Name>`` | no | One outgoing HTTP header ``<Name>`` |

Other headers are ignored by the worker (an application may keep its own
metadata there). `webhook_request` builds the `EnqueueRequest` (to stage in
`SettlementEffects` or `TerminalEffects`), `enqueue_webhook` enqueues it
now, and `parse_delivery` is what the worker reads back: a job it cannot
read raises `InvalidArgument` and is dead-lettered, since retrying would
not change it.
"""

from __future__ import annotations

import datetime as _dt
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from durable.engine._checks import check_bytes, check_headers, check_str
from durable.errors import InvalidArgument
from durable.store.queue import EnqueueOptions, EnqueueRequest, EnqueueResult, Queue

__all__ = [
    "DEFAULT_WEBHOOK_QUEUE",
    "HEADER_METHOD",
    "HEADER_TIMEOUT_MS",
    "HEADER_URL",
    "HTTP_HEADER_PREFIX",
    "Delivery",
    "WebhookRequest",
    "check_http_header",
    "enqueue_webhook",
    "parse_delivery",
    "webhook_request",
]

#: The queue webhook deliveries go to unless told otherwise.
DEFAULT_WEBHOOK_QUEUE = "webhooks"
#: Job header of the target URL (required).
HEADER_URL = "webhook.url"
#: Job header of the HTTP method (default ``POST``).
HEADER_METHOD = "webhook.method"
#: Job header of the per-request timeout, in decimal milliseconds.
HEADER_TIMEOUT_MS = "webhook.timeout_ms"
#: Prefix of job headers sent as HTTP headers (``http.Content-Type``).
HTTP_HEADER_PREFIX = "http."

# RFC 9110 token: methods and header names.
_TOKEN = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
_BAD_VALUE = re.compile(r"[\r\n\x00]")


def _check_url(url: str) -> str:
    """``url`` if it is an absolute http(s) URL; `InvalidArgument` naming the fault."""
    if not url:
        raise InvalidArgument(f"webhook URL is missing (job header {HEADER_URL!r})")
    if any(c.isspace() for c in url):
        raise InvalidArgument(f"webhook URL {url!r} contains whitespace")
    import yarl  # on first use: most processes never check a webhook URL

    try:
        parsed = yarl.URL(url)
    except ValueError as e:
        raise InvalidArgument(f"webhook URL {url!r} cannot be parsed: {e}") from None
    if parsed.scheme not in ("http", "https") or not parsed.host:
        raise InvalidArgument(f"webhook URL {url!r} is not an absolute http:// or https:// URL")
    return url


def _check_method(method: str) -> str:
    if not _TOKEN.fullmatch(method):
        raise InvalidArgument(f"webhook method {method!r} is not an HTTP method")
    return method.upper()


def check_http_header(name: str, value: str) -> None:
    """`InvalidArgument` unless ``name: value`` can be sent as an HTTP header."""
    if not _TOKEN.fullmatch(name):
        raise InvalidArgument(f"webhook HTTP header name {name!r} is not a valid header name")
    if _BAD_VALUE.search(value):
        raise InvalidArgument(
            f"webhook HTTP header {name!r} has a value with CR, LF or NUL: {value!r}"
        )


@dataclass(frozen=True, slots=True)
class WebhookRequest:
    """One HTTP request to deliver: where, how, with which headers.

    ``timeout`` (seconds or a timedelta) bounds the whole exchange; None
    uses the worker's default. Checked when built (`InvalidArgument`).
    """

    url: str
    method: str = "POST"
    timeout: float | _dt.timedelta | None = None
    headers: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        _check_url(check_str("WebhookRequest.url", self.url))
        method = _check_method(check_str("WebhookRequest.method", self.method))
        object.__setattr__(self, "method", method)
        if self.timeout is not None:
            object.__setattr__(self, "timeout", _timeout_seconds(self.timeout))
        headers = check_headers("WebhookRequest.headers", self.headers)
        for name, value in headers.items():
            check_http_header(name, value)
        object.__setattr__(self, "headers", headers)

    def job_headers(self) -> dict[str, str]:
        """The job headers that encode this request."""
        out = {HEADER_URL: self.url, HEADER_METHOD: self.method}
        if self.timeout is not None:
            ms = round(_timeout_seconds(self.timeout) * 1000)
            out[HEADER_TIMEOUT_MS] = str(max(1, ms))
        for name, value in self.headers.items():
            out[HTTP_HEADER_PREFIX + name] = value
        return out


def _timeout_seconds(value: object) -> float:
    if isinstance(value, _dt.timedelta):
        seconds = value.total_seconds()
    elif isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidArgument(
            f"WebhookRequest.timeout must be seconds or a timedelta, got {value!r}"
        )
    else:
        seconds = float(value)
    if not math.isfinite(seconds) or seconds <= 0:
        raise InvalidArgument(f"WebhookRequest.timeout must be a positive duration, got {value!r}")
    return seconds


def webhook_request(
    queue_name: str,
    request: WebhookRequest,
    body: bytes,
    *,
    dedup_key: str | None = None,
    priority: int | None = None,
    max_attempts: int | None = None,
    run_at: int | _dt.datetime | None = None,
) -> EnqueueRequest:
    """The job that delivers ``request`` with ``body``, to enqueue on ``queue_name``.

    Stage it with a settlement (``effects.enqueues.append(job)``, or
    ``effects.enqueue(job.queue, job.payload, job.options)`` on a
    `SettlementEffects` or `TerminalEffects`) so the delivery exists if and
    only if that settlement commits. The keyword options are the job's
    `EnqueueOptions`.
    """
    if not isinstance(request, WebhookRequest):
        raise InvalidArgument(f"request must be a WebhookRequest, got {request!r}")
    options = EnqueueOptions(
        max_attempts=max_attempts,
        priority=priority,
        run_at=run_at,
        dedup_key=dedup_key,
        headers=request.job_headers(),
    )
    return EnqueueRequest(queue_name, check_bytes("webhook body", body), options)


async def enqueue_webhook(
    queue: Queue,
    queue_name: str,
    request: WebhookRequest,
    body: bytes,
    *,
    dedup_key: str | None = None,
    priority: int | None = None,
    max_attempts: int | None = None,
    run_at: int | _dt.datetime | None = None,
) -> EnqueueResult:
    """Enqueue the delivery of ``request`` with ``body`` on ``queue_name`` now."""
    job = webhook_request(
        queue_name,
        request,
        body,
        dedup_key=dedup_key,
        priority=priority,
        max_attempts=max_attempts,
        run_at=run_at,
    )
    return await queue.enqueue_with(job.queue, job.payload, job.options)


@dataclass(frozen=True, slots=True)
class Delivery:
    """A webhook job read back: what the worker sends.

    ``timeout`` is None when the job names none (the worker's default).
    """

    url: str
    method: str
    timeout: float | None
    headers: Mapping[str, str]


def parse_delivery(job_headers: Mapping[str, str]) -> Delivery:
    """Read a webhook job's headers; `InvalidArgument` if they are unusable."""
    url = _check_url(job_headers.get(HEADER_URL, ""))
    method = _check_method(job_headers.get(HEADER_METHOD, "POST"))
    timeout: float | None = None
    raw = job_headers.get(HEADER_TIMEOUT_MS)
    if raw is not None:
        if not (raw.isascii() and raw.isdigit()) or int(raw) == 0:
            raise InvalidArgument(
                f"job header {HEADER_TIMEOUT_MS!r} must be a positive whole number of "
                f"milliseconds, got {raw!r}"
            )
        timeout = int(raw) / 1000
    headers: dict[str, str] = {}
    for key, value in job_headers.items():
        if key.startswith(HTTP_HEADER_PREFIX):
            name = key[len(HTTP_HEADER_PREFIX) :]
            check_http_header(name, value)
            headers[name] = value
    return Delivery(url, method, timeout, headers)
