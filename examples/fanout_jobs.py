"""Typed jobs: fan-out from a running job, a job group, idempotent resubmission.

    python -m examples.fanout_jobs [STORE_DIR]

A `Job` is a dataclass (its fields are the input) with a stable ``NAME`` and
an ``async def run(self, ctx)`` returning the output. A `JobRunner` runs
each job as a single-step run and returns its output to whoever awaits the
`JobHandle`, from the store: so the answer is there after a restart too.

- `PublishAlbum` fans out one `Thumbnail` job per image with
  `ctx.submit`. The children run on their own (independent of the parent);
  their idempotency keys derive from the parent's job id, so a retried
  parent finds its children instead of submitting them twice.
- `runner.group("gallery", Thumbnail)` submits a batch as one durable set
  and `join()` returns the typed results in submission order.
- Submitting a job again with the same idempotency key (here: the
  `Thumbnail.idempotency_key` of the image and size) returns the same job,
  finished or not: nothing renders twice.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from durable.engine.jobs import Job, JobContext, JobRunner
from durable.store.queue import Queue
from examples._store_dir import run_with_store


class Renderer:
    """Shared state of the jobs (`runner.provide`): counts real renders."""

    def __init__(self) -> None:
        self.renders = 0

    async def render(self, image: str, size: int) -> bytes:
        self.renders += 1
        await asyncio.sleep(0.01)  # pretend this is slow
        return f"<{size}px {image}>".encode()


@dataclass
class Thumb:
    """A thumbnail job's output: rebuilt as this dataclass by the handle."""

    image: str
    size: int
    nbytes: int


@dataclass
class Thumbnail(Job[Thumb]):
    NAME: ClassVar[str] = "images.thumbnail"
    image: str
    size: int = 128

    def idempotency_key(self) -> str | None:
        return f"thumb:{self.image}@{self.size}"

    async def run(self, ctx: JobContext) -> Thumb:
        data = await ctx.state(Renderer).render(self.image, self.size)
        return Thumb(self.image, self.size, len(data))


@dataclass
class PublishAlbum(Job[list[str]]):
    NAME: ClassVar[str] = "albums.publish"
    album: str
    images: list[str]

    async def run(self, ctx: JobContext) -> list[str]:
        children = [
            await ctx.submit(Thumbnail(image), idempotency_key=f"{ctx.job_id}/{image}")
            for image in self.images
        ]
        print(f"  {self.album}: fanned out {len(children)} thumbnail jobs")
        return [child.id for child in children]  # the children run on their own


async def main(store: Path) -> None:
    async with await Queue.open(store) as queue:
        renderer = Renderer()
        runner = JobRunner(queue)
        runner.register(Thumbnail)
        runner.register(PublishAlbum)
        runner.provide(renderer)
        worker = runner.spawn()
        try:
            # 1. A parent job fans out children; the caller awaits both.
            parent = await runner.submit(PublishAlbum("holidays", ["beach.jpg", "hike.jpg"]))
            child_ids = await asyncio.wait_for(parent, 30)
            thumbs = [await runner.handle(job_id, Thumbnail) for job_id in child_ids]
            for thumb in thumbs:
                print(f"  child {thumb.image}: {thumb.size}px, {thumb.nbytes} bytes")

            # 2. A job group: one durable set, joined in submission order.
            group = runner.group("gallery", Thumbnail)
            batch = [Thumbnail(f"img-{i}.png", 64) for i in range(5)]
            await group.submit(batch)
            joined = await asyncio.wait_for(group.join(), 30)
            print(f"group {group.group_id!r}: " + ", ".join(r.result().image for r in joined))
            status = await group.status()
            print(f"group status: {status.succeeded}/{status.total} succeeded")

            # 3. Idempotent resubmission: the same key answers from the store.
            renders = renderer.renders
            first = await runner.submit(Thumbnail("cover.jpg", 512))
            print(f"cover: {await first}, newly submitted: {first.newly_submitted}")
            again = await runner.submit(Thumbnail("cover.jpg", 512))
            same = again.id == first.id
            print(f"cover again: same job: {same}, newly submitted: {again.newly_submitted}")
            print(f"cover again: {await again}")
            handles = await group.submit(batch)  # the whole group again
            print(f"group again: {sum(h.newly_submitted for h in handles)} jobs submitted")
            print(f"renders since the group's join: {renderer.renders - renders} (the cover, once)")
        finally:
            await worker.shutdown()
        print(f"total renders: {renderer.renders}")


if __name__ == "__main__":
    run_with_store(main)
