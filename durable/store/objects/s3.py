"""S3 through s3fs: create-if-absent with ``If-None-Match: *``.

The filesystem is created inside the running loop (``asynchronous=True``,
``skip_instance_cache=True``), with the listings cache off, one-request
reads (``_cat_file(start=0)``), no ``Expect: 100-continue`` round trip, and
a connection pool sized for concurrent blob and log writes.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from typing import Any

from durable.store.objects.base import Guarantee
from durable.store.objects.fsspec_store import FsspecObjectStore

__all__ = ["S3ObjectStore"]

#: Connections per store: concurrent blob writes plus the log flush.
DEFAULT_POOL = 64


class S3ObjectStore(FsspecObjectStore):
    """Objects under ``s3://bucket/prefix``."""

    guarantees = frozenset({Guarantee.ATOMIC_CREATE, Guarantee.DURABLE_WRITE, Guarantee.SHARED})
    location_kind = "S3 bucket"
    _cat_start = 0

    @classmethod
    async def open(
        cls, bucket: str, prefix: str = "", storage_options: Mapping[str, Any] | None = None
    ) -> S3ObjectStore:
        """Connect to ``bucket`` (credentials from ``storage_options`` or the environment)."""
        import botocore.handlers
        import s3fs

        opts: dict[str, Any] = dict(storage_options or {})
        config = dict(opts.pop("config_kwargs", {}) or {})
        config.setdefault("max_pool_connections", DEFAULT_POOL)
        opts.setdefault("use_listings_cache", False)
        fs = s3fs.S3FileSystem(
            asynchronous=True, skip_instance_cache=True, config_kwargs=config, **opts
        )
        client = await fs.set_session()
        # botocore asks for "100-continue" before every PUT body: 2 RTTs per PUT.
        client.meta.events.unregister("before-call.s3", botocore.handlers.add_expect_header)
        return cls.at(fs, "s3", bucket, prefix)

    async def close(self) -> None:
        """Close the client's connection pool."""
        client = getattr(self.fs, "_s3", None)
        if client is not None:
            with contextlib.suppress(Exception):
                await client.close()
