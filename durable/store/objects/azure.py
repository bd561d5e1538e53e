"""Azure Blob Storage through adlfs: create-if-absent with ``If-None-Match: *``.

adlfs uploads with ``overwrite=False`` for ``mode="create"``, which Azure
checks atomically. Azure has no suffix ranges, so reads fetch the whole
blob; the SDK's own errors are translated here too.
"""

from __future__ import annotations

import contextlib
import weakref
from collections.abc import Mapping
from typing import Any

from durable.errors import DurableError, ObjectExists
from durable.store.objects.base import Guarantee
from durable.store.objects.fsspec_store import FsspecObjectStore

__all__ = ["AzureObjectStore"]


class AzureObjectStore(FsspecObjectStore):
    """Objects under ``az://container/prefix``."""

    guarantees = frozenset({Guarantee.ATOMIC_CREATE, Guarantee.DURABLE_WRITE, Guarantee.SHARED})
    location_kind = "Azure container"

    @classmethod
    async def open(
        cls, container: str, prefix: str = "", storage_options: Mapping[str, Any] | None = None
    ) -> AzureObjectStore:
        """Connect to ``container`` (credentials from ``storage_options`` or the environment)."""
        import adlfs

        opts: dict[str, Any] = dict(storage_options or {})
        fs = adlfs.AzureBlobFileSystem(asynchronous=True, skip_instance_cache=True, **opts)
        return cls.at(fs, "az", container, prefix)

    def translate(self, e: BaseException, name: str, *, writing: bool = False) -> DurableError:
        """Also map the Azure SDK's own errors."""
        from azure.core.exceptions import (
            ResourceExistsError,
            ResourceModifiedError,
            ResourceNotFoundError,
        )

        if isinstance(e, ResourceExistsError | ResourceModifiedError):
            return ObjectExists(name)
        if isinstance(e, ResourceNotFoundError):
            return self.not_found(name, writing=writing)
        return super().translate(e, name, writing=writing)

    async def close(self) -> None:
        """Close the service client (and drop adlfs's exit-time closer of it)."""
        client = getattr(self.fs, "service_client", None)
        if client is not None:
            with contextlib.suppress(Exception):
                await client.close()
        # adlfs registers a weakref.finalize that closes the client through
        # fsspec's sync() at interpreter exit, which fails for an asynchronous
        # instance ("Loop is not running"). It is closed now: detach it.
        registry = getattr(weakref.finalize, "_registry", {})
        for finalizer in list(registry):
            found = finalizer.peek()
            if found is not None and found[0] is self.fs:
                finalizer.detach()
