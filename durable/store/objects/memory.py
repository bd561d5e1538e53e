"""`MemoryObjectStore`: objects in a dict, for tests and examples.

Each store owns its objects (unlike fsspec's process-global
``MemoryFileSystem``), guarded by a `threading.Lock`, so `create` is atomic
even when several threads and event loops share the store. Nothing survives
the process.

`MemoryObjectStore.named` opens a handle on a store shared by name within
the process, for a test that opens a writer and a reader on "the same
bucket"; `MemoryObjectStore.forget` drops it.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterable
from typing import ClassVar

from durable.errors import ObjectExists, ObjectNotFound
from durable.store.objects.base import Guarantee, ObjectStore

__all__ = ["MemoryObjectStore"]


class _Space:
    """The objects of one memory store, shared by its handles."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.objects: dict[str, bytes] = {}


class MemoryObjectStore(ObjectStore):
    """An `ObjectStore` in process memory; `create` is atomic across threads.

    ``MemoryObjectStore()`` is a new, empty, private store. Every call
    yields to the event loop once, like a real backend would, so tests see
    the interleavings a real store allows.
    """

    guarantees = frozenset({Guarantee.ATOMIC_CREATE})

    _named: ClassVar[dict[str, _Space]] = {}
    _named_lock: ClassVar[threading.Lock] = threading.Lock()

    def __init__(self) -> None:
        self._space = _Space()
        self._url = f"memory://{id(self._space):x}"

    @classmethod
    def named(cls, name: str) -> MemoryObjectStore:
        """A handle on the process-wide memory store ``name``, made if new.

        Every handle of one name sees the same objects. Call `forget` when
        done, or the objects live as long as the process.
        """
        with cls._named_lock:
            space = cls._named.setdefault(name, _Space())
        store = cls()
        store._space = space
        store._url = f"memory://{name}"
        return store

    @classmethod
    def forget(cls, name: str) -> None:
        """Drop the named store ``name``; open handles keep their objects."""
        with cls._named_lock:
            cls._named.pop(name, None)

    @property
    def url(self) -> str:
        """``memory://<name>`` for a named store, ``memory://<id>`` otherwise."""
        return self._url

    @property
    def is_local(self) -> bool:
        """True: a request costs a turn of the event loop."""
        return True

    def __repr__(self) -> str:
        return f"MemoryObjectStore(url={self._url!r})"

    async def get(self, name: str) -> bytes:
        """The whole object ``name``; `ObjectNotFound` if absent."""
        await asyncio.sleep(0)
        with self._space.lock:
            data = self._space.objects.get(name)
        if data is None:
            raise ObjectNotFound(name)
        return data  # immutable: bytes are stored as `bytes`, never a buffer

    async def put(self, name: str, data: bytes) -> None:
        """Store a copy of ``data`` as ``name``, replacing any object."""
        copy = bytes(data)
        await asyncio.sleep(0)
        with self._space.lock:
            self._space.objects[name] = copy

    async def create(self, name: str, data: bytes) -> None:
        """Store a copy of ``data`` as ``name`` if absent; else `ObjectExists`."""
        copy = bytes(data)
        await asyncio.sleep(0)
        with self._space.lock:
            if name in self._space.objects:
                raise ObjectExists(name)
            self._space.objects[name] = copy

    async def list(self, prefix: str) -> list[str]:
        """Every name that starts with ``prefix``, sorted ascending."""
        await asyncio.sleep(0)
        with self._space.lock:
            found = [key for key in self._space.objects if key.startswith(prefix)]
        found.sort()
        return found

    async def delete(self, names: Iterable[str]) -> None:
        """Delete ``names``; names already absent are skipped."""
        if isinstance(names, str):
            raise TypeError(f"delete takes an iterable of names, not the string {names!r}")
        doomed = [*names]
        await asyncio.sleep(0)
        with self._space.lock:
            for name in doomed:
                self._space.objects.pop(name, None)
