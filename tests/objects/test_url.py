"""Opening stores from URLs, and the providers' environment variables."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from durable.errors import MissingGuarantee
from durable.store.log import LogReader, LogWriter, WriteBatch
from durable.store.objects import (
    FsspecObjectStore,
    Guarantee,
    LocalObjectStore,
    MemoryObjectStore,
    open_object_store,
    split_url,
)
from durable.testing import cloud


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("/var/lib/app", ("file", "/var/lib/app")),
        ("relative/dir", ("file", "relative/dir")),
        ("file:///var/lib/app", ("file", "/var/lib/app")),
        ("S3://bucket/p", ("s3", "bucket/p")),
        ("memory://x", ("memory", "x")),
    ],
)
def test_split_url(url: str, expected: tuple[str, str]) -> None:
    assert split_url(url) == expected


async def test_paths_and_file_urls_open_a_local_directory(tmp_path: Path) -> None:
    for url in (str(tmp_path / "a"), f"file://{tmp_path / 'a'}", tmp_path / "a"):
        store = await open_object_store(url)
        assert isinstance(store, LocalObjectStore)
        await store.close()
    first = await open_object_store(tmp_path / "a")
    await first.put("x", b"1")
    second = await open_object_store(f"file://{tmp_path / 'a'}")
    assert await second.get("x") == b"1"


async def test_memory_urls_share_a_store_within_the_process() -> None:
    a = await open_object_store("memory://url-test")
    b = await open_object_store("memory://url-test")
    assert isinstance(a, MemoryObjectStore)
    await a.put("k", b"v")
    assert await b.get("k") == b"v"
    MemoryObjectStore.forget("url-test")


async def test_other_protocols_are_plain_fsspec_read_only() -> None:
    plain = await open_object_store("data://ignored")  # fsspec's data: URLs, no I/O
    assert isinstance(plain, FsspecObjectStore)
    assert Guarantee.ATOMIC_CREATE not in plain.guarantees
    with pytest.raises(MissingGuarantee):
        await LogWriter.open(plain)  # refused before any I/O
    await plain.close()


@pytest.mark.parametrize("url", ["s3://", "gs:///prefix", "az://"])
async def test_cloud_url_without_bucket_is_refused(url: str) -> None:
    with pytest.raises(ValueError, match="names no bucket"):
        await open_object_store(url)


@pytest.mark.emulator
@pytest.mark.parametrize("backend", cloud.CLOUD_BACKENDS)
async def test_cloud_url_round_trip_through_the_log(backend: str) -> None:
    if not cloud.available(backend):
        pytest.skip(f"{cloud.ENV[backend]} is unset: run scripts/test")
    url, options = await cloud.new_bucket(backend, prefix="deep/prefix")
    store = await open_object_store(url, options)
    assert store.url == url
    w = await LogWriter.open(store)
    await w.commit(WriteBatch().put(b"k", b"v"))
    await w.close()
    names = await store.list("")
    assert names
    assert all(not n.startswith("deep/") for n in names)  # names are relative to the prefix
    r = await LogReader.open(store)
    assert r.state.get(b"k") == b"v"
    await store.close()


@pytest.mark.emulator
async def test_s3_credentials_and_endpoint_from_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    if not cloud.available("s3"):
        pytest.skip("DURABLE_TEST_S3_ENDPOINT is unset: run scripts/test")
    url, _ = await cloud.new_bucket("s3")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", os.environ[cloud.ENV["s3"]])
    store = await open_object_store(url)  # no storage_options at all
    await store.create("k", b"v")
    assert await store.get("k") == b"v"
    await store.close()


@pytest.mark.emulator
async def test_azure_connection_string_from_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    if not cloud.available("azure"):
        pytest.skip("DURABLE_TEST_AZURE_CONNECTION_STRING is unset: run scripts/test")
    url, _ = await cloud.new_bucket("azure")
    monkeypatch.setenv("AZURE_STORAGE_CONNECTION_STRING", os.environ[cloud.ENV["azure"]])
    store = await open_object_store(url)
    await store.create("k", b"v")
    assert await store.get("k") == b"v"
    await store.close()


def test_backend_errors_become_ours() -> None:
    from azure.core.exceptions import (
        ResourceExistsError,
        ResourceModifiedError,
        ResourceNotFoundError,
    )

    from durable.errors import ObjectExists, ObjectNotFound, ObjectStoreError, ObjectStoreTimeout
    from durable.store.objects.azure import AzureObjectStore

    az = AzureObjectStore(fs=None, root="c/p", url="az://c/p")
    assert isinstance(az.translate(ResourceModifiedError("etag"), "n"), ObjectExists)
    assert isinstance(az.translate(ResourceExistsError("exists"), "n"), ObjectExists)
    assert isinstance(az.translate(ResourceNotFoundError("gone"), "n"), ObjectNotFound)
    assert isinstance(az.translate(TimeoutError(), "n"), ObjectStoreTimeout)
    denied = az.translate(PermissionError("denied"), "n")
    assert isinstance(denied, ObjectStoreError)
    assert denied.transient is False  # retrying will not help
    flaky = az.translate(ConnectionResetError("reset"), "n")
    assert flaky.transient is True
    assert "az://c/p" in str(flaky)
    assert "'n'" in str(flaky)


@pytest.mark.emulator
async def test_gcs_skips_the_grpc_layout_probe() -> None:
    if not cloud.available("gcs"):
        pytest.skip("DURABLE_TEST_GCS_ENDPOINT is unset: run scripts/test")
    url, options = await cloud.new_bucket("gcs")
    store = await open_object_store(url, options)
    assert os.environ["GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT"] == "false"
    assert type(store.fs).__name__ == "GCSFileSystem"  # not the gRPC-probing subclass
    assert store.fs.requests_timeout == 60.0
    await store.close()
