"""Open an object store from a URL.

| URL | store |
|---|---|
| ``/var/lib/app``, ``./state`` (a bare path) | `LocalObjectStore` |
| ``file:///var/lib/app`` | `LocalObjectStore` |
| ``memory://name`` | `MemoryObjectStore.named` (shared within the process) |
| ``s3://bucket/prefix`` | `S3ObjectStore` (``pip install durable[s3]``) |
| ``gs://bucket/prefix``, ``gcs://...`` | `GCSObjectStore` (``durable[gcs]``) |
| ``az://container/prefix``, ``abfs://...`` | `AzureObjectStore` (``durable[azure]``) |
| any other fsspec protocol | `FsspecObjectStore`: readers only |

``storage_options`` go to the backend's filesystem as keyword arguments
(credentials, ``endpoint_url``, ``connection_string``, ...); without them
each provider's usual environment variables apply (``AWS_*``,
``GOOGLE_APPLICATION_CREDENTIALS``, ``AZURE_STORAGE_CONNECTION_STRING``...).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from durable.store.objects.base import ObjectStore
from durable.store.objects.fsspec_store import FsspecObjectStore
from durable.store.objects.local import LocalObjectStore
from durable.store.objects.memory import MemoryObjectStore

__all__ = ["open_object_store", "resolve_store", "split_url"]


def split_url(url: str | os.PathLike[str]) -> tuple[str, str]:
    """``(protocol, rest)``; a bare path is ``("file", path)``."""
    text = os.fspath(url)
    if "://" not in text:
        return "file", text
    protocol, rest = text.split("://", 1)
    return protocol.lower(), rest


def _bucket(url: str, rest: str) -> tuple[str, str]:
    bucket, _, prefix = rest.partition("/")
    if not bucket:
        raise ValueError(f"store URL {url!r} names no bucket or container")
    return bucket, prefix.strip("/")


async def open_object_store(
    url: str | os.PathLike[str], storage_options: Mapping[str, Any] | None = None
) -> ObjectStore:
    """The object store at ``url``; close it with ``await store.close()``."""
    protocol, rest = split_url(url)
    text = os.fspath(url)
    if protocol in ("file", "local"):
        return LocalObjectStore(rest)
    if protocol == "memory":
        return MemoryObjectStore.named(rest.strip("/") or "default")
    if protocol in ("s3", "s3a"):
        from durable.store.objects.s3 import S3ObjectStore

        return await S3ObjectStore.open(*_bucket(text, rest), storage_options)
    if protocol in ("gs", "gcs"):
        from durable.store.objects.gcs import GCSObjectStore

        return await GCSObjectStore.open(*_bucket(text, rest), storage_options)
    if protocol in ("az", "abfs", "abfss"):
        from durable.store.objects.azure import AzureObjectStore

        return await AzureObjectStore.open(*_bucket(text, rest), storage_options)
    import fsspec
    from fsspec.asyn import AsyncFileSystem
    from fsspec.implementations.asyn_wrapper import AsyncFileSystemWrapper

    fs = fsspec.filesystem(protocol, **dict(storage_options or {}), skip_instance_cache=True)
    if not isinstance(fs, AsyncFileSystem) or not fs.async_impl:
        fs = AsyncFileSystemWrapper(fs)
    return FsspecObjectStore(fs, rest, text)


async def resolve_store(
    store: ObjectStore | str | os.PathLike[str],
    storage_options: Mapping[str, Any] | None = None,
) -> tuple[ObjectStore, bool]:
    """``(object store, opened here)``: an `ObjectStore` as is, a URL opened."""
    if isinstance(store, ObjectStore):
        if storage_options:
            raise ValueError("storage_options apply to a URL, not to an ObjectStore")
        return store, False
    return await open_object_store(store, storage_options), True
