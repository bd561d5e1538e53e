"""Google Cloud Storage through gcsfs: create-if-absent with ``ifGenerationMatch=0``.

gcsfs sends small uploads (< 50 MiB, which covers log objects and blobs)
as multipart uploads carrying the precondition. ``GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT``
is set to ``false`` before gcsfs is first imported (unless the application
set it), which avoids a gRPC probe per bucket; every request has a timeout.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Mapping
from typing import Any

from durable.store.objects.base import Guarantee
from durable.store.objects.fsspec_store import FsspecObjectStore

__all__ = ["GCSObjectStore"]

#: Seconds before a GCS request is abandoned (gcsfs has none by default).
DEFAULT_TIMEOUT = 60.0


class GCSObjectStore(FsspecObjectStore):
    """Objects under ``gs://bucket/prefix``."""

    guarantees = frozenset({Guarantee.ATOMIC_CREATE, Guarantee.DURABLE_WRITE, Guarantee.SHARED})
    location_kind = "GCS bucket"

    @classmethod
    async def open(
        cls, bucket: str, prefix: str = "", storage_options: Mapping[str, Any] | None = None
    ) -> GCSObjectStore:
        """Connect to ``bucket`` (credentials from ``storage_options`` or the environment)."""
        os.environ.setdefault("GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT", "false")
        import gcsfs

        opts: dict[str, Any] = dict(storage_options or {})
        opts.setdefault("requests_timeout", DEFAULT_TIMEOUT)
        opts.setdefault("use_listings_cache", False)
        fs = gcsfs.GCSFileSystem(asynchronous=True, skip_instance_cache=True, **opts)
        return cls.at(fs, "gs", bucket, prefix)

    async def close(self) -> None:
        """Close the HTTP session."""
        session = getattr(self.fs, "_session", None)
        if session is not None:
            with contextlib.suppress(Exception):
                await session.close()
