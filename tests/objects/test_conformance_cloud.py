"""The conformance suite on S3, GCS and Azure, each through its emulator, directly
and below a prefix (`PrefixedObjectStore`)."""

from __future__ import annotations

import pytest
from prefixed_conformance import PrefixedConformance

from durable.store.objects import ObjectStore, open_object_store
from durable.testing import ObjectStoreConformance, cloud

pytestmark = pytest.mark.emulator


class CloudConformance(ObjectStoreConformance):
    backend = ""

    async def make_store(self) -> ObjectStore:
        if not cloud.available(self.backend):
            pytest.skip(f"{cloud.ENV[self.backend]} is unset: run scripts/test")
        url, options = await cloud.new_bucket(self.backend)
        return await open_object_store(url, options)


class TestS3Conformance(CloudConformance):
    backend = "s3"


class TestGCSConformance(CloudConformance):
    backend = "gcs"


class TestAzureConformance(CloudConformance):
    backend = "azure"


class CloudPrefixedConformance(PrefixedConformance):
    backend = ""

    async def make_inner(self) -> ObjectStore:
        if not cloud.available(self.backend):
            pytest.skip(f"{cloud.ENV[self.backend]} is unset: run scripts/test")
        url, options = await cloud.new_bucket(self.backend)
        return await open_object_store(url, options)


class TestS3PrefixedConformance(CloudPrefixedConformance):
    backend = "s3"


class TestGCSPrefixedConformance(CloudPrefixedConformance):
    backend = "gcs"


class TestAzurePrefixedConformance(CloudPrefixedConformance):
    backend = "azure"
