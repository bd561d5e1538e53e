"""FaultyObjectStore: every fault kind, latency, crash and counters."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable

import pytest

from durable.errors import ObjectExists, ObjectNotFound, ObjectStoreError, ObjectStoreTimeout
from durable.store.objects import FaultyObjectStore, Guarantee, MemoryObjectStore
from durable.testing import MockClock, SimulatedCrash


def _faulty(latency: float = 0.0) -> tuple[FaultyObjectStore, MemoryObjectStore]:
    inner = MemoryObjectStore()
    return FaultyObjectStore(inner, latency=latency), inner


async def test_mirrors_the_inner_store() -> None:
    store, inner = _faulty()
    assert store.url == inner.url
    assert store.guarantees == inner.guarantees == {Guarantee.ATOMIC_CREATE}
    assert "FaultyObjectStore" in repr(store)


async def test_fail_next_default_error_does_not_delegate() -> None:
    store, inner = _faulty()
    store.fail_next("put")
    with pytest.raises(ObjectStoreError) as info:
        await store.put("a", b"1")
    assert type(info.value) is ObjectStoreError
    assert info.value.transient
    assert info.value.name == "a"
    assert await inner.list("") == []
    await store.put("a", b"1")  # only the next call failed
    assert await inner.get("a") == b"1"


async def test_fail_next_custom_error_and_count() -> None:
    store, inner = _faulty()
    await inner.put("a", b"1")
    boom = ConnectionResetError("reset by peer")
    store.fail_next("get", boom, count=2)
    for _ in range(2):
        with pytest.raises(ConnectionResetError):
            await store.get("a")
    assert await store.get("a") == b"1"


async def test_faults_apply_only_to_their_operation() -> None:
    store, _ = _faulty()
    store.fail_next("delete")
    await store.put("a", b"1")
    assert await store.get("a") == b"1"
    assert await store.list("") == ["a"]
    with pytest.raises(ObjectStoreError):
        await store.delete(["a"])
    assert await store.list("") == ["a"]


@pytest.mark.parametrize("op", ["get", "put", "create", "list", "delete"])
async def test_every_operation_can_fail(op: str) -> None:
    store, _ = _faulty()
    store.fail_next(op)
    calls: dict[str, Callable[[], Awaitable[object]]] = {
        "get": lambda: store.get("a"),
        "put": lambda: store.put("a", b"1"),
        "create": lambda: store.create("a", b"1"),
        "list": lambda: store.list(""),
        "delete": lambda: store.delete(["a"]),
    }
    with pytest.raises(ObjectStoreError, match=f"injected {op} fault"):
        await calls[op]()


async def test_faults_fire_in_scripted_order() -> None:
    store, inner = _faulty()
    store.timeout_next("put", after=False)
    store.fail_next("put", ValueError("second"))
    store.timeout_next("put", after=True)
    with pytest.raises(ObjectStoreTimeout):
        await store.put("a", b"1")
    with pytest.raises(ValueError, match="second"):
        await store.put("a", b"2")
    assert await inner.list("") == []
    with pytest.raises(ObjectStoreTimeout):
        await store.put("a", b"3")
    assert await inner.get("a") == b"3"
    await store.put("a", b"4")


async def test_timeout_after_the_write_landed() -> None:
    store, inner = _faulty()
    store.timeout_next("create", after=True)
    with pytest.raises(ObjectStoreTimeout) as info:
        await store.create("log/1", b"mine")
    assert info.value.transient
    assert info.value.name == "log/1"
    assert await inner.get("log/1") == b"mine"
    # The retry the caller would make now loses against its own write (gotcha 4).
    with pytest.raises(ObjectExists):
        await store.create("log/1", b"mine")
    assert store.bytes_written == 4


async def test_timeout_before_the_write() -> None:
    store, inner = _faulty()
    store.timeout_next("create", after=False)
    with pytest.raises(ObjectStoreTimeout):
        await store.create("log/1", b"mine")
    with pytest.raises(ObjectNotFound):
        await inner.get("log/1")
    await store.create("log/1", b"mine")
    assert store.bytes_written == 4


async def test_timeout_on_a_read_returns_nothing() -> None:
    store, inner = _faulty()
    await inner.put("a", b"1")
    store.timeout_next("get")
    with pytest.raises(ObjectStoreTimeout):
        await store.get("a")


def test_unknown_operation_is_rejected() -> None:
    store, _ = _faulty()
    with pytest.raises(ValueError, match="unknown operation 'head'"):
        store.fail_next("head")
    with pytest.raises(ValueError, match="unknown operation"):
        store.timeout_next("gets")
    with pytest.raises(ValueError, match="n >= 0"):
        store.crash_after_writes(-1)


async def test_crash_after_writes() -> None:
    store, inner = _faulty()
    store.crash_after_writes(3)
    await store.put("a", b"1")
    assert await store.get("a") == b"1"  # reads do not count
    with pytest.raises(ObjectExists):  # failed writes do not count
        await store.create("a", b"2")
    store.fail_next("put")
    with pytest.raises(ObjectStoreError):  # nor do injected failures
        await store.put("b", b"2")
    await store.create("b", b"2")
    assert not store.crashed
    await store.delete(["a"])  # the third write returns normally...
    assert store.crashed
    for call in (
        store.get("b"),
        store.put("c", b"3"),
        store.create("c", b"3"),
        store.list(""),
        store.delete(["b"]),
    ):
        with pytest.raises(SimulatedCrash):  # ...and every later call dies
            await call
    assert await inner.list("") == ["b"]
    await store.close()  # cleanup after a crash does not raise again


async def test_crash_is_not_an_exception() -> None:
    store, _ = _faulty()
    store.crash_after_writes(0)
    assert store.crashed
    assert not issubclass(SimulatedCrash, Exception)

    async def code_under_test() -> None:
        try:
            await store.get("a")
        except Exception:
            pytest.fail("SimulatedCrash was caught by `except Exception`")

    with pytest.raises(SimulatedCrash):
        await code_under_test()


async def test_crash_reaches_calls_waiting_in_their_latency() -> None:
    clock = MockClock()
    store = FaultyObjectStore(MemoryObjectStore(), latency=1.0, clock_sleep=clock.sleep)
    store.crash_after_writes(1)
    first = asyncio.create_task(store.put("first", b"1"))
    await clock.wait_for_sleepers(1)
    clock.advance(0.5)
    late = [asyncio.create_task(store.put(f"late{i}", b"1")) for i in range(3)]
    await clock.wait_for_sleepers(4)
    clock.advance(0.5)
    await first  # the one allowed write returns normally
    assert store.crashed
    clock.advance(0.5)
    for task in late:
        with pytest.raises(SimulatedCrash):
            await task
    assert await store.inner.list("") == ["first"]


async def test_writes_in_flight_at_the_crash_may_land() -> None:
    store, inner = _faulty()
    store.crash_after_writes(1)
    results = await asyncio.gather(
        *(store.put(f"w{i}", b"1") for i in range(4)), return_exceptions=True
    )
    # As in a real crash: the callers of the other writes never hear back,
    # but those writes were already sent to the inner store.
    assert results[0] is None
    assert all(isinstance(r, SimulatedCrash) for r in results[1:])
    assert "w0" in await inner.list("")


async def test_latency_overlaps_for_concurrent_calls() -> None:
    store, inner = _faulty(latency=0.05)
    await inner.put("a", b"1")
    start = time.monotonic()
    results = await asyncio.gather(*(store.get("a") for _ in range(20)))
    elapsed = time.monotonic() - start
    assert results == [b"1"] * 20
    assert 0.05 <= elapsed < 0.5


async def test_latency_on_a_mock_clock() -> None:
    clock = MockClock()
    store = FaultyObjectStore(MemoryObjectStore(), latency=2.0, clock_sleep=clock.sleep)
    task = asyncio.create_task(store.put("a", b"1"))
    await clock.wait_for_sleepers(1)
    clock.advance(1.9)
    await asyncio.sleep(0)
    assert not task.done()
    clock.advance(0.1)
    await task
    assert await store.inner.get("a") == b"1"


async def test_counters() -> None:
    store, _ = _faulty()
    await store.put("a", b"12345")
    await store.create("b", b"123")
    with pytest.raises(ObjectExists):
        await store.create("b", b"1234567")
    store.fail_next("put")
    with pytest.raises(ObjectStoreError):
        await store.put("c", b"12")
    await store.get("a")
    await store.list("")
    await store.delete(["a", "b"])
    assert store.calls == {"put": 2, "create": 2, "get": 1, "list": 1, "delete": 1}
    assert store.bytes_written == 8


async def test_close_closes_the_inner_store() -> None:
    closed: list[bool] = []

    class Inner(MemoryObjectStore):
        async def close(self) -> None:
            closed.append(True)

    async with FaultyObjectStore(Inner()) as store:
        await store.put("a", b"1")
    assert closed == [True]


async def test_delete_rejects_a_bare_string() -> None:
    store, _ = _faulty()
    with pytest.raises(TypeError):
        await store.delete("abc")


async def test_skip_lets_calls_through_before_the_fault() -> None:
    store, inner = _faulty()
    await inner.put("a", b"1")
    store.fail_next("get", skip=2)
    store.timeout_next("list", after=False, skip=1)
    assert await store.get("a") == b"1"
    assert await store.get("a") == b"1"
    with pytest.raises(ObjectStoreError, match="injected get fault"):
        await store.get("a")
    assert await store.get("a") == b"1"
    assert await store.list("") == ["a"]
    with pytest.raises(ObjectStoreTimeout):
        await store.list("")
    with pytest.raises(ValueError, match="skip"):
        store.fail_next("get", skip=-1)
