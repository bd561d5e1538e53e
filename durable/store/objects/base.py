"""The object-store interface: the one seam between `durable` and a backend.

Everything above this package sees `ObjectStore` and the errors of
`durable.errors`; only the implementations in this package talk to the
filesystem, to fsspec or to a cloud SDK, and they translate every backend
error into our tree at this seam.

Names are relative, ``/``-separated paths below the store's root
(``"log/00000000000000000042"``). Every implementation must give:

- `get`: the whole object, or `ObjectNotFound`.
- `put`: an atomic replace; readers see the old bytes or the new, never a
  mix; durable when the call returns.
- `create`: create-if-absent, atomic against every other writer of the same
  name (in this process and in others, where the backend is shared); the
  loser gets `ObjectExists` and the stored bytes stay the winner's.
- `list`: every name under a prefix, sorted byte-wise ascending.
- `delete`: remove names; missing names are not an error.
"""

from __future__ import annotations

import enum
from abc import ABC, abstractmethod
from collections.abc import Iterable

__all__ = ["Guarantee", "ObjectStore"]


class Guarantee(enum.Enum):
    """Atomic primitives a backend may provide."""

    #: `ObjectStore.create` is atomic against concurrent creators.
    ATOMIC_CREATE = "atomic create-if-absent"
    #: The data survives power loss once a write returns.
    DURABLE_WRITE = "durable writes"
    #: Several processes see the same objects.
    SHARED = "shared between processes"


class ObjectStore(ABC):
    """A small async interface over one bucket prefix or directory."""

    #: The primitives this backend provides; a writer needs ATOMIC_CREATE.
    guarantees: frozenset[Guarantee] = frozenset()

    @property
    @abstractmethod
    def url(self) -> str:
        """Where this store points, for messages and logs."""

    @abstractmethod
    async def get(self, name: str) -> bytes:
        """The whole object ``name``; `ObjectNotFound` if absent."""

    @abstractmethod
    async def put(self, name: str, data: bytes) -> None:
        """Write ``name`` atomically, replacing any object of that name."""

    @abstractmethod
    async def create(self, name: str, data: bytes) -> None:
        """Write ``name`` only if absent; `ObjectExists` if it is taken."""

    @abstractmethod
    async def list(self, prefix: str) -> list[str]:
        """Every name that starts with ``prefix``, sorted ascending."""

    @abstractmethod
    async def delete(self, names: Iterable[str]) -> None:
        """Delete ``names``; names already absent are skipped."""

    async def close(self) -> None:  # noqa: B027 - optional hook
        """Release connections and threads; the default holds none."""

    async def __aenter__(self) -> ObjectStore:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
