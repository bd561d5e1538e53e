"""Object-store adapters: the only code that talks to a storage backend."""

from durable.store.objects.base import Guarantee, ObjectStore

__all__ = ["Guarantee", "ObjectStore"]
