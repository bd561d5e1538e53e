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

Optional, with defaults here: `ObjectStore.try_lock` (an exclusive lock
the backend releases when its holder's process dies; None where the backend
has none), `ObjectStore.is_local` (whether a request is cheap enough to
poll every few milliseconds) and `ObjectStore.claim_log` (a log medium's
writer lock, taken when a `LogWriter` opens).
"""

from __future__ import annotations

import enum
from abc import ABC, abstractmethod
from collections.abc import Iterable

__all__ = ["Guarantee", "ObjectLock", "ObjectStore"]


class Guarantee(enum.Enum):
    """Atomic primitives a backend may provide."""

    #: `ObjectStore.create` is atomic against concurrent creators.
    ATOMIC_CREATE = "atomic create-if-absent"
    #: The data survives power loss once a write returns.
    DURABLE_WRITE = "durable writes"
    #: Several processes see the same objects.
    SHARED = "shared between processes"
    #: `ObjectStore.try_lock` gives locks that exclude every other holder
    #: and are released when the holding process dies (kill -9 included).
    PROCESS_LOCK = "locks released when their process dies"


class ObjectLock(ABC):
    """An exclusive lock on a name of a store, from `ObjectStore.try_lock`.

    Held until `release` (or the store's `close`), or until the process
    dies, whatever kills it: the backend then releases it at once.
    """

    @property
    @abstractmethod
    def name(self) -> str:
        """The name locked."""

    @property
    @abstractmethod
    def held(self) -> bool:
        """True until `release` (or the store's close)."""

    @abstractmethod
    def release(self) -> None:
        """Release the lock now; a no-op once released."""


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

    def create_now(self, name: str, data: bytes) -> bool:
        """`create`, made now on the calling thread when this store can do so
        without waiting (a quick local append); False, having done nothing,
        when it cannot. Raises as `create` does. The default cannot."""
        return False

    @abstractmethod
    async def list(self, prefix: str) -> list[str]:
        """Every name that starts with ``prefix``, sorted ascending."""

    @abstractmethod
    async def delete(self, names: Iterable[str]) -> None:
        """Delete ``names``; names already absent are skipped."""

    @property
    def is_local(self) -> bool:
        """True when a request costs no network round trip and no money (a
        local directory, process memory): pollers may then poll every few
        milliseconds; elsewhere they back off (`durable.store.log.follow`)."""
        return False

    async def try_lock(self, name: str) -> ObjectLock | None:
        """Take the exclusive lock ``name`` without waiting.

        The lock, or None: held by another holder, or (the default) the
        backend has no such locks; backends that have them list
        `Guarantee.PROCESS_LOCK` in `guarantees`. A lock is released by
        `ObjectLock.release`, by `close`, and by the death of the process
        that holds it.
        """
        return None

    async def claim_log(self, prefix: str = "", *, takeover: bool = False) -> ObjectLock | None:
        """Prepare to be the one writer of the log below ``prefix`` (a
        partition's, e.g. ``"p003/"``); called by `LogWriter.open` before it
        loads, and released by `LogWriter.close`.

        The default does nothing and returns None: the object log fences by
        create-if-absent alone. A medium that keeps the log its own way
        (`durable.store.objects.segments`) locks and recovers it here, and
        raises `Fenced` (`LogLocked`) while another live writer holds it,
        unless ``takeover`` (an owner that judged the holder gone takes the
        log over; the holder is then fenced by the log itself).
        """
        return None

    async def close(self) -> None:  # noqa: B027 - optional hook
        """Release connections and threads; the default holds none."""

    async def __aenter__(self) -> ObjectStore:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
