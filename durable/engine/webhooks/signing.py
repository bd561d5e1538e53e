"""Request signing the Standard Webhooks way (https://www.standardwebhooks.com).

A signed delivery carries three headers:

- ``webhook-id``: the delivery's id (the job id: the same on every retry);
- ``webhook-timestamp``: when this attempt was signed, in whole seconds
  since the Unix epoch;
- ``webhook-signature``: ``v1,<base64 HMAC-SHA256(key, "{id}.{timestamp}.{body}")>``.

The key is the secret's bytes: a ``whsec_``-prefixed secret (the Standard
Webhooks convention) is the base64 text after the prefix, any other str is
its UTF-8 encoding, and bytes are used as given. Receivers check a delivery
with `verify_signature`, which also rejects stale timestamps (replays).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import math
import time
from collections.abc import Mapping

from durable.errors import InvalidArgument

__all__ = [
    "HEADER_WEBHOOK_ID",
    "HEADER_WEBHOOK_SIGNATURE",
    "HEADER_WEBHOOK_TIMESTAMP",
    "sign",
    "signature_headers",
    "signing_key",
    "verify_signature",
]

#: Header of the delivery id.
HEADER_WEBHOOK_ID = "webhook-id"
#: Header of the signing time (epoch seconds).
HEADER_WEBHOOK_TIMESTAMP = "webhook-timestamp"
#: Header of the signatures (space-separated ``v1,<base64>`` entries).
HEADER_WEBHOOK_SIGNATURE = "webhook-signature"

_PREFIX = "whsec_"


def signing_key(secret: str | bytes) -> bytes:
    """The HMAC key of ``secret`` (see the module docstring); `InvalidArgument` if unusable."""
    if isinstance(secret, bytes | bytearray):
        key = bytes(secret)
    elif isinstance(secret, str):
        if secret.startswith(_PREFIX):
            try:
                key = base64.b64decode(secret[len(_PREFIX) :], validate=True)
            except (binascii.Error, ValueError):
                raise InvalidArgument(
                    "a signing secret starting with 'whsec_' must be followed by base64"
                ) from None
        else:
            key = secret.encode()
    else:
        raise InvalidArgument(f"a signing secret is str or bytes, got {type(secret).__name__}")
    if not key:
        raise InvalidArgument("a signing secret must not be empty")
    return key


def sign(secret: str | bytes, msg_id: str, timestamp: int, body: bytes) -> str:
    """The ``v1,<base64>`` signature of ``body`` sent as ``msg_id`` at ``timestamp``."""
    content = f"{msg_id}.{timestamp}.".encode() + body
    digest = hmac.new(signing_key(secret), content, hashlib.sha256).digest()
    return "v1," + base64.b64encode(digest).decode()


def signature_headers(
    secret: str | bytes, msg_id: str, timestamp: int, body: bytes
) -> dict[str, str]:
    """The three headers of a signed delivery."""
    return {
        HEADER_WEBHOOK_ID: msg_id,
        HEADER_WEBHOOK_TIMESTAMP: str(timestamp),
        HEADER_WEBHOOK_SIGNATURE: sign(secret, msg_id, timestamp, body),
    }


def verify_signature(
    secret: str | bytes,
    headers: Mapping[str, str],
    body: bytes,
    tolerance: float = 300.0,
    now: float | None = None,
) -> bool:
    """True if ``headers`` carry a valid signature of ``body`` under ``secret``.

    For receivers. ``headers`` are matched case-insensitively; the
    timestamp must be within ``tolerance`` seconds of ``now`` (epoch
    seconds; None: the wall clock), which bounds replays. Any ``v1``
    signature in the header may match (key rotation); comparisons are
    constant-time. Missing or malformed headers give False.
    """
    if not (isinstance(tolerance, int | float) and math.isfinite(tolerance) and tolerance >= 0):
        raise InvalidArgument(f"tolerance must be a non-negative number of seconds: {tolerance!r}")
    lowered = {k.lower(): v for k, v in headers.items()}
    msg_id = lowered.get(HEADER_WEBHOOK_ID)
    stamp = lowered.get(HEADER_WEBHOOK_TIMESTAMP)
    signatures = lowered.get(HEADER_WEBHOOK_SIGNATURE)
    if msg_id is None or stamp is None or signatures is None:
        return False
    if not (stamp.isascii() and stamp.isdigit()):
        return False
    timestamp = int(stamp)
    current = time.time() if now is None else now
    if abs(current - timestamp) > tolerance:
        return False
    expected = sign(secret, msg_id, timestamp, bytes(body)).encode()
    valid = False
    for candidate in signatures.split():
        if candidate.startswith("v1,"):
            valid |= hmac.compare_digest(candidate.encode(), expected)
    return valid
