"""A cloud store whose credentials are missing fails at once, naming the
cause, instead of retrying a request that can never succeed."""

from __future__ import annotations

import os
import time

import pytest

from durable import Engine
from durable.errors import ObjectStoreError


async def test_missing_s3_credentials_fail_the_open_at_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name in list(os.environ):
        if name.startswith("AWS_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent/credentials")
    monkeypatch.setenv("AWS_CONFIG_FILE", "/nonexistent/config")
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    began = time.monotonic()
    # The SDK refuses to sign before any request: nothing listens on port 9.
    with pytest.raises(ObjectStoreError, match="NoCredentialsError") as caught:
        async with Engine(
            "s3://no-creds/app", storage_options={"endpoint_url": "http://127.0.0.1:9"}
        ):
            pass
    assert not caught.value.transient
    assert "s3://no-creds/app" in str(caught.value)
    assert time.monotonic() - began < 10  # the open retries transient errors for longer
