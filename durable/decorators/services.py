"""Default engine services: what every new `Engine` runs beside its workflows.

A *service* has ``async def start(self, engine)`` and ``async def stop(self)``;
`Engine` starts its services once its queue is open and stops them before
it closes. A module that needs one on every engine registers a *factory*
(a function of no arguments returning a new service) when it is imported::

    register_default_service(JobsService)

and each `Engine` calls every factory in `default_services` at
construction, so each engine gets its own service instances. ``@job``
registers the service that runs job workers this way
(`durable.decorators.jobs.service`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from durable.decorators.base import EngineBase

__all__ = ["EngineService", "ServiceFactory", "default_services", "register_default_service"]


class EngineService(Protocol):
    """A component an `Engine` starts after opening its queue and stops before closing it."""

    async def start(self, engine: EngineBase) -> None:
        """Start running on ``engine`` (its queue is open)."""

    async def stop(self) -> None:
        """Stop; the engine's queue is still open."""


#: Builds a new service for a new engine.
ServiceFactory = Callable[[], EngineService]

_factories: list[ServiceFactory] = []


def register_default_service(factory: ServiceFactory) -> ServiceFactory:
    """Give every `Engine` built from now on a service made by ``factory``;
    returns ``factory``. Registering the same factory twice is a no-op."""
    if factory not in _factories:
        _factories.append(factory)
    return factory


def default_services() -> list[ServiceFactory]:
    """The registered factories, in registration order."""
    return list(_factories)
