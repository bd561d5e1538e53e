"""``@job``: async functions run as background jobs on the engine's workers.

A ``@job`` function is submitted (``await fn.submit(...)`` -> `JobHandle`),
deduplicated by idempotency key (``fn.options(idempotency_key=...)``) and
mapped over many items as a job group (``await fn.map(items)``,
``fn.map_as_completed(items)``, ``await fn.submit_map(items)`` -> `MapHandle`
with its progress). Each call is a one-step run of the
engine's jobs runtime (`durable.engine.jobs`), so it is durable when
``submit`` returns, retried by the queue, and its result or exception is
read back from the store, after a restart too.

Modules: `function` (the decorator, `JobFunction`, `JobSubmitter`),
`handle` (`JobHandle`), `kind` (the engine job type of a function),
`calls` (arguments, map items, workflow rules), `mapping` (job groups),
`registry` (job names), `service` (the workers of an engine).

Importing this package gives every `Engine` created afterwards its
`JobsService` (`durable.decorators.services`).
"""

from durable.decorators.jobs.function import JobFunction, JobSubmitter, job
from durable.decorators.jobs.handle import JobHandle
from durable.decorators.jobs.mapping import MapHandle
from durable.decorators.jobs.service import JobsService
from durable.decorators.services import register_default_service

__all__ = ["JobFunction", "JobHandle", "JobSubmitter", "MapHandle", "job"]

register_default_service(JobsService)
