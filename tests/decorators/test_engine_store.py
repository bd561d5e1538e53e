"""The `Engine`'s store: locations refused with a clear error (issue 13 point 11)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

import durable
from durable.errors import InvalidArgument, StoreNotFound
from durable.store.clock import MockClock
from durable.store.objects import FaultyObjectStore, MemoryObjectStore
from durable.testing import cloud


@durable.workflow
async def answer() -> int:
    return 42


@pytest.mark.parametrize("url", ["foo://bar", "Foo://bar/baz"])
def test_an_unknown_scheme_is_refused_at_construction(url: str) -> None:
    with pytest.raises(InvalidArgument) as exc:
        durable.Engine(url)
    message = str(exc.value)
    assert repr(url) in message
    assert "unknown scheme" in message
    for scheme in ("file://", "memory://", "s3://", "gs://", "az://"):
        assert scheme in message


@pytest.mark.parametrize("url", [123, b"/var/lib/app", 4.5, ["a"]])
def test_a_store_that_is_not_a_path_or_url_is_refused(url: object) -> None:
    with pytest.raises(InvalidArgument, match="a path, a URL string or an ObjectStore") as exc:
        durable.Engine(url)  # type: ignore[arg-type]
    assert type(url).__name__ in str(exc.value)


def test_a_read_only_scheme_is_refused_at_construction() -> None:
    with pytest.raises(InvalidArgument, match="read-only") as exc:
        durable.Engine("https://example.com/store")
    assert "s3://" in str(exc.value)


def test_a_bucket_url_without_a_bucket_is_refused() -> None:
    with pytest.raises(InvalidArgument, match="names no bucket"):
        durable.Engine("s3://")


async def test_a_missing_local_directory_is_created(tmp_path: Path, clock: MockClock) -> None:
    root = tmp_path / "does" / "not" / "exist"
    async with durable.Engine(root, clock=clock):
        assert await (await answer.start()).result() == 42
    assert root.is_dir()
    async with durable.Engine(f"file://{root}", clock=clock):
        pass


@pytest.mark.emulator
@pytest.mark.parametrize("backend", cloud.CLOUD_BACKENDS)
async def test_a_missing_bucket_or_container_raises_store_not_found(
    backend: str, clock: MockClock
) -> None:
    if not cloud.available(backend):
        pytest.skip(f"{cloud.ENV[backend]} is unset: run scripts/test")
    scheme = {"s3": "s3", "gcs": "gs", "azure": "az"}[backend]
    kind = {"s3": "S3 bucket", "gcs": "GCS bucket", "azure": "Azure container"}[backend]
    bucket = "durable-missing-" + os.urandom(6).hex()
    engine = durable.Engine(
        f"{scheme}://{bucket}/app", storage_options=cloud.storage_options(backend), clock=clock
    )
    with pytest.raises(StoreNotFound) as exc:
        async with engine:
            pass
    assert isinstance(exc.value, LookupError)
    assert f"{kind} {bucket!r} does not exist" in str(exc.value)
    assert "create it" in str(exc.value)
    assert "probe/" not in str(exc.value)
    assert not engine.running


async def test_an_engine_opens_through_one_transient_fault_at_any_open_call(
    clock: MockClock,
) -> None:
    """Issue 13 point 8 at the engine: a 503 at start-up does not kill it."""
    template = MemoryObjectStore()
    async with durable.Engine(template, clock=clock):
        assert await (await answer.start()).result() == 42

    async def copy() -> MemoryObjectStore:
        objects = MemoryObjectStore()
        for name in await template.list(""):
            await objects.put(name, await template.get(name))
        return objects

    counting = FaultyObjectStore(await copy())
    engine = durable.Engine(counting, clock=clock)
    await engine.__aenter__()
    counts = dict(counting.calls)
    await engine.__aexit__(None, None, None)
    assert sum(counts.values()) >= 7
    for op, n in counts.items():
        for i in range(n):
            objects = FaultyObjectStore(await copy())
            objects.fail_next(op, skip=i)
            async with durable.Engine(objects, clock=clock) as engine:
                assert await (await answer.start()).result() == 42, (op, i)
            assert await objects.inner.list("probe/") == [], (op, i)
