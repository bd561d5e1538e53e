"""In-process signals of queue events: new pending jobs, new dead letters.

One `Notify` per queue wakes workers waiting for a pending job, with the
semantics of a single-permit notifier: `Notify.notify_one` wakes one
subscribed waiter, or stores one permit when nobody waits, which the next
subscription consumes at once.

`Wakeups.dead_letter_events` counts, per queue, the jobs that entered Dead
since the queue was opened. Unlike the stored ``dead`` counter, which the
dead-retention sweep lowers, it only grows, so a layer that reacts to dead
letters (the workflow runtime's reconciliation) sees every new one.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
from collections import deque
from typing import Any

from durable.store.clock import Clock, call_later
from durable.store.log import Durable
from durable.store.queue.options import MAX_WAKEUPS_PER_INSERT

__all__ = ["MAX_MADE_HERE", "Notify", "Wakeups", "wait_or_sleep"]

#: Job ids `Wakeups.made_here` remembers at most (it forgets them all then).
MAX_MADE_HERE = 100_000


class Notify:
    """Wake one waiter per notification; remember one when nobody waits."""

    __slots__ = ("_permit", "_waiters")

    def __init__(self) -> None:
        self._waiters: deque[asyncio.Future[None]] = deque()
        self._permit = False

    def notify_one(self) -> None:
        """Wake the oldest waiter, or store a permit."""
        while self._waiters:
            fut = self._waiters.popleft()
            if not fut.done():
                fut.set_result(None)
                return
        self._permit = True

    def subscribe(self) -> asyncio.Future[None]:
        """A future resolved by a notification (at once if a permit is stored)."""
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        if self._permit:
            self._permit = False
            fut.set_result(None)
        else:
            self._waiters.append(fut)
        return fut

    def unsubscribe(self, fut: asyncio.Future[None]) -> None:
        """Withdraw a subscription; a notification it already took is passed on."""
        if fut.done():
            if not fut.cancelled():
                self.notify_one()
            return
        fut.cancel()
        with contextlib.suppress(ValueError):
            self._waiters.remove(fut)


class Wakeups:
    """The `Notify` of every queue, and the commits that made jobs pending.

    A pending job is visible in memory as soon as the commit that made it
    pending is applied, before that commit is durable. `creation` gives a
    claim the commit to wait for, so no job is handed to a worker before
    the transition that created it is on the store.
    """

    def __init__(self) -> None:
        self._by_queue: dict[str, Notify] = {}
        self._creations: dict[str, Durable] = {}
        self._dead_events: dict[str, int] = {}
        self._made_here: set[str] = set()

    def made_here(self, job_ids: list[str]) -> None:
        """Note that a commit of this open queue made ``job_ids`` pending (a
        hint, bounded by `MAX_MADE_HERE`: forgetting an id costs a flush)."""
        if len(self._made_here) + len(job_ids) > MAX_MADE_HERE:
            self._made_here.clear()
        self._made_here.update(job_ids)

    def take_made_here(self, job_id: str) -> bool:
        """Whether a commit of this open queue made ``job_id`` pending (since
        its last `take_made_here`); forgets it."""
        try:
            self._made_here.remove(job_id)
        except KeyError:
            return False
        return True

    def created(self, job_ids: list[str], durable: Durable) -> None:
        """Note that ``durable`` made ``job_ids`` pending."""
        if durable.done():
            return
        creations = self._creations
        for job_id in job_ids:
            creations[job_id] = durable

        def forget() -> None:
            for job_id in job_ids:
                if creations.get(job_id) is durable:
                    del creations[job_id]

        durable.add_done_callback(forget)

    def creation(self, job_id: str) -> Durable | None:
        """The commit that made ``job_id`` pending, while it is not yet durable."""
        return self._creations.get(job_id)

    def of(self, queue: str) -> Notify:
        """The notifier of ``queue``."""
        n = self._by_queue.get(queue)
        if n is None:
            n = self._by_queue[queue] = Notify()
        return n

    def inserted(self, queue: str, count: int = 1) -> None:
        """Record ``count`` new pending jobs in ``queue``: wake up to 64 waiters."""
        n = self.of(queue)
        for _ in range(min(count, MAX_WAKEUPS_PER_INSERT)):
            n.notify_one()

    def dead_lettered(self, queue: str, count: int) -> None:
        """Record that a commit just moved ``count`` jobs of ``queue`` into Dead."""
        self._dead_events[queue] = self._dead_events.get(queue, 0) + count

    def dead_letter_events(self, queue: str) -> int:
        """How many jobs of ``queue`` entered Dead since the queue was opened
        (monotonic; retention sweeps and requeues do not lower it)."""
        return self._dead_events.get(queue, 0)


async def wait_or_sleep(
    clock: Clock,
    fut: asyncio.Future[Any],
    seconds: float | None,
    *,
    until: asyncio.Future[Any] | None = None,
) -> bool:
    """Wait for ``fut`` at most ``seconds`` of ``clock`` time; True if it resolved.

    ``seconds`` None waits without limit and raises ``fut``'s error, as
    awaiting it would; ``until``, when it resolves first, ends the wait too
    (False). Neither future is cancelled here, even when the waiting task
    is. No task is made: one waiter, woken by callbacks and a timer of the
    clock (`call_later`).
    """
    if fut.done():
        return True
    if seconds is not None and seconds <= 0:
        return False
    waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    wake = functools.partial(_wake, waiter)
    fut.add_done_callback(wake)
    if until is not None:
        until.add_done_callback(wake)
    cancel_timer = None if seconds is None else call_later(clock, seconds, wake)
    try:
        await waiter
    finally:
        if cancel_timer is not None:
            cancel_timer()
        fut.remove_done_callback(wake)
        if until is not None:
            until.remove_done_callback(wake)
    if seconds is None:
        fut.result()  # its error, as awaiting it would raise
        return True
    return fut.done() and not fut.cancelled()


def _wake(waiter: asyncio.Future[None], _: object = None) -> None:
    if not waiter.done():
        waiter.set_result(None)
