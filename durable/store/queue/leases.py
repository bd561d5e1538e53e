"""Leases: who holds a claimed job, until when; kept in process memory only.

A claim's lease is never stored: the claimed record is durable, its expiry
and claim token live in the `LeaseRegistry`. Hence a claimed record found at
open belongs to a dead (or fenced) process and is requeued at once.

The registry is touched only from the event loop's thread, between awaits,
so each method is atomic with respect to the queue's transactions.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import itertools
import secrets
from collections.abc import Callable
from dataclasses import dataclass, field

from durable.errors import CancelRequested, ClaimLost
from durable.store.clock import Clock
from durable.store.queue.options import LEASE_MARGIN, to_ms
from durable.store.queue.records import JobRecord

__all__ = ["CancelToken", "Claim", "LeaseHandle", "LeaseRegistry", "new_claim_token"]


def new_claim_token() -> int:
    """A random 64-bit claim token."""
    return secrets.randbits(64)


def _nothing() -> None:
    """Unregisters a callback that already ran."""


class CancelToken:
    """Fired once when a job is asked to cancel; never un-fired.

    A `child` token fires with its parent, but firing the child leaves the
    parent alone: hand a child to code that may cancel its own work (a
    step of the workflow runtime), and keep the parent to learn whether the
    cancellation came from outside.
    """

    __slots__ = ("_callbacks", "_children", "_event")

    def __init__(self) -> None:
        self._event = asyncio.Event()
        self._children: list[CancelToken] = []
        self._callbacks: list[Callable[[], None]] = []

    def fire(self) -> None:
        """Request cancellation (idempotent); fires every child too."""
        self._event.set()
        children, self._children = self._children, []
        callbacks, self._callbacks = self._callbacks, []
        for callback in callbacks:
            callback()
        for child in children:
            child.fire()

    def on_fire(self, callback: Callable[[], None]) -> Callable[[], None]:
        """Call ``callback`` (no arguments) once, when fired: at once if it
        already was. Returns a function that unregisters it (a no-op once it
        ran): a watcher with no task of its own."""
        if self.is_cancelled():
            callback()
            return _nothing
        self._callbacks.append(callback)

        def unregister() -> None:
            with contextlib.suppress(ValueError):
                self._callbacks.remove(callback)

        return unregister

    def child(self) -> CancelToken:
        """A new token fired when this one is (at once if it already was);
        firing it does not fire this one."""
        token = CancelToken()
        if self.is_cancelled():
            token.fire()
        else:
            self._children.append(token)
        return token

    def is_cancelled(self) -> bool:
        """True once fired."""
        return self._event.is_set()

    async def wait(self) -> None:
        """Return once fired."""
        await self._event.wait()

    def __repr__(self) -> str:
        return f"CancelToken(cancelled={self.is_cancelled()})"


@dataclass(slots=True)
class _Lease:
    expires_at: int
    token: int
    cancel: CancelToken
    reaping: bool = False


Key = tuple[str, str]  # (queue, id)


class LeaseRegistry:
    """In-memory leases ``(queue, id) -> (expires_at, token, reaping flag)``.

    Also remembers the cancellation token of each job's latest claim, so a
    cancel can fire it (`cancel_token_of`) even after its lease was reaped.
    """

    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self._leases: dict[Key, _Lease] = {}
        self._heap: list[tuple[int, int, Key, int]] = []  # lazy: stale items skipped
        self._seq = itertools.count()
        self._marked: set[Key] = set()
        self._tokens: dict[str, CancelToken] = {}

    def __len__(self) -> int:
        return len(self._leases)

    def insert(self, queue: str, id: str, expires_at: int, token: int, cancel: CancelToken) -> None:
        """Register a new claim's lease (before its commit)."""
        key = (queue, id)
        self._leases[key] = _Lease(expires_at, token, cancel)
        self._marked.discard(key)
        self._tokens[id] = cancel
        heapq.heappush(self._heap, (expires_at, next(self._seq), key, token))

    def holds(self, queue: str, id: str, token: int) -> bool:
        """True if the lease of ``(queue, id)`` still belongs to ``token``."""
        lease = self._leases.get((queue, id))
        return lease is not None and lease.token == token

    def expiry(self, queue: str, id: str) -> int | None:
        """The current expiry of ``(queue, id)``'s lease, or None."""
        lease = self._leases.get((queue, id))
        return None if lease is None else lease.expires_at

    def remove(self, queue: str, id: str, token: int) -> None:
        """Drop the lease if ``token`` still holds it."""
        key = (queue, id)
        lease = self._leases.get(key)
        if lease is not None and lease.token == token:
            del self._leases[key]
            self._marked.discard(key)

    def forget_job(self, id: str) -> CancelToken | None:
        """Forget the job's cancellation token (the job has left the queue)."""
        return self._tokens.pop(id, None)

    def cancel_token_of(self, id: str) -> CancelToken | None:
        """The cancellation token of the job's latest claim in this process."""
        return self._tokens.get(id)

    def renew(
        self,
        queue: str,
        id: str,
        token: int,
        cancel: CancelToken,
        new_expiry: int,
        *,
        only_extend: bool = False,
    ) -> int:
        """Set the expiry; `CancelRequested` / `ClaimLost` as in semantics 1.5.

        With ``only_extend`` a lease already ending at or after ``new_expiry``
        is left alone. Returns the expiry in force.
        """
        if cancel.is_cancelled():
            raise CancelRequested(id)
        lease = self._leases.get((queue, id))
        if lease is None or lease.token != token or lease.reaping:
            raise ClaimLost(id)
        if only_extend and lease.expires_at >= new_expiry:
            return lease.expires_at
        if new_expiry != lease.expires_at:
            lease.expires_at = new_expiry
            heapq.heappush(self._heap, (new_expiry, next(self._seq), (queue, id), token))
        return new_expiry

    def take_expired(self, now: int) -> list[tuple[Key, int]]:
        """Mark and return every lease expired at ``now``, soonest first.

        Leases left marked by an earlier pass (a per-job error) come too.
        """
        out: list[tuple[Key, int]] = []
        for key in sorted(self._marked, key=lambda k: self._leases[k].expires_at):
            out.append((key, self._leases[key].token))
        heap = self._heap
        while heap and heap[0][0] <= now:
            expires_at, _, key, token = heapq.heappop(heap)
            lease = self._leases.get(key)
            if (
                lease is None
                or lease.token != token
                or lease.expires_at != expires_at
                or lease.reaping
            ):
                continue  # stale: settled, renewed, or already marked
            lease.reaping = True
            self._marked.add(key)
            out.append((key, token))
        return out

    def clear(self) -> None:
        """Forget every lease (the queue is closing)."""
        self._leases.clear()
        self._heap.clear()
        self._marked.clear()
        self._tokens.clear()


@dataclass(slots=True)
class Claim:
    """A claimed job: its record plus the private claim token (semantics 1.1).

    Only a `Claim` settles (ack, nack, dead-letter) or renews its job.
    ``record.payload`` is always inline.
    """

    record: JobRecord
    _token: int = field(repr=False)
    #: Fired when the job is asked to cancel (pre-fired if it already was).
    cancel_token: CancelToken
    #: The handle worker code uses to extend the lease.
    lease: LeaseHandle
    #: The claimed record as committed, and its encoding: settling reuses it
    #: while the stored bytes still match (no second decode).
    _stored: tuple[bytes, JobRecord] | None = field(default=None, repr=False, compare=False)
    #: The job's first claim, of a job a commit of this open queue made
    #: pending: were the claim lost in a crash, no other process would have
    #: seen it (nor any attempt of the job), so a worker may let it ride a
    #: later flush instead of waiting for it.
    fresh: bool = field(default=False, compare=False)

    @property
    def id(self) -> str:
        """The job id."""
        return self.record.id

    @property
    def queue(self) -> str:
        """The job's queue."""
        return self.record.queue

    @property
    def payload(self) -> bytes:
        """The job's payload."""
        return self.record.payload

    @property
    def token(self) -> int:
        """The claim token (for the queue's own settlement checks)."""
        return self._token


class LeaseHandle:
    """Worker code's handle on a claim's lease (semantics 1.5)."""

    __slots__ = ("_cancel", "_id", "_queue", "_registry", "_token")

    def __init__(
        self,
        registry: LeaseRegistry | None,
        queue: str,
        id: str,
        token: int,
        cancel: CancelToken,
    ) -> None:
        self._registry = registry
        self._queue = queue
        self._id = id
        self._token = token
        self._cancel = cancel

    @classmethod
    def detached(cls) -> LeaseHandle:
        """A handle bound to no lease: every call succeeds without effect."""
        return cls(None, "", "", 0, CancelToken())

    @property
    def cancel_token(self) -> CancelToken:
        """The delivery's cancellation token."""
        return self._cancel

    def expiry(self) -> int | None:
        """The lease's current expiry (epoch ms), or None (lost or detached)."""
        if self._registry is None:
            return None
        return self._registry.expiry(self._queue, self._id)

    def renew(self, extension: float) -> int:
        """Set the lease to end ``extension`` seconds from now (may shorten)."""
        if self._registry is None:
            return 0
        now = self._registry.clock.now_ms()
        return self._registry.renew(
            self._queue, self._id, self._token, self._cancel, now + to_ms(extension)
        )

    def ensure_at_least(self, remaining: float) -> int:
        """Make the lease last ``remaining`` seconds plus a 5 s margin; never shorten.

        Extends to ``now + remaining + 5 s`` only if the lease ends sooner.
        Returns the (possibly unchanged) expiry; `CancelRequested` if the job
        was asked to cancel, `ClaimLost` if the lease is gone.
        """
        if self._registry is None:
            return 0
        reg = self._registry
        target = reg.clock.now_ms() + to_ms(remaining + LEASE_MARGIN)
        return reg.renew(self._queue, self._id, self._token, self._cancel, target, only_extend=True)
