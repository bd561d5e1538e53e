"""Blob objects: values too large for the log, each in an object of its own.

A blob is written (durably, checksummed) *before* the transaction that
references it, and deleted only *after* the transaction that drops the
reference is durable (`WriteBatch.release`). A crash can orphan a blob; it
can never leave a live reference without its blob.
"""

from __future__ import annotations

import os

from durable.errors import BlobMissing, ObjectNotFound
from durable.store.framing import Kind, frame, unframe
from durable.store.objects.base import ObjectStore

__all__ = ["BLOB_PREFIX", "BlobStore"]

BLOB_PREFIX = "blobs/"


class BlobStore:
    """Write, read and delete blob objects under ``blobs/``."""

    __slots__ = ("objects",)

    def __init__(self, objects: ObjectStore) -> None:
        self.objects = objects

    async def put(self, data: bytes) -> str:
        """Store ``data`` in a new blob; return its name."""
        name = BLOB_PREFIX + os.urandom(16).hex()
        await self.objects.create(name, frame(Kind.BLOB, data))
        return name

    async def get(self, name: str) -> bytes:
        """The bytes of blob ``name``; `BlobMissing` if it is gone."""
        try:
            data = await self.objects.get(name)
        except ObjectNotFound:
            raise BlobMissing(name) from None
        return unframe(name, data, Kind.BLOB)[1]

    async def delete(self, names: list[str]) -> None:
        """Delete blobs now (only for blobs no committed value references)."""
        await self.objects.delete(names)
