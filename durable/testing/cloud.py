"""Stores on local cloud emulators, for tests and benchmarks.

The endpoints come from the environment that ``scripts/emulators.py start``
prints (and ``scripts/test`` exports):

| backend | variable |
|---|---|
| ``s3`` (moto) | ``DURABLE_TEST_S3_ENDPOINT`` |
| ``gcs`` (fake-gcs-server) | ``DURABLE_TEST_GCS_ENDPOINT`` |
| ``azure`` (Azurite) | ``DURABLE_TEST_AZURE_CONNECTION_STRING`` |

`new_bucket` creates a fresh bucket (or container) and returns the store
URL and ``storage_options`` that `durable.store.objects.open_object_store`
and `Queue.open` take. ``endpoint`` overrides the emulator's address, e.g.
to go through a `DelayProxy`.
"""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = [
    "CLOUD_BACKENDS",
    "ENV",
    "StoreLocation",
    "available",
    "new_bucket",
    "new_location",
    "storage_options",
]

#: The emulated cloud backends.
CLOUD_BACKENDS = ("s3", "gcs", "azure")

#: The environment variable that points at each backend's emulator.
ENV = {
    "s3": "DURABLE_TEST_S3_ENDPOINT",
    "gcs": "DURABLE_TEST_GCS_ENDPOINT",
    "azure": "DURABLE_TEST_AZURE_CONNECTION_STRING",
}

_SCHEME = {"s3": "s3", "gcs": "gs", "azure": "az"}


def available(backend: str) -> bool:
    """True when the emulator of ``backend`` is configured in the environment."""
    return bool(os.environ.get(ENV[backend]))


def _endpoint(backend: str) -> str:
    value = os.environ.get(ENV[backend])
    if not value:
        raise LookupError(
            f"{ENV[backend]} is not set: start the emulators with scripts/test, or "
            f'eval "$(.venv/bin/python scripts/emulators.py start)"'
        )
    return value


def storage_options(backend: str, endpoint: str | None = None) -> dict[str, Any]:
    """Options that point ``backend``'s filesystem at its emulator (or ``endpoint``)."""
    if backend == "s3":
        return {
            "endpoint_url": endpoint or _endpoint("s3"),
            "key": "testing",
            "secret": "testing",
            "client_kwargs": {"region_name": "us-east-1"},
        }
    if backend == "gcs":
        return {
            "endpoint_url": endpoint or _endpoint("gcs"),
            "token": "anon",
            "project": "test-project",
        }
    if backend == "azure":
        conn = _endpoint("azure")
        if endpoint is not None:  # swap the blob endpoint's host:port
            parts = dict(p.split("=", 1) for p in conn.strip(";").split(";"))
            parts["BlobEndpoint"] = f"{endpoint.rstrip('/')}/devstoreaccount1"
            conn = ";".join(f"{k}={v}" for k, v in parts.items()) + ";"
        return {"connection_string": conn}
    raise ValueError(f"unknown cloud backend {backend!r}; one of {CLOUD_BACKENDS}")


async def new_bucket(
    backend: str, *, endpoint: str | None = None, prefix: str = "store"
) -> tuple[str, Mapping[str, Any]]:
    """Create a fresh bucket; return ``(store URL, storage_options)``."""
    from durable.store.objects.url import open_object_store

    opts = storage_options(backend, endpoint)
    name = "durable-" + uuid.uuid4().hex[:20]
    # Open the bucket root through our adapter, then create it with its fs.
    store: Any = await open_object_store(f"{_SCHEME[backend]}://{name}", opts)
    try:
        if backend == "s3":
            await store.fs._call_s3("create_bucket", Bucket=name)
        else:
            await store.fs._mkdir(name)
    finally:
        await store.close()
    return f"{_SCHEME[backend]}://{name}/{prefix}", opts


@dataclass(frozen=True)
class StoreLocation:
    """Where a store lives: its backend, URL and ``storage_options``."""

    backend: str
    url: str
    options: Mapping[str, Any] = field(default_factory=dict)

    def argv(self) -> list[str]:
        """``[url, options as JSON]``: hands this location to a child process."""
        return [self.url, json.dumps(dict(self.options))]


async def new_location(backend: str, tmp_dir: str | os.PathLike[str]) -> StoreLocation:
    """A fresh, empty store on ``backend`` (``memory``, ``local`` or a cloud one).

    ``local`` lives in ``tmp_dir``; a cloud backend gets a new bucket on its
    emulator (`LookupError` when the emulator is not configured).
    """
    if backend == "memory":
        return StoreLocation(backend, f"memory://test-{uuid.uuid4().hex}")
    if backend == "local":
        return StoreLocation(backend, str(Path(tmp_dir) / f"store-{uuid.uuid4().hex[:8]}"))
    url, options = await new_bucket(backend)
    return StoreLocation(backend, url, options)
