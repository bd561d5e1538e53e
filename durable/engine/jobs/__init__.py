"""Typed jobs: one typed async function run as a single-step run.

Define a `Job` (a dataclass: its fields are the input, ``NAME`` its stable
name, ``run`` the work), register it on a `JobRunner`, spawn a worker,
submit instances and await the `JobHandle`::

    @dataclass
    class SendEmail(Job[str]):
        NAME: ClassVar[str] = "email.send"
        to: str

        async def run(self, ctx: JobContext) -> str:
            return f"msg-for-{self.to}"

    runner = JobRunner(queue)
    runner.register(SendEmail)
    worker = runner.spawn()
    message_id = await (await runner.submit(SendEmail("user@example.com")))
    await worker.shutdown()

A `JobGroup` (`JobRunner.group`) is a run group of jobs of one type.
Modules: `job` (the definition), `codec` (how jobs and outputs are
stored), `context` (what a running job sees), `handle`, `runner`, `groups`.
"""

from durable.engine.jobs.context import JobContext
from durable.engine.jobs.groups import JobGroup, JobMemberResult
from durable.engine.jobs.handle import JobHandle
from durable.engine.jobs.job import Job
from durable.engine.jobs.runner import (
    DEFAULT_JOBS_QUEUE,
    JobRunner,
    JobRunnerOptions,
    job_id_for_key,
)

__all__ = [
    "DEFAULT_JOBS_QUEUE",
    "Job",
    "JobContext",
    "JobGroup",
    "JobHandle",
    "JobMemberResult",
    "JobRunner",
    "JobRunnerOptions",
    "job_id_for_key",
]
