"""`ObjectStore` over an asynchronous fsspec filesystem.

The base of the S3, GCS and Azure adapters, and the fallback for any other
fsspec protocol. It only ever calls the filesystem's async ``_methods`` on
the running loop (never fsspec's sync wrappers), and translates every
backend error into `durable.errors` here.

A plain fsspec filesystem promises no atomic create-if-absent (fsspec's
generic ``mode="create"`` checks, then writes), so the base claims no
`Guarantee.ATOMIC_CREATE`: writers refuse to open on it, readers may. The
backend adapters add the guarantee where their conditional write gives it.
"""

from __future__ import annotations

import asyncio
import errno
from collections.abc import Iterable
from typing import Any, Self

from durable.errors import (
    DurableError,
    ObjectExists,
    ObjectNotFound,
    ObjectStoreError,
    ObjectStoreTimeout,
    StoreNotFound,
)
from durable.store.objects.base import Guarantee, ObjectStore

__all__ = ["FsspecObjectStore"]


#: The SDKs' errors for credentials that are missing or cannot be loaded (by
#: name: the SDKs are optional): no retry can succeed until someone sets them.
_NO_CREDENTIALS = frozenset(
    {
        "NoCredentialsError",  # botocore (s3fs)
        "PartialCredentialsError",
        "CredentialRetrievalError",
        "DefaultCredentialsError",  # google.auth (gcsfs)
        "ClientAuthenticationError",  # azure.core (adlfs)
    }
)


class FsspecObjectStore(ObjectStore):
    """Objects under ``root`` (``"bucket/prefix"``) of an async fsspec filesystem.

    ``fs`` must have been created with ``asynchronous=True`` inside the
    running loop (or be wrapped in fsspec's ``AsyncFileSystemWrapper``).
    """

    guarantees: frozenset[Guarantee] = frozenset({Guarantee.SHARED})
    #: What the first segment of the root is (``"S3 bucket"``) on a backend
    #: without directories, where a write finding nothing means it is missing
    #: (`StoreNotFound`); None elsewhere.
    location_kind: str | None = None
    #: Pass ``start=0`` to ``_cat_file`` (one GET instead of HEAD + GET on s3fs).
    _cat_start: int | None = None

    def __init__(self, fs: Any, root: str, url: str) -> None:
        self.fs = fs
        self.root = root.strip("/")
        self._url = url

    @classmethod
    def at(cls, fs: Any, scheme: str, bucket: str, prefix: str) -> Self:
        """The store under ``scheme://bucket/prefix`` of ``fs``."""
        root = f"{bucket}/{prefix.strip('/')}".rstrip("/")
        return cls(fs, root, f"{scheme}://{root}")

    @property
    def url(self) -> str:
        """The store's URL."""
        return self._url

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._url!r})"

    def path(self, name: str) -> str:
        """The filesystem path of object ``name``."""
        return f"{self.root}/{name}" if self.root else name

    # ---------------------------------------------------------------- calls

    async def get(self, name: str) -> bytes:
        """The whole object (one request where the backend allows)."""
        path = self.path(name)
        try:
            if self._cat_start is None:
                data = await self.fs._cat_file(path)
            else:
                try:
                    data = await self.fs._cat_file(path, start=self._cat_start)
                except OSError as e:
                    if e.errno != errno.EINVAL:
                        raise
                    # "Range not satisfiable": the object is empty.
                    data = await self.fs._cat_file(path)
        except Exception as e:
            raise self.translate(e, name) from e
        return bytes(data)

    async def put(self, name: str, data: bytes) -> None:
        """Replace the object with one atomic upload."""
        try:
            await self.fs._pipe_file(self.path(name), bytes(data))
        except Exception as e:
            raise self.translate(e, name, writing=True) from e

    async def create(self, name: str, data: bytes) -> None:
        """Create-if-absent through the backend's conditional write."""
        try:
            await self.fs._pipe_file(self.path(name), bytes(data), mode="create")
        except Exception as e:
            raise self.translate(e, name, writing=True) from e

    async def list(self, prefix: str) -> list[str]:
        """Names under ``prefix``, sorted (a server-side prefix listing)."""
        folder, _, stem = prefix.rpartition("/")
        base = self.path(folder) if folder else self.root
        try:
            found = await self.fs._find(base, prefix=stem, withdirs=False)
        except FileNotFoundError:
            return []
        except Exception as e:
            raise self.translate(e, prefix) from e
        cut = len(self.root) + 1 if self.root else 0
        names = (p.strip("/")[cut:] for p in found)
        return sorted(n for n in names if n.startswith(prefix))

    async def delete(self, names: Iterable[str]) -> None:
        """Delete names (missing ones are skipped)."""
        if isinstance(names, str | bytes):
            raise TypeError("delete takes an iterable of names, not one name")
        paths = [self.path(n) for n in names]
        if not paths:
            return
        try:
            await self.fs._rm(paths)
        except FileNotFoundError:
            pass
        except Exception as e:
            raise self.translate(e, paths[0]) from e

    # ----------------------------------------------------------- translation

    def translate(self, e: BaseException, name: str, *, writing: bool = False) -> DurableError:
        """Our error for backend error ``e`` on object ``name``.

        On a bucket store (`location_kind`), a write (``writing``) that
        finds nothing can only be missing its bucket or container: object
        stores have no directories.
        """
        if isinstance(e, DurableError):
            return e
        if isinstance(e, FileExistsError):
            return ObjectExists(name)
        if isinstance(e, FileNotFoundError):
            return self.not_found(name, writing=writing)
        if isinstance(e, asyncio.TimeoutError | TimeoutError):
            return ObjectStoreTimeout(f"{self._url}: {name!r}: timed out ({e})", name=name)
        err = ObjectStoreError(f"{self._url}: {name!r}: {type(e).__name__}: {e}", name=name)
        if (
            isinstance(e, PermissionError)
            or (isinstance(e, OSError) and e.errno in (errno.EACCES, errno.EPERM))
            or _NO_CREDENTIALS.intersection(c.__name__ for c in type(e).__mro__)
        ):
            err.transient = False  # credentials or policy: retrying will not help
        return err

    def not_found(self, name: str, *, writing: bool) -> ObjectNotFound | StoreNotFound:
        """`ObjectNotFound` for ``name``; `StoreNotFound` naming the bucket for
        a write to a bucket store."""
        if not writing or self.location_kind is None:
            return ObjectNotFound(name)
        location = self.root.partition("/")[0]
        return StoreNotFound(self._url, f"{self.location_kind} {location!r}")
