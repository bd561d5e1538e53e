"""`Pacing` and `Pacer`: the poll pace of the inbox applier and of a client's
follower (issue 14 point 3): busy while something happens and for a linger
after, then backing off to an idle pace that costs little."""

from __future__ import annotations

import asyncio
import math
from pathlib import Path

import pytest

from durable.errors import InvalidArgument
from durable.store.objects import FaultyObjectStore, LocalObjectStore, MemoryObjectStore
from durable.store.pacing import (
    LOCAL_PACING,
    OBJECT_STORE_PACING,
    Pacer,
    Pacing,
    default_pacing,
)


def test_the_default_pacing_follows_is_local(tmp_path: Path) -> None:
    local = LocalObjectStore(tmp_path)
    assert default_pacing(local) is LOCAL_PACING
    assert default_pacing(MemoryObjectStore()) is LOCAL_PACING
    # A wrapper that adds no latency is as cheap to poll as what it wraps.
    assert default_pacing(FaultyObjectStore(local)) is LOCAL_PACING
    assert default_pacing(FaultyObjectStore(local, latency=0.02)) is OBJECT_STORE_PACING
    # Issue 14: on a local directory, notice within a few ms while busy ...
    assert LOCAL_PACING.busy <= 0.005
    # ... and do not wake every 2 ms for ever when idle.
    assert LOCAL_PACING.idle == 0.05
    assert LOCAL_PACING.linger == 1.0
    assert (OBJECT_STORE_PACING.busy, OBJECT_STORE_PACING.idle) == (0.2, 5.0)


def test_intervals_stay_busy_for_the_linger_then_back_off_to_idle() -> None:
    pacing = Pacing(busy=0.002, idle=0.05, linger=1.0)
    assert pacing.next_interval(0.05, found=True) == 0.002
    assert pacing.next_interval(0.002, found=False, quiet_for=0.5) == 0.002  # lingering
    waits, interval = [], 0.002
    for _ in range(7):
        interval = pacing.next_interval(interval, found=False, quiet_for=1.0)
        waits.append(interval)
    assert waits == [0.004, 0.008, 0.016, 0.032, 0.05, 0.05, 0.05]
    assert pacing.next_interval(0.05, found=True, quiet_for=math.inf) == 0.002
    no_linger = Pacing(busy=0.2, idle=5.0)
    assert no_linger.next_interval(0.2, found=False, quiet_for=0.0) == 0.4


@pytest.mark.parametrize(
    ("busy", "idle", "backoff", "linger"),
    [
        (0, 1, 2, 0),
        (2, 1, 2, 0),
        (0.1, 1, 0.5, 0),
        (0.1, 1, 2, -1),
        (0.1, math.inf, 2, 0),
        (0.1, 1, 2, math.nan),
        (True, 1, 2, 0),
    ],
)
def test_bad_pacing_is_refused(busy: float, idle: float, backoff: float, linger: float) -> None:
    with pytest.raises(InvalidArgument):
        Pacing(busy, idle, backoff, linger)


def poll(pacer: Pacer, *, found: bool) -> float:
    """What the loop does around one poll that succeeded."""
    pacer.begin()
    return pacer.polled(found=found)


async def test_a_pacer_lingers_at_the_busy_pace_then_backs_off() -> None:
    pacer = Pacer(Pacing(busy=0.001, idle=0.004, linger=0.05))
    assert poll(pacer, found=True) == 0.001
    assert poll(pacer, found=False) == 0.001  # found something just now
    await asyncio.sleep(0.06)
    assert [poll(pacer, found=False) for _ in range(4)] == [0.002, 0.004, 0.004, 0.004]
    pacer.wake()
    assert pacer.interval == 0.001
    assert pacer.polled(found=False) == 0.001  # woken during the poll: lingering again
    await asyncio.sleep(0.06)
    pacer.begin()
    pacer.wake()  # during the poll
    assert pacer.polled(found=False) == 0.001


async def test_keep_busy_holds_the_busy_pace_and_lingers_after_release() -> None:
    pacer = Pacer(Pacing(busy=0.001, idle=0.004, linger=0.05))
    await asyncio.sleep(0.06)
    assert poll(pacer, found=False) == 0.002  # quiet: backing off
    with pacer.keep_busy():
        assert pacer.busy
        await asyncio.sleep(0.06)  # longer than the linger: held all the same
        assert poll(pacer, found=False) == 0.001
    assert not pacer.busy
    assert poll(pacer, found=False) == 0.001  # released just now: lingering
    await asyncio.sleep(0.06)
    assert poll(pacer, found=False) == 0.002


async def test_wake_ends_a_sleep_at_once_and_begin_forgets_it() -> None:
    pacer = Pacer(Pacing(busy=60.0, idle=60.0))
    sleeping = asyncio.ensure_future(pacer.sleep(60.0))
    await asyncio.sleep(0)
    assert not sleeping.done()
    pacer.wake()
    await asyncio.wait_for(sleeping, 5)
    assert pacer.woken
    await asyncio.wait_for(pacer.sleep(60.0), 5)  # woken since the last poll began
    pacer.begin()
    assert not pacer.woken
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(pacer.sleep(60.0), 0.01)


async def test_the_pacing_may_be_replaced_while_running() -> None:
    pacer = Pacer(Pacing(busy=0.001, idle=0.004))
    pacer.pacing = Pacing(busy=0.01, idle=0.04)
    assert poll(pacer, found=True) == 0.01
