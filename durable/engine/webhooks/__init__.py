"""HTTP webhooks on the queue: durable delivery with retries, and run callbacks.

- `WebhookRequest` / `webhook_request` / `enqueue_webhook`: a delivery as a
  job of the webhook queue (``webhooks`` by default), enqueued now or staged
  with a settlement;
- `WebhookWorker` (`WebhookOptions`): claims those jobs and sends them with
  aiohttp, acking 2xx, retrying 408/429/3xx/5xx and transport failures with
  the queue's backoff, dead-lettering other 4xx and unusable jobs;
- `WebhookTerminalHook`: a terminal hook that calls back each run whose
  headers carry ``callback_url`` with a JSON document of its outcome;
- `verify_signature`: for receivers of signed deliveries (Standard Webhooks).
"""

from durable.engine.webhooks.hook import (
    CALLBACK_HEADER_RUN_ID,
    CALLBACK_HEADER_RUN_STATUS,
    DEFAULT_URL_HEADER,
    WebhookTerminalHook,
    outcome_document,
)
from durable.engine.webhooks.request import (
    DEFAULT_WEBHOOK_QUEUE,
    HEADER_METHOD,
    HEADER_TIMEOUT_MS,
    HEADER_URL,
    HTTP_HEADER_PREFIX,
    Delivery,
    WebhookRequest,
    enqueue_webhook,
    parse_delivery,
    webhook_request,
)
from durable.engine.webhooks.signing import (
    HEADER_WEBHOOK_ID,
    HEADER_WEBHOOK_SIGNATURE,
    HEADER_WEBHOOK_TIMESTAMP,
    sign,
    verify_signature,
)
from durable.engine.webhooks.worker import (
    DEFAULT_USER_AGENT,
    Verdict,
    WebhookOptions,
    WebhookWorker,
    WebhookWorkerHandle,
    classify,
)

__all__ = [
    "DEFAULT_URL_HEADER",
    "DEFAULT_USER_AGENT",
    "DEFAULT_WEBHOOK_QUEUE",
    "HEADER_METHOD",
    "CALLBACK_HEADER_RUN_ID",
    "CALLBACK_HEADER_RUN_STATUS",
    "HEADER_TIMEOUT_MS",
    "HEADER_URL",
    "HEADER_WEBHOOK_ID",
    "HEADER_WEBHOOK_SIGNATURE",
    "HEADER_WEBHOOK_TIMESTAMP",
    "HTTP_HEADER_PREFIX",
    "Delivery",
    "Verdict",
    "WebhookOptions",
    "WebhookRequest",
    "WebhookTerminalHook",
    "WebhookWorker",
    "WebhookWorkerHandle",
    "classify",
    "enqueue_webhook",
    "outcome_document",
    "parse_delivery",
    "sign",
    "verify_signature",
    "webhook_request",
]
