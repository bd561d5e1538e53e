"""`PrefixedObjectStore`: the store below a prefix of another store.

A partitioned store keeps each partition's ordinary store below ``p000/``,
``p001/``, ... of one URL; wrapping the URL's store in a
`PrefixedObjectStore` for ``"p003/"`` gives partition 3's store, which the
log, the queue and the inbox then use with unchanged code.

Names are joined: ``get("log/0001")`` reads ``"p003/log/0001"`` of the inner
store, and `list` strips the prefix again. `ObjectNotFound` and
`ObjectExists` name the object as the caller did (without the prefix);
other errors are the inner store's. `try_lock` locks the prefixed name,
and `claim_log` claims the log below the joined prefix.
`guarantees` and `is_local` are the inner store's; `url` is the inner
store's URL joined with the prefix. The wrapper owns nothing of the inner
store: `close` releases the locks taken through it and nothing else (the
inner store is closed by whoever opened it), so any number of prefixed
stores can share one inner store and its connections.
"""

from __future__ import annotations

from collections.abc import Iterable

from durable.errors import InvalidStoreUrl, ObjectExists, ObjectNotFound
from durable.store.objects.base import ObjectLock, ObjectStore

__all__ = ["PrefixedObjectStore"]


class _PrefixedLock(ObjectLock):
    """A lock of the inner store, named as the prefixed store's caller named it."""

    def __init__(self, inner: ObjectLock, name: str) -> None:
        self._inner = inner
        self._name = name

    @property
    def name(self) -> str:
        """The name locked, without the prefix."""
        return self._name

    @property
    def held(self) -> bool:
        """True until `release` (or the prefixed store's close)."""
        return self._inner.held

    def release(self) -> None:
        """Release the lock now; a no-op once released."""
        self._inner.release()


def _check_prefix(url: str, prefix: str) -> None:
    segments = prefix.split("/")
    if (
        not prefix.endswith("/")
        or any(s in ("", ".", "..") for s in segments[:-1])
        or "\x00" in prefix
    ):
        raise InvalidStoreUrl(
            f"{url.rstrip('/')}/{prefix}",
            f"the prefix {prefix!r} must be one or more non-empty '/'-separated segments "
            "(not '.' or '..') ending with '/', e.g. 'p000/'",
        )


class PrefixedObjectStore(ObjectStore):
    """The objects of ``inner`` below ``prefix`` (e.g. ``"p003/"``), as a store.

    ``prefix`` is one or more ``/``-separated segments ending with ``/``;
    anything else raises `InvalidStoreUrl` (nothing is opened). `close`
    does not close ``inner``.
    """

    def __init__(self, inner: ObjectStore, prefix: str) -> None:
        _check_prefix(inner.url, prefix)
        self.inner = inner
        #: The prefix every name is joined to.
        self.prefix = prefix
        self.guarantees = inner.guarantees
        self._url = f"{inner.url.rstrip('/')}/{prefix.rstrip('/')}"
        self._locks: list[ObjectLock] = []

    @property
    def url(self) -> str:
        """The inner store's URL joined with the prefix."""
        return self._url

    @property
    def is_local(self) -> bool:
        """The inner store's."""
        return self.inner.is_local

    def __repr__(self) -> str:
        return f"PrefixedObjectStore({self.inner!r}, {self.prefix!r})"

    async def get(self, name: str) -> bytes:
        """The inner store's object ``prefix + name``."""
        try:
            return await self.inner.get(self.prefix + name)
        except ObjectNotFound:
            raise ObjectNotFound(name) from None

    async def put(self, name: str, data: bytes) -> None:
        """Replace the inner store's object ``prefix + name``."""
        await self.inner.put(self.prefix + name, data)

    async def create(self, name: str, data: bytes) -> None:
        """Create the inner store's object ``prefix + name`` if absent."""
        try:
            await self.inner.create(self.prefix + name, data)
        except ObjectExists:
            raise ObjectExists(name) from None

    def create_now(self, name: str, data: bytes) -> bool:
        """The inner store's `create_now` of ``prefix + name``."""
        try:
            return self.inner.create_now(self.prefix + name, data)
        except ObjectExists:
            raise ObjectExists(name) from None

    async def list(self, prefix: str) -> list[str]:
        """Every name below this store's prefix that starts with ``prefix``."""
        cut = len(self.prefix)
        return [name[cut:] for name in await self.inner.list(self.prefix + prefix)]

    async def delete(self, names: Iterable[str]) -> None:
        """Delete the inner store's objects ``prefix + name``."""
        await self.inner.delete([self.prefix + name for name in names])

    async def try_lock(self, name: str) -> ObjectLock | None:
        """The inner store's lock of ``prefix + name``."""
        lock = await self.inner.try_lock(self.prefix + name)
        if lock is None:
            return None
        self._locks = [held for held in self._locks if held.held]
        self._locks.append(lock)
        return _PrefixedLock(lock, name)

    async def claim_log(self, prefix: str = "", *, takeover: bool = False) -> ObjectLock | None:
        """The inner store's claim of the log below ``prefix`` joined to this
        store's (a partition's log on the segment medium)."""
        claim = await self.inner.claim_log(self.prefix + prefix, takeover=takeover)
        if claim is not None:
            self._locks = [held for held in self._locks if held.held]
            self._locks.append(claim)
        return claim

    async def close(self) -> None:
        """Release the locks taken through this store; the inner store stays open."""
        locks, self._locks = self._locks, []
        for lock in locks:
            lock.release()
