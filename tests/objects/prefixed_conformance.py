"""`PrefixedConformance`: the conformance suite on a `PrefixedObjectStore`.

A subclass overrides `make_inner`; each test's store is ``p003/`` of a new
inner store that also holds neighbours outside the prefix (at the root, in
``p002/``, ``p004/``, and ``p0030`` which shares the prefix's first
characters). After each test the neighbours must be untouched, and the
inner store still open (the prefixed store's `close` does not close it).
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest_asyncio

from durable.store.objects import ObjectStore, PrefixedObjectStore
from durable.testing import ObjectStoreConformance

PREFIX = "p003/"
NEIGHBOURS = sorted(["log/00000000000000000001", "obj", "p002/log/0001", "p0030", "p004/obj"])


class PrefixedConformance(ObjectStoreConformance):
    """The suite on ``p003/`` of `make_inner`'s store."""

    inner: ObjectStore

    async def make_inner(self) -> ObjectStore:
        raise NotImplementedError

    async def make_store(self) -> ObjectStore:
        self.inner = await self.make_inner()
        for name in NEIGHBOURS:
            await self.inner.put(name, name.encode())
        return PrefixedObjectStore(self.inner, PREFIX)

    @pytest_asyncio.fixture
    async def store(self) -> AsyncIterator[ObjectStore]:
        store = await self.make_store()
        try:
            yield store
        finally:
            await store.close()
            try:
                outside = [n for n in await self.inner.list("") if not n.startswith(PREFIX)]
                assert outside == NEIGHBOURS
                for name in NEIGHBOURS:
                    assert await self.inner.get(name) == name.encode()
            finally:
                await self.inner.close()
