"""Object-store adapters: the only code that talks to a storage backend."""

from durable.store.objects.base import Guarantee, ObjectStore
from durable.store.objects.faults import FaultyObjectStore, SimulatedCrash
from durable.store.objects.local import LocalObjectStore
from durable.store.objects.memory import MemoryObjectStore

__all__ = [
    "FaultyObjectStore",
    "Guarantee",
    "LocalObjectStore",
    "MemoryObjectStore",
    "ObjectStore",
    "SimulatedCrash",
]
