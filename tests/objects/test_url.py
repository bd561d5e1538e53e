"""Opening stores from URLs, and the providers' environment variables."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from durable.errors import InvalidStoreUrl, MissingGuarantee, ObjectNotFound, StoreNotFound
from durable.store.log import LogReader, LogWriter, WriteBatch
from durable.store.objects import (
    FsspecObjectStore,
    Guarantee,
    LocalObjectStore,
    MemoryObjectStore,
    SegmentObjectStore,
    open_object_store,
    split_url,
)
from durable.store.objects.url import check_store_url, check_writer_url
from durable.store.queue import Queue, QueueReader
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
        assert isinstance(store, LocalObjectStore | SegmentObjectStore)
        assert store.root == str(tmp_path / "a")
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


# --- locations that cannot be opened (issue 13 point 11) ----------------------


@pytest.mark.parametrize("url", ["foo://bar", "FOO://bar/baz", "notaprotocol://x"])
async def test_an_unknown_scheme_is_refused_naming_the_url_and_the_known_schemes(
    url: str,
) -> None:
    with pytest.raises(InvalidStoreUrl) as exc:
        await open_object_store(url)
    assert isinstance(exc.value, ValueError)
    message = str(exc.value)
    assert repr(url) in message
    for scheme in ("file://", "memory://", "s3://", "gs://", "az://"):
        assert scheme in message
    with pytest.raises(InvalidStoreUrl):
        await Queue.open(url)
    with pytest.raises(InvalidStoreUrl):
        await QueueReader.open(url)


@pytest.mark.parametrize("url", [123, None, b"/tmp/x", 1.5])
async def test_a_location_that_is_not_a_path_or_url_is_refused(url: object) -> None:
    with pytest.raises(InvalidStoreUrl, match="a path, a URL string or an ObjectStore") as exc:
        await open_object_store(url)  # type: ignore[arg-type]
    assert type(url).__name__ in str(exc.value)
    with pytest.raises(InvalidStoreUrl):
        await Queue.open(url)  # type: ignore[arg-type]


@pytest.mark.parametrize("url", ["", "file://", "  "])
async def test_an_empty_path_is_refused_not_taken_for_the_working_directory(url: str) -> None:
    with pytest.raises(InvalidStoreUrl, match="empty"):
        await open_object_store(url)


def test_writer_urls_are_checked_without_io() -> None:
    assert check_writer_url("s3://bucket/prefix") == ("s3", "bucket/prefix")
    assert check_writer_url("memory://x") == ("memory", "x")
    assert check_store_url("http://host/x") == ("http", "host/x")  # a reader may open it
    with pytest.raises(InvalidStoreUrl, match="read-only"):
        check_writer_url("http://host/x")
    with pytest.raises(InvalidStoreUrl, match="names no bucket"):
        check_writer_url("gs://")


async def test_a_missing_local_directory_is_created(tmp_path: Path) -> None:
    root = tmp_path / "not" / "yet"
    w = await LogWriter.open(await open_object_store(root))
    await w.commit(WriteBatch().put(b"k", b"v"))
    await w.close()
    assert (root / "segments").is_dir()  # a new local directory keeps its log in segments


def test_a_write_that_finds_no_bucket_names_the_bucket() -> None:
    from azure.core.exceptions import ResourceNotFoundError

    from durable.store.objects.azure import AzureObjectStore
    from durable.store.objects.s3 import S3ObjectStore

    s3 = S3ObjectStore(fs=None, root="bkt/p", url="s3://bkt/p")
    gone = s3.translate(
        FileNotFoundError("The specified bucket does not exist"), "probe/x", writing=True
    )
    assert isinstance(gone, StoreNotFound)
    assert isinstance(gone, LookupError)
    assert "S3 bucket 'bkt'" in str(gone)
    assert "create it" in str(gone)
    # A read that finds nothing is still just a missing object.
    assert isinstance(s3.translate(FileNotFoundError("x"), "log/1"), ObjectNotFound)
    az = AzureObjectStore(fs=None, root="ctr/p", url="az://ctr/p")
    missing = az.translate(ResourceNotFoundError("ContainerNotFound"), "n", writing=True)
    assert isinstance(missing, StoreNotFound)
    assert "Azure container 'ctr'" in str(missing)
    # A filesystem with directories does not claim a missing bucket.
    plain = FsspecObjectStore(fs=None, root="dir/p", url="sftp://dir/p")
    assert isinstance(plain.translate(FileNotFoundError("x"), "n", writing=True), ObjectNotFound)


@pytest.mark.emulator
@pytest.mark.parametrize("backend", cloud.CLOUD_BACKENDS)
async def test_a_missing_bucket_or_container_raises_store_not_found(backend: str) -> None:
    if not cloud.available(backend):
        pytest.skip(f"{cloud.ENV[backend]} is unset: run scripts/test")
    scheme = {"s3": "s3", "gcs": "gs", "azure": "az"}[backend]
    bucket = "durable-missing-" + os.urandom(6).hex()
    url = f"{scheme}://{bucket}/prefix"
    options = cloud.storage_options(backend)
    kind = {"s3": "S3 bucket", "gcs": "GCS bucket", "azure": "Azure container"}[backend]
    with pytest.raises(StoreNotFound) as exc:
        await Queue.open(url, storage_options=options)
    assert f"{kind} {bucket!r} does not exist" in str(exc.value)
    assert "create it" in str(exc.value)
    assert exc.value.url == url
    store = await open_object_store(url, options)
    try:
        with pytest.raises(StoreNotFound):
            await LogWriter.open(store)
        with pytest.raises(StoreNotFound):
            await store.put("x", b"1")
        with pytest.raises(ObjectNotFound):
            await store.get("x")
    finally:
        await store.close()
