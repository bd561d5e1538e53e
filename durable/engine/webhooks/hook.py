"""`WebhookTerminalHook`: an HTTP callback for every run that asks for one.

A run opts in with a header (``callback_url`` by default) on its
`RunOptions`. When it terminates, the hook stages the delivery of a JSON
document of its outcome (`outcome_document`) as a webhook job, in the
`TerminalEffects` of the notification: the delivery job is created in the
same transaction as the notification's ack, so once per termination, and a
`WebhookWorker` sends it (with retries) from there. Runs without the header
get no notification job at all.
"""

from __future__ import annotations

import base64
import datetime as _dt
import hashlib
import json
from collections.abc import Mapping
from typing import Any

from durable.engine.effects import TerminalEffects
from durable.engine.outcomes import StepError
from durable.engine.runs import RunOutcome
from durable.engine.webhooks.request import (
    DEFAULT_WEBHOOK_QUEUE,
    WebhookRequest,
    webhook_request,
)
from durable.errors import InvalidArgument

__all__ = [
    "DEFAULT_URL_HEADER",
    "CALLBACK_HEADER_RUN_ID",
    "CALLBACK_HEADER_RUN_STATUS",
    "WebhookTerminalHook",
    "outcome_document",
]

#: The run header that carries the callback URL by default.
DEFAULT_URL_HEADER = "callback_url"
#: HTTP header of a callback naming the run.
CALLBACK_HEADER_RUN_ID = "Workflow-Run-Id"
#: HTTP header of a callback with the run's status (``succeeded|failed|cancelled``).
CALLBACK_HEADER_RUN_STATUS = "Workflow-Run-Status"

# Any URL passes: it only lets the options be checked by WebhookRequest.
_PROBE_URL = "http://callback.invalid/"


def outcome_document(outcome: RunOutcome) -> bytes:
    """The JSON body of a callback (UTF-8).

    ``{"run_id", "status", "final_step", "result_base64", "result_text",
    "error", "headers"}``: ``result_base64`` is the result's bytes in
    base64 (null without a result), ``result_text`` the same bytes as text
    when they are UTF-8 (else null), ``error`` the failure or cancellation
    reason, ``headers`` the run's headers.
    """
    result = outcome.result
    text: str | None = None
    if result is not None:
        try:
            text = result.decode("utf-8")
        except UnicodeDecodeError:
            text = None
    doc: dict[str, Any] = {
        "run_id": outcome.run_id,
        "status": outcome.status.as_str(),
        "final_step": outcome.final_step,
        "result_base64": None if result is None else base64.b64encode(result).decode(),
        "result_text": text,
        "error": outcome.error,
        "headers": dict(outcome.headers),
    }
    return json.dumps(doc, separators=(",", ":")).encode()


class WebhookTerminalHook:
    """A `TerminalHook` that posts each opted-in run's outcome to its callback URL.

    ``webhook_queue`` is the queue a `WebhookWorker` serves; ``url_header``
    the run header holding the URL. ``method``, ``timeout`` and ``headers``
    (extra HTTP headers) shape every callback; ``priority`` and
    ``max_attempts`` are the delivery jobs' (None: the webhook queue's).
    Besides ``Content-Type: application/json`` each callback carries
    ``Workflow-Run-Id`` and ``Workflow-Run-Status``.

    Delivery jobs are deduplicated on ``webhook:{run_id}:{digest of the
    body}`` while one is queued, so a notification handled twice cannot
    queue two callbacks. A callback URL that is not an http(s) URL fails
    the notification permanently (it is dead-lettered with the reason).
    """

    def __init__(
        self,
        webhook_queue: str = DEFAULT_WEBHOOK_QUEUE,
        url_header: str = DEFAULT_URL_HEADER,
        *,
        method: str = "POST",
        timeout: float | _dt.timedelta | None = None,
        headers: Mapping[str, str] | None = None,
        priority: int | None = None,
        max_attempts: int | None = None,
    ) -> None:
        if not isinstance(url_header, str) or not url_header:
            raise InvalidArgument(f"url_header must be a non-empty str, got {url_header!r}")
        probe = WebhookRequest(_PROBE_URL, method, timeout, dict(headers or {}))
        # Checked now, so a bad option fails here and not in every notification.
        webhook_request(webhook_queue, probe, b"", priority=priority, max_attempts=max_attempts)
        self.webhook_queue = webhook_queue
        self.url_header = url_header
        self.method = probe.method
        self.timeout = probe.timeout
        self.headers = dict(probe.headers)
        self.priority = priority
        self.max_attempts = max_attempts

    def observes(self, outcome: RunOutcome) -> bool:
        """Only runs whose headers carry a (non-empty) callback URL."""
        return bool(outcome.headers.get(self.url_header))

    async def on_termination(self, outcome: RunOutcome, effects: TerminalEffects) -> None:
        """Stage the callback's delivery job in ``effects``."""
        url = outcome.headers.get(self.url_header)
        if not url:
            return
        body = outcome_document(outcome)
        headers = {
            **self.headers,
            "Content-Type": "application/json",
            CALLBACK_HEADER_RUN_ID: outcome.run_id,
            CALLBACK_HEADER_RUN_STATUS: outcome.status.as_str(),
        }
        try:
            request = WebhookRequest(url, self.method, self.timeout, headers)
        except InvalidArgument as e:
            raise StepError.permanent(
                f"run {outcome.run_id!r}: header {self.url_header!r}: {e}"
            ) from None
        digest = hashlib.sha256(body).hexdigest()[:32]
        job = webhook_request(
            self.webhook_queue,
            request,
            body,
            dedup_key=f"webhook:{outcome.run_id}:{digest}",
            priority=self.priority,
            max_attempts=self.max_attempts,
        )
        effects.enqueue(job.queue, job.payload, job.options)
