"""`ObjectStoreConformance`: the tests every `ObjectStore` backend must pass.

Subclass it in a test module, name the subclass ``Test...`` and override
`ObjectStoreConformance.make_store`::

    class TestMyStore(ObjectStoreConformance):
        async def make_store(self) -> ObjectStore:
            return MyStore(bucket, prefix=f"conformance-{uuid.uuid4().hex}")

Each test gets a new store from `make_store`, which must be empty (use a
unique prefix on a shared bucket), and closes it afterwards. A store that
needs pytest fixtures can take them in an autouse fixture that saves them
on ``self``, which runs before the store is made::

    @pytest.fixture(autouse=True)
    def _root(self, tmp_path: Path) -> None:
        self.root = tmp_path

Needs pytest and pytest-asyncio; the tests are marked ``asyncio`` so they
also run under pytest-asyncio's strict mode.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
import pytest_asyncio

from durable.errors import ObjectExists, ObjectNotFound, ObjectStoreError
from durable.store.objects.base import Guarantee, ObjectStore

__all__ = ["ObjectStoreConformance"]

_MIB = 1 << 20


def _payload(size: int, seed: int = 0) -> bytes:
    """``size`` bytes that differ per ``seed`` and are not all one byte value."""
    pattern = bytes((seed * 7 + i) % 251 for i in range(251))
    return (pattern * (size // len(pattern) + 1))[:size]


class ObjectStoreConformance:
    """The contract of `ObjectStore`, as tests; subclass and override `make_store`."""

    pytestmark = pytest.mark.asyncio

    async def make_store(self) -> ObjectStore:
        """A new, empty store to test; every subclass overrides this."""
        raise NotImplementedError(f"{type(self).__name__} must override make_store()")

    @pytest_asyncio.fixture
    async def store(self) -> AsyncIterator[ObjectStore]:
        """The store under test, from `make_store`, closed after the test."""
        store = await self.make_store()
        try:
            yield store
        finally:
            await store.close()

    # ------------------------------------------------------------ metadata

    async def test_describes_itself(self, store: ObjectStore) -> None:
        """`url` is a non-empty string and `guarantees` a set of `Guarantee`."""
        assert isinstance(store.url, str)
        assert store.url
        assert isinstance(store.guarantees, frozenset)
        assert all(isinstance(g, Guarantee) for g in store.guarantees)

    async def test_try_lock_is_exclusive_where_the_backend_has_locks(
        self, store: ObjectStore
    ) -> None:
        """`try_lock` gives None on a backend without `Guarantee.PROCESS_LOCK`;
        with it, a held lock refuses a second try until it is released."""
        lock = await store.try_lock("locks/one")
        if Guarantee.PROCESS_LOCK not in store.guarantees:
            assert lock is None
            return
        assert lock is not None
        assert lock.held
        assert await store.try_lock("locks/one") is None
        other = await store.try_lock("locks/two")
        assert other is not None
        lock.release()
        assert not lock.held
        again = await store.try_lock("locks/one")
        assert again is not None
        again.release()
        other.release()

    # ----------------------------------------------------------------- get

    async def test_get_missing_raises_not_found(self, store: ObjectStore) -> None:
        """`get` of an absent name raises `ObjectNotFound` naming it."""
        with pytest.raises(ObjectNotFound) as info:
            await store.get("missing/object")
        assert info.value.name == "missing/object"
        assert isinstance(info.value, LookupError)
        assert isinstance(info.value, ObjectStoreError)

    @pytest.mark.parametrize("size", [0, 1, 1000, _MIB])
    async def test_put_get_round_trip(self, store: ObjectStore, size: int) -> None:
        """`put` then `get` returns the same bytes, empty and 1 MiB included."""
        data = _payload(size)
        await store.put("obj", data)
        got = await store.get("obj")
        assert isinstance(got, bytes)
        assert got == data

    async def test_put_nested_name(self, store: ObjectStore) -> None:
        """Names with several ``/``-separated segments work."""
        await store.put("a/b/c", b"deep")
        assert await store.get("a/b/c") == b"deep"
        with pytest.raises(ObjectNotFound):
            await store.get("a/b")

    async def test_put_replaces(self, store: ObjectStore) -> None:
        """A second `put` replaces the object, also with shorter bytes."""
        await store.put("obj", _payload(5000, 1))
        await store.put("obj", b"short")
        assert await store.get("obj") == b"short"
        assert await store.list("obj") == ["obj"]

    async def test_concurrent_puts_leave_one_whole_value(self, store: ObjectStore) -> None:
        """Concurrent `put` calls leave exactly one of the values, never a mix."""
        values = [_payload(64 * 1024, seed) for seed in range(8)]
        await asyncio.gather(*(store.put("obj", v) for v in values))
        assert await store.get("obj") in values

    # -------------------------------------------------------------- create

    async def test_create_absent(self, store: ObjectStore) -> None:
        """`create` of an absent name stores the bytes."""
        await store.create("log/0001", b"first")
        assert await store.get("log/0001") == b"first"

    async def test_create_empty(self, store: ObjectStore) -> None:
        """`create` works with empty bytes, and an empty object still counts as taken."""
        await store.create("empty", b"")
        assert await store.get("empty") == b""
        with pytest.raises(ObjectExists):
            await store.create("empty", b"")

    async def test_create_taken_raises_and_keeps_first(self, store: ObjectStore) -> None:
        """`create` of a taken name raises `ObjectExists`; the first bytes stay."""
        await store.create("log/0001", b"first")
        with pytest.raises(ObjectExists) as info:
            await store.create("log/0001", b"second")
        assert info.value.name == "log/0001"
        assert isinstance(info.value, ObjectStoreError)
        assert await store.get("log/0001") == b"first"

    async def test_create_over_put_raises(self, store: ObjectStore) -> None:
        """A name written by `put` is taken for `create`."""
        await store.put("obj", b"put")
        with pytest.raises(ObjectExists):
            await store.create("obj", b"create")
        assert await store.get("obj") == b"put"

    async def test_create_after_delete(self, store: ObjectStore) -> None:
        """A deleted name can be created again."""
        await store.create("obj", b"one")
        await store.delete(["obj"])
        await store.create("obj", b"two")
        assert await store.get("obj") == b"two"

    async def test_concurrent_creates_have_one_winner(self, store: ObjectStore) -> None:
        """Of 16 concurrent `create` calls on one name, exactly one wins."""
        for round_ in range(5):
            name = f"race/{round_:04d}"
            payloads = [f"racer {i} round {round_}".encode() for i in range(16)]
            results = await asyncio.gather(
                *(store.create(name, p) for p in payloads), return_exceptions=True
            )
            winners = [i for i, r in enumerate(results) if r is None]
            assert len(winners) == 1, results
            losers = [r for r in results if r is not None]
            assert all(isinstance(r, ObjectExists) for r in losers), losers
            assert await store.get(name) == payloads[winners[0]]

    # ---------------------------------------------------------------- list

    async def test_list_empty(self, store: ObjectStore) -> None:
        """An empty store lists nothing, for any prefix."""
        assert await store.list("") == []
        assert await store.list("log/") == []
        assert await store.list("nothing") == []

    async def test_list_by_partial_prefix(self, store: ObjectStore) -> None:
        """A prefix need not end at a ``/``; other prefixes are excluded."""
        names = ["log/0001", "log/0002", "log/0010", "log/1000", "logs/x", "lo", "other/0001"]
        for name in names:
            await store.put(name, name.encode())
        assert await store.list("log/000") == ["log/0001", "log/0002"]
        assert await store.list("log/00") == ["log/0001", "log/0002", "log/0010"]
        assert await store.list("log/") == ["log/0001", "log/0002", "log/0010", "log/1000"]
        assert await store.list("log") == [
            "log/0001",
            "log/0002",
            "log/0010",
            "log/1000",
            "logs/x",
        ]
        assert await store.list("lo") == ["lo", *(await store.list("log"))]
        assert await store.list("log/0001") == ["log/0001"]
        assert await store.list("log/2") == []
        assert await store.list("") == sorted(names)

    async def test_list_is_sorted_bytewise(self, store: ObjectStore) -> None:
        """`list` sorts full names byte-wise, whatever the nesting or write order."""
        names = ["k0", "k/1", "k-1", "k/0/z", "k/0/a", "k/10", "k/9"]
        for name in names:
            await store.put(name, b"x")
        expected = ["k-1", "k/0/a", "k/0/z", "k/1", "k/10", "k/9", "k0"]
        assert await store.list("k") == expected
        assert await store.list("") == expected

    async def test_list_nested(self, store: ObjectStore) -> None:
        """Objects in nested "directories" are listed by their full names."""
        for name in ["a/b/c", "a/b/d/e", "a/x", "b"]:
            await store.put(name, b"x")
        assert await store.list("a/") == ["a/b/c", "a/b/d/e", "a/x"]
        assert await store.list("a/b/") == ["a/b/c", "a/b/d/e"]
        assert await store.list("a/b/d") == ["a/b/d/e"]
        assert await store.list("a/b/c") == ["a/b/c"]

    # -------------------------------------------------------------- delete

    async def test_delete_missing_is_ok(self, store: ObjectStore) -> None:
        """Deleting absent names, or none, is not an error."""
        await store.delete(["missing", "also/missing"])
        await store.delete([])
        await store.put("obj", b"x")
        await store.delete(["obj"])
        await store.delete(["obj"])
        assert await store.list("") == []

    async def test_delete_many(self, store: ObjectStore) -> None:
        """One `delete` removes many names, from any iterable; others stay."""
        names = [f"d/{i:04d}" for i in range(40)]
        for name in names:
            await store.put(name, name.encode())
        await store.delete(n for n in names if int(n[2:]) % 2 == 0)
        remaining = [n for n in names if int(n[2:]) % 2 == 1]
        assert await store.list("d/") == remaining
        with pytest.raises(ObjectNotFound):
            await store.get("d/0000")
        assert await store.get("d/0001") == b"d/0001"
        await store.delete([*remaining, "d/missing"])
        assert await store.list("") == []
