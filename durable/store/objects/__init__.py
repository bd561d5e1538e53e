"""Object-store adapters: the only code that talks to a storage backend."""

from durable.store.objects.base import Guarantee, ObjectLock, ObjectStore
from durable.store.objects.faults import FaultyObjectStore, SimulatedCrash
from durable.store.objects.fsspec_store import FsspecObjectStore
from durable.store.objects.local import LocalObjectStore
from durable.store.objects.memory import MemoryObjectStore
from durable.store.objects.prefixed import PrefixedObjectStore
from durable.store.objects.segments import SegmentObjectStore
from durable.store.objects.url import open_object_store, resolve_store, split_url

__all__ = [
    "FaultyObjectStore",
    "FsspecObjectStore",
    "Guarantee",
    "LocalObjectStore",
    "MemoryObjectStore",
    "ObjectLock",
    "ObjectStore",
    "PrefixedObjectStore",
    "SegmentObjectStore",
    "SimulatedCrash",
    "open_object_store",
    "resolve_store",
    "split_url",
]
