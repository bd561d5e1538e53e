"""`loop_idle`: no task ready to run on the loop (plain callbacks may be)."""

from __future__ import annotations

import asyncio

from durable.store import idle
from durable.store.idle import loop_idle


async def test_an_empty_loop_is_idle() -> None:
    await asyncio.sleep(0)
    assert loop_idle()


async def test_a_plain_callback_ready_leaves_it_idle_a_ready_task_does_not() -> None:
    loop = asyncio.get_running_loop()
    loop.call_soon(lambda: None)  # a done callback, a relay: runs before any task it wakes
    assert loop_idle()
    task = asyncio.ensure_future(asyncio.sleep(0))  # its first step is ready
    assert not loop_idle()
    await task
    assert loop_idle()


async def test_a_task_woken_by_a_future_makes_it_busy() -> None:
    fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    async def wait() -> None:
        await fut

    waiter = asyncio.ensure_future(wait())
    await asyncio.sleep(0)  # the task waits on the future now
    assert loop_idle()
    fut.set_result(None)  # its wakeup is a callback of the task's
    assert not loop_idle()
    await waiter


async def test_a_cancelled_handle_does_not_count_and_many_callbacks_are_busy() -> None:
    loop = asyncio.get_running_loop()
    task = asyncio.ensure_future(asyncio.sleep(0))
    await task
    handle = loop.call_soon(task.get_name)  # a method of a task: counted as one of its steps
    assert not loop_idle()
    handle.cancel()
    assert loop_idle()
    for _ in range(idle._SCAN + 1):
        loop.call_soon(lambda: None)
    assert not loop_idle()
    await asyncio.sleep(0)
    assert loop_idle()
