"""A member's own heartbeat, and its reads of the others' (shared by
`durable.cluster.owner.Ownership` and `durable.cluster.pool.PoolMember`).

`Heartbeat` puts the member object (`durable.cluster.members`) and keeps
the time, on the member's own clock, at which its last successful put
*started*: `Heartbeat.staleness` names a reason once that is more than
`SELF_FENCE_FRACTION` of the ttl ago. An observer judges a member dead
only after a full ttl without a change, so a member that stops writing at
0.8 ttl stops before any other may take over what it holds.

`beat_forever` and `tick_forever` are a member's two loops (put the
heartbeat; read and decide), and `stop_tasks` stops them with the
member's background tasks.

`observe_member` feeds one read of another member's object to a
`Liveness`; `observe_members` reads every member a pool member must judge
(and records those whose object was deleted as gone); `forget_departed`
deletes the objects of members seen dead or released (bounded litter).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Collection, Iterable
from typing import Any

from durable.cluster.members import (
    MEMBERS_PREFIX,
    Liveness,
    MemberRecord,
    Role,
    Status,
    encode_member,
    member_id_of,
    member_name,
)
from durable.errors import ObjectNotFound, ObjectStoreError
from durable.store.clock import Clock
from durable.store.objects.base import ObjectStore

__all__ = [
    "SELF_FENCE_FRACTION",
    "Heartbeat",
    "beat_forever",
    "forget_departed",
    "observe_member",
    "observe_members",
    "stop_tasks",
    "tick_forever",
]

#: A member whose last successful heartbeat started longer ago than this
#: fraction of the ttl stops its writers.
SELF_FENCE_FRACTION = 0.8


class Heartbeat:
    """The heartbeat of member ``member_id`` on ``objects``, on ``clock``,
    for a ttl of ``ttl_ms``."""

    def __init__(self, objects: ObjectStore, member_id: str, clock: Clock, ttl_ms: int) -> None:
        self.objects = objects
        self.member_id = member_id
        self.clock = clock
        self.ttl_ms = ttl_ms
        #: After this many ms without a successful put, `staleness` names a reason.
        self.fence_after_ms = int(ttl_ms * SELF_FENCE_FRACTION)
        #: When (this member's clock) the last successful put started; None before.
        self.last_ok_ms: int | None = None
        self._counter = 0

    async def put(
        self, role: Role, *, released: bool = False, locked_on: str | None = None
    ) -> None:
        """Put the member object; on success the heartbeat is renewed as of
        the put's start. The store's error propagates."""
        started = self.clock.now_ms()
        self._counter += 1
        record = MemberRecord(self._counter, role, released, locked_on)
        await self.objects.put(member_name(self.member_id), encode_member(record))
        if self.last_ok_ms is None or started > self.last_ok_ms:
            self.last_ok_ms = started

    def staleness(self, holds: str) -> str | None:
        """None while the heartbeat is fresh; else why this member may no
        longer be sure it holds ``holds`` (e.g. "the store")."""
        if self.last_ok_ms is None:
            return f"member {self.member_id} has not renewed its heartbeat yet"
        age = self.clock.now_ms() - self.last_ok_ms
        if age > self.fence_after_ms:
            return (
                f"member {self.member_id} last renewed its ownership heartbeat {age / 1000:.1f} s "
                f"ago, more than {SELF_FENCE_FRACTION} of the ttl ({self.ttl_ms / 1000} s): "
                f"another member may own {holds} now"
            )
        return None


async def observe_member(
    objects: ObjectStore, live: Liveness, member: str, clock: Clock, log: Any
) -> None:
    """Read ``member``'s object (absent: None) into ``live`` at ``clock``'s now;
    warn once when its bytes stop decoding. The store's error propagates."""
    try:
        data: bytes | None = await objects.get(member_name(member))
    except ObjectNotFound:
        data = None
    undecodable = member in live.undecodable
    live.observe(member, data, clock.now_ms())
    if member in live.undecodable and not undecodable:
        log.warning("member object undecodable", key=member_name(member))


async def observe_members(
    objects: ObjectStore,
    live: Liveness,
    me: str,
    named: Collection[str],
    clock: Clock,
    log: Any,
) -> dict[str, Status]:
    """LIST the member objects; read every listed member and every one in
    ``named`` (those the caller's state still names) except ``me`` into
    ``live``; return the status of every member ``live`` knows but ``me``.

    A member seen before that is neither listed nor named had its object
    deleted: it is recorded as absent (gone), then forgotten. Without that
    nobody would read it again and its last status (alive, say) would stand
    for ever. Cost: one LIST and one GET per other member. The store's
    error propagates.
    """
    listed = {m for m in map(member_id_of, await objects.list(MEMBERS_PREFIX)) if m}
    for member in sorted((listed | set(named)) - {me}):
        await observe_member(objects, live, member, clock, log)
    deleted = set(live.known()) - listed - set(named) - {me}
    for member in deleted:
        live.observe(member, None, clock.now_ms())
    live.forget(m for m in deleted if live.status(m) is Status.GONE)
    return {m: live.status(m) for m in live.known() if m != me}


async def forget_departed(
    objects: ObjectStore, live: Liveness, keep: Collection[str], log: Any
) -> None:
    """Delete the objects of the members ``live`` saw dead or released (but
    none in ``keep``: this member, and those whose status still matters), and
    stop tracking them; a failed delete is logged and retried next time."""
    departed = [
        m for m in live.known() if m not in keep and live.status(m) in (Status.DEAD, Status.GONE)
    ]
    if not departed:
        return
    try:
        await objects.delete([member_name(m) for m in departed])
    except ObjectStoreError as e:
        log.warning("deleting departed members failed", error=str(e))
        return
    live.forget(departed)


async def beat_forever(
    clock: Clock,
    heartbeat: float,
    put: Callable[[], Awaitable[None]],
    fence_if_stale: Callable[[], None],
    log: Any,
) -> None:
    """A member's heartbeat loop: every ``heartbeat`` seconds, stop what a
    stale heartbeat no longer covers (first: woken after a pause), ``put()``,
    check again. A failed put is logged; the next one tries again."""
    while True:
        await clock.sleep(heartbeat)
        fence_if_stale()
        try:
            await put()
        except ObjectStoreError as e:
            log.warning("heartbeat put failed", error=str(e))
        fence_if_stale()


async def tick_forever(
    clock: Clock,
    heartbeat: float,
    leaving: Callable[[], bool],
    transition: asyncio.Lock,
    tick: Callable[[], Awaitable[None]],
    log: Any,
    what: str,
) -> None:
    """A member's watch loop: every ``heartbeat`` seconds, until
    ``leaving()``, ``tick()`` under ``transition``. A store error is logged
    (the next tick reads again); any other error too, naming ``what``: a
    bug must not end the membership."""
    while True:
        await clock.sleep(heartbeat)
        if leaving():
            return
        try:
            async with transition:
                await tick()
        except ObjectStoreError as e:
            log.warning(f"{what} check failed", error=str(e))
        except Exception as e:  # a bug: keep the member alive, say why
            log.error(f"{what} check crashed", error=repr(e))


async def stop_tasks(
    loops: list[asyncio.Task[None]], background: Iterable[asyncio.Task[None]]
) -> None:
    """Cancel a member's ``loops`` (emptied) and ``background`` tasks, but
    not the calling task, and wait until they ended."""
    current = asyncio.current_task()
    tasks = [t for t in (*loops, *background) if t is not current]
    loops.clear()
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
