"""Open an object store from a URL.

| URL | store |
|---|---|
| ``/var/lib/app``, ``./state`` (a bare path) | `SegmentObjectStore` (see below) |
| ``file:///var/lib/app`` | as a bare path |
| ``segments:///var/lib/app`` | `SegmentObjectStore`: the log in append-only segment files |
| ``memory://name`` | `MemoryObjectStore.named` (shared within the process) |
| ``s3://bucket/prefix`` | `S3ObjectStore` (``pip install durable[s3]``) |
| ``gs://bucket/prefix``, ``gcs://...`` | `GCSObjectStore` (``durable[gcs]``) |
| ``az://container/prefix``, ``abfs://...`` | `AzureObjectStore` (``durable[azure]``) |
| any other fsspec protocol | `FsspecObjectStore`: readers only |

A local directory (a bare path or ``file://`` URL) keeps its log in
append-only segment files (`SegmentObjectStore`) unless the directory
already keeps it as objects (``log/``, in the root or a partition: a store
made before segments were the default, or by `LocalObjectStore`), or is
on a network filesystem (`durable.store.objects.mounts`): those open as a
`LocalObjectStore`, whose log is one object per commit. The medium is so
chosen once, when the store's first writer opens it, and every later open
(readers and the CLI included) finds the same (`local_medium`).

Anything else (an unknown scheme, an empty path, a value that is not a
path) is refused with `InvalidStoreUrl` before anything is opened; a cloud
URL whose bucket or container does not exist opens, and its first write
raises `StoreNotFound`.

``storage_options`` go to the backend's filesystem as keyword arguments
(credentials, ``endpoint_url``, ``connection_string``, ...); without them
each provider's usual environment variables apply (``AWS_*``,
``GOOGLE_APPLICATION_CREDENTIALS``, ``AZURE_STORAGE_CONNECTION_STRING``...).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from durable.errors import InvalidStoreUrl
from durable.store.objects.base import ObjectStore
from durable.store.objects.fsspec_store import FsspecObjectStore
from durable.store.objects.local import LocalObjectStore
from durable.store.objects.memory import MemoryObjectStore
from durable.store.objects.mounts import NETWORK_FILESYSTEMS, filesystem_type
from durable.store.objects.segments import SegmentObjectStore, has_object_log, has_segments

__all__ = [
    "WRITER_SCHEMES",
    "check_store_url",
    "check_writer_url",
    "local_medium",
    "open_object_store",
    "resolve_store",
    "split_url",
]

_LOCAL = ("file", "local")
_SEGMENTS = "segments"
_S3 = ("s3", "s3a")
_GCS = ("gs", "gcs")
_AZURE = ("az", "abfs", "abfss")
#: The schemes a writer (a `Queue`, an `Engine`) can open.
WRITER_SCHEMES = (*_LOCAL, _SEGMENTS, "memory", *_S3, *_GCS, *_AZURE)
_WRITERS = (
    "a store that can be written is a path or a file://, segments://, memory://, s3:// (s3a://), "
    "gs:// (gcs://) or az:// (abfs://, abfss://) URL"
)


def split_url(url: str | os.PathLike[str]) -> tuple[str, str]:
    """``(protocol, rest)``; a bare path is ``("file", path)``."""
    text = os.fspath(url)
    if "://" not in text:
        return "file", text
    protocol, rest = text.split("://", 1)
    return protocol.lower(), rest


def _text(url: object) -> str:
    path = os.fspath(url) if isinstance(url, os.PathLike) else url
    if not isinstance(path, str):
        raise InvalidStoreUrl(
            url, f"a store is a path, a URL string or an ObjectStore, not {type(url).__name__}"
        )
    return path


def check_store_url(url: str | os.PathLike[str]) -> tuple[str, str]:
    """``(protocol, rest)`` of a store location, checked without I/O.

    `InvalidStoreUrl` for a value that is not a path or URL string, an
    empty path, a cloud URL without a bucket, or a scheme that neither
    durable nor fsspec knows (the message lists the known schemes).
    """
    text = _text(url)
    protocol, rest = split_url(text)
    if protocol in (*_LOCAL, _SEGMENTS) and not rest.strip():
        raise InvalidStoreUrl(text, "the path is empty; name a directory or a URL")
    if protocol in (*_S3, *_GCS, *_AZURE):
        _bucket(text, rest)
    elif protocol not in WRITER_SCHEMES and not _fsspec_knows(protocol):
        raise InvalidStoreUrl(
            text,
            f"unknown scheme {protocol!r}; {_WRITERS}, and a read-only view also opens "
            "any other fsspec protocol",
        )
    return protocol, rest


def check_writer_url(url: str | os.PathLike[str]) -> tuple[str, str]:
    """As `check_store_url`, also refusing schemes that only readers can open."""
    protocol, rest = check_store_url(url)
    if protocol not in WRITER_SCHEMES:
        raise InvalidStoreUrl(
            os.fspath(url),
            f"scheme {protocol!r} opens read-only views only (it has no atomic "
            f"create-if-absent); {_WRITERS}",
        )
    return protocol, rest


def _fsspec_knows(protocol: str) -> bool:
    import fsspec

    return protocol in fsspec.available_protocols()


def _bucket(url: str, rest: str) -> tuple[str, str]:
    bucket, _, prefix = rest.partition("/")
    if not bucket:
        raise InvalidStoreUrl(url, "it names no bucket or container")
    return bucket, prefix.strip("/")


def local_medium(path: str | os.PathLike[str]) -> str:
    """``"segments"`` or ``"objects"``: how the log of the local directory
    ``path`` is kept, or is to be kept (see the module docstring)."""
    if has_segments(path):
        return "segments"
    if has_object_log(path) or filesystem_type(path) in NETWORK_FILESYSTEMS:
        return "objects"
    return "segments"


async def open_object_store(
    url: str | os.PathLike[str], storage_options: Mapping[str, Any] | None = None
) -> ObjectStore:
    """The object store at ``url``; close it with ``await store.close()``.

    `InvalidStoreUrl` if ``url`` is not a usable location (see `check_store_url`).
    """
    protocol, rest = check_store_url(url)
    text = os.fspath(url)
    if protocol == _SEGMENTS:
        return SegmentObjectStore(rest)
    if protocol in _LOCAL:
        if local_medium(rest) == "segments":
            return SegmentObjectStore(rest)
        return LocalObjectStore(rest)
    if protocol == "memory":
        return MemoryObjectStore.named(rest.strip("/") or "default")
    if protocol in _S3:
        from durable.store.objects.s3 import S3ObjectStore

        return await S3ObjectStore.open(*_bucket(text, rest), storage_options)
    if protocol in _GCS:
        from durable.store.objects.gcs import GCSObjectStore

        return await GCSObjectStore.open(*_bucket(text, rest), storage_options)
    if protocol in _AZURE:
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
