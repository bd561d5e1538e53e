"""Step and job bodies on a Dask cluster (issue 16, points 1 and 2) on an
in-process `LocalCluster`: results and exceptions come back and are
classified as inline ones, async bodies never block the worker's loop, a
lost client is a transient `WorkerLost`, cancellation discards the result,
and the engine refuses executors it cannot use.

The bodies run on the cluster's worker threads, from pickles: they report
through `note`, a plain module function (pickled by reference, so the
events land in this module's `EVENTS`)."""

from __future__ import annotations

import asyncio
import re
import threading
import time
from collections import Counter
from typing import Any

import distributed
import pytest
from decorator_helpers import LIMIT, Factory, journal_names, make_engine, result

import durable
from durable._logging import capture_logs
from durable.decorators.executors import INLINE, InlineExecutor
from durable.errors import InvalidArgument, RunCancelled, UnknownExecutor, WorkerLost
from durable.executors.dask import DaskExecutor
from durable.store.clock import MockClock

EVENTS: Counter[str] = Counter()
STARTED = threading.Event()


def note(event: str) -> int:
    """Count ``event`` here (called by bodies on the cluster's threads); its count."""
    EVENTS[event] += 1
    if event == "slow started":
        STARTED.set()
    return EVENTS[event]


@pytest.fixture(autouse=True)
def _fresh() -> None:
    EVENTS.clear()
    STARTED.clear()


# ------------------------------------------------------------------ steps


@durable.step(executor="dask")
async def where(x: int) -> tuple[int, str]:
    note("where")
    return x + 1, threading.current_thread().name


def make_scaler(k: int) -> durable.StepFunction[[int], int]:
    @durable.step(executor="dask", name=f"scale-{k}")
    async def scale(x: int) -> int:
        return x * k  # k: a closure cell, pickled with the body

    return scale


SCALE3 = make_scaler(3)


@durable.step(
    executor="dask", max_attempts=3, retry_on=ConnectionError, backoff=durable.Backoff(initial=0)
)
async def flaky() -> str:
    attempt = note("flaky")  # EVENTS here would be the pickled copy
    if attempt < 3:
        raise ConnectionError(f"attempt {attempt}")
    return f"ok after {attempt}"


@durable.step(executor="dask", max_attempts=5, retry_on=ConnectionError)
async def picky() -> None:
    note("picky")
    raise KeyError("not retried")


@durable.workflow
async def computing(x: int) -> list[Any]:
    plus, thread = await where(x)
    tripled = await SCALE3(x)
    first = await flaky()
    try:
        await picky()
    except KeyError as e:
        second = f"KeyError {e}"
    return [plus, thread == threading.current_thread().name, tripled, first, second]


async def test_results_and_exceptions_come_back_classified_as_inline(
    make_objects: Factory, clock: MockClock, client: distributed.Client
) -> None:
    async with make_engine(make_objects, clock, executors={"dask": client}):
        handle = await computing.start(4)
        # Ran on a worker's thread (not this one); the closure kept k = 3;
        # ConnectionError retried per retry_on; KeyError not (1 call of 5).
        assert await result(handle) == [5, False, 12, "ok after 3", "KeyError 'not retried'"]
        assert dict(EVENTS) == {"where": 1, "flaky": 3, "picky": 1}
        names = [name for _, _, name in await journal_names(handle._engine, handle.run_id)]
        assert names[:2] == [where.name, "scale-3"]


async def test_sync_async_and_closure_bodies_through_the_executor(
    client: distributed.Client,
) -> None:
    executor = DaskExecutor(client)

    def plain(a: int, b: int = 0) -> str:
        return f"{a}+{b} on {threading.current_thread().name}"

    async def coro(a: int) -> int:
        await asyncio.sleep(0.01)
        return a * 2

    offset = 7
    assert (await executor.run(lambda v: v + offset, (1,), {}, key="r/0/1")) == 8
    assert (await executor.run(coro, (21,), {}, key="r/1/1")) == 42
    text = await executor.run(plain, (1,), {"b": 2}, key="r/2/1")
    assert text.startswith("1+2 on ")
    assert threading.current_thread().name not in text
    # The in-process executor calls the same way.
    assert (await InlineExecutor().run(coro, (2,), {}, key="r/3/1")) == 4


@durable.step(executor="dask")
async def blocking(seconds: float) -> tuple[float, float]:
    began = time.perf_counter()
    time.sleep(seconds)  # noqa: ASYNC251 (blocks its thread: never the worker's event loop)
    return began, time.perf_counter()


@durable.workflow
async def blocking_pair() -> list[tuple[float, float]]:
    return list(await asyncio.gather(blocking(1.0), blocking(1.0)))


async def test_a_blocking_async_body_does_not_block_the_loop(
    make_objects: Factory, clock: MockClock, client: distributed.Client
) -> None:
    # In-process workers share this event loop: an async body run on the
    # worker's loop would stall it (and the engine) for the whole second.
    gaps: list[float] = []

    async def ticker() -> None:
        last = time.perf_counter()
        while True:
            await asyncio.sleep(0.01)
            now = time.perf_counter()
            gaps.append(now - last)
            last = now

    async with make_engine(make_objects, clock, executors={"dask": client}):
        tick = asyncio.create_task(ticker())
        try:
            (a0, a1), (b0, b1) = await result(await blocking_pair.start())
        finally:
            tick.cancel()
    assert max(a0, b0) < min(a1, b1), "the two bodies did not run at once, on two workers"
    # A body on the loop would stall it for a whole second; a loaded host, far less.
    assert max(gaps) < 0.6, max(gaps)


# ------------------------------------------------------- configuration


@durable.step(executor="gpu", max_attempts=3, backoff=durable.Backoff(initial=0))
async def on_gpu() -> None:
    note("gpu")


@durable.workflow
async def needs_gpu() -> str:
    try:
        await on_gpu()
    except UnknownExecutor as e:
        return str(e)
    return "ran"


@pytest.mark.parametrize("with_dask", [False, True])
async def test_an_unknown_executor_fails_the_step_permanently(
    make_objects: Factory, clock: MockClock, client: distributed.Client, with_dask: bool
) -> None:
    executors = {"dask": client} if with_dask else None
    async with make_engine(make_objects, clock, executors=executors):
        message = await result(await needs_gpu.start())
    assert "'gpu'" in message
    assert "'inline'" in message
    assert ("'dask'" in message) is with_dask
    assert EVENTS["gpu"] == 0  # not run, not retried


class Recorder:
    """A protocol executor: calls the body inline, keeps the keys."""

    def __init__(self) -> None:
        self.keys: list[str] = []

    async def run(self, fn: Any, args: Any, kwargs: Any, *, key: str) -> Any:
        self.keys.append(key)
        return await fn(*args, **kwargs)


@durable.step(executor="mine")
async def mine(x: int) -> int:
    return -x


@durable.workflow
async def on_mine() -> list[int]:
    return [await mine(1), await mine(2)]


async def test_any_protocol_object_is_an_executor(make_objects: Factory, clock: MockClock) -> None:
    recorder = Recorder()
    async with make_engine(make_objects, clock, executors={"mine": recorder}):
        handle = await on_mine.start()
        assert await result(handle) == [-1, -2]
    assert recorder.keys == [f"{handle.run_id}/0/1", f"{handle.run_id}/1/1"]


class SyncRun:
    def run(self, fn: Any, args: Any, kwargs: Any, *, key: str) -> Any:
        return fn(*args, **kwargs)


@pytest.mark.parametrize(
    ("executors", "needle"),
    [
        ({INLINE: "client"}, "reserved"),
        ({1: "client"}, "names"),
        ({"": "client"}, "names"),
        ({"x": object()}, "executors['x']"),
        ({"x": SyncRun()}, "executors['x']"),
        ([("x", "client")], "mapping"),
    ],
)
async def test_bad_executors_are_refused(
    client: distributed.Client, executors: Any, needle: str
) -> None:
    if isinstance(executors, dict):
        executors = {k: client if v == "client" else v for k, v in executors.items()}
    with pytest.raises(InvalidArgument, match=re.escape(needle)):
        durable.Engine("memory://bad-executors", executors=executors)


async def test_codec_msgpack_with_an_executor_is_refused(client: distributed.Client) -> None:
    with pytest.raises(InvalidArgument, match=r"msgpack.*pickle"):
        durable.Engine("memory://msgpack-dask", codec="msgpack", executors={"dask": client})
    durable.Engine("memory://msgpack-inline", codec="msgpack")  # inline alone: fine


def test_step_and_job_executor_names_are_checked_at_decoration() -> None:
    with pytest.raises(durable.DecoratorError, match="executor"):
        durable.step(executor="")
    with pytest.raises(durable.DecoratorError, match="executor"):
        durable.job(executor=3)  # type: ignore[arg-type]


async def test_allowed_failures_not_zero_warns_once(client: distributed.Client) -> None:
    executor = DaskExecutor(client)
    with capture_logs() as logs:
        for i in range(2):
            assert await executor.run(abs, (-i,), {}, key=f"r/{i}/1") == i
    warnings = [e for e in logs if "allowed-failures" in e["event"]]
    assert len(warnings) == 1
    assert warnings[0]["allowed_failures"] == 3  # Dask's default, read on the scheduler
    assert warnings[0]["source"] == "the scheduler"


# ------------------------------------------------- cancellation, lost client


@durable.step(executor="dask")
async def slow() -> str:
    note("slow started")
    time.sleep(0.5)  # noqa: ASYNC251 (cannot be interrupted)
    note("slow finished")
    return "done"


@durable.workflow
async def slow_run() -> str:
    return await slow()


async def test_cancelling_a_run_cancels_its_future_and_discards_the_result(
    make_objects: Factory, clock: MockClock, client: distributed.Client
) -> None:
    async with make_engine(make_objects, clock, executors={"dask": client}) as engine:
        handle = await slow_run.start()
        assert await asyncio.to_thread(STARTED.wait, LIMIT)
        assert await handle.cancel()
        with pytest.raises(RunCancelled):
            await result(handle)
        cancelled_at = time.perf_counter()

        def ours(dask_scheduler: Any, prefix: str = handle.run_id) -> list[str]:
            return [str(k) for k in dask_scheduler.tasks if str(k).startswith(prefix)]

        while await client.run_on_scheduler(ours):
            assert time.perf_counter() - cancelled_at < 1.0, "the future outlived 1 s"
            await asyncio.sleep(0.02)
        assert await journal_names(engine, handle.run_id) == []  # the step never settled
        status = await handle.status()
        assert status.state is durable.WorkflowState.CANCELLED
    # The body was not interrupted: it ran on, unobserved.
    await asyncio.to_thread(time.sleep, 0.6)
    assert EVENTS["slow finished"] == 1


class Reconnecting:
    """A closed client's executor first, then a live one's: a lost
    connection that comes back."""

    def __init__(self, closed: DaskExecutor, live: DaskExecutor) -> None:
        self.executors = [closed, live]
        self.calls = 0

    async def run(self, fn: Any, args: Any, kwargs: Any, *, key: str) -> Any:
        self.calls += 1
        executor = self.executors[0] if self.calls == 1 else self.executors[1]
        return await executor.run(fn, args, kwargs, key=key)


@durable.step(
    executor="dask", max_attempts=2, retry_on=KeyError, backoff=durable.Backoff(initial=0)
)
async def resilient() -> str:
    note("resilient")
    return "ok"


@durable.step(executor="dask")
async def fragile() -> str:
    note("fragile")
    return "ok"


@durable.workflow
async def over_lost_client() -> str:
    return await resilient()


@durable.workflow
async def on_closed_client() -> str:
    try:
        return await fragile()
    except WorkerLost as e:
        return f"{e.step} {e.executor} {e.run_id == durable.run_id()}: {e}"


async def test_a_closed_client_is_a_transient_error_retried_by_the_policy(
    make_objects: Factory,
    clock: MockClock,
    cluster: distributed.LocalCluster,
    client: distributed.Client,
) -> None:
    closed = await distributed.Client(cluster, asynchronous=True)
    await closed.close()
    executor = Reconnecting(DaskExecutor(closed), DaskExecutor(client))
    async with make_engine(make_objects, clock, executors={"dask": executor}):
        # Lost once (retried although retry_on=KeyError), then ran on the live client.
        assert await result(await over_lost_client.start()) == "ok"
    assert executor.calls == 2
    assert dict(EVENTS) == {"resilient": 1}

    async with make_engine(make_objects, clock, executors={"dask": closed}):
        message = await result(await on_closed_client.start())
    # One attempt (the default policy): the error names the step, the executor and the run.
    assert message.startswith(f"{fragile.name} dask True: step {fragile.name!r} of run ")
    assert "ClosedClientError" in message
    assert EVENTS["fragile"] == 0


# ------------------------------------------------------------------- jobs


@durable.job(executor="dask")
async def remote_job(x: int) -> tuple[int, bool]:
    note("job")
    return x * 10, threading.current_thread() is threading.main_thread()


@durable.job(executor="tpu", max_attempts=3)
async def tpu_job() -> None:
    note("tpu")


async def test_jobs_run_on_their_executor(
    make_objects: Factory, clock: MockClock, client: distributed.Client
) -> None:
    async with make_engine(make_objects, clock, executors={"dask": client}):
        assert await asyncio.wait_for(remote_job(4), LIMIT) == (40, False)
        with pytest.raises(UnknownExecutor, match=r"'tpu'.*'dask', 'inline'"):
            await asyncio.wait_for(tpu_job(), LIMIT)
    assert dict(EVENTS) == {"job": 1}  # tpu_job: failed at once, never run


async def test_the_executor_shortens_its_clients_send_interval(
    cluster: distributed.LocalCluster,
) -> None:
    """A workflow's steps run one after another: each submission leaves the
    client within `send_interval` (1 ms), not Dask's 10 ms; None keeps Dask's."""
    async with distributed.Client(cluster, asynchronous=True) as client:
        dask_default = client.scheduler_comm.interval
        assert dask_default == 0.01
        untouched = DaskExecutor(client, send_interval=None)
        assert await untouched.run(abs, (-1,), {}, key="r/0/1") == 1
        assert client.scheduler_comm.interval == dask_default
        assert await DaskExecutor(client).run(abs, (-2,), {}, key="r/1/1") == 2
        assert client.scheduler_comm.interval == 0.001
        assert await DaskExecutor(client, send_interval=0.004).run(abs, (-3,), {}, key="r/2/1")
        assert client.scheduler_comm.interval == 0.001  # never made longer
    for bad in (0, -1, 2, "1ms", True):
        with pytest.raises(InvalidArgument, match="send_interval"):
            DaskExecutor(client, send_interval=bad)  # type: ignore[arg-type]


@durable.step(executor="dask")
def plain_on_dask(x: int) -> tuple[int, str]:
    """A plain `def` step named for the Dask executor: on the cluster, not in the engine's pool."""
    return x * 10, threading.current_thread().name


@durable.job(executor="dask")
def plain_job_on_dask(x: int) -> str:
    return f"{x} on {threading.current_thread().name}"


@durable.workflow
async def plain_on_the_cluster(x: int) -> tuple[int, str]:
    return await plain_on_dask(x)


async def test_a_def_step_and_job_on_the_dask_executor_run_on_the_cluster(
    make_objects: Factory, clock: MockClock, client: distributed.Client
) -> None:
    async with make_engine(make_objects, clock, executors={"dask": client}):
        value, thread = await result(await plain_on_the_cluster.start(4))
        job_out = await asyncio.wait_for(plain_job_on_dask(5), LIMIT)
    assert value == 40
    assert not thread.startswith("durable-sync")
    assert thread != threading.current_thread().name
    assert job_out.startswith("5 on ")
    assert "durable-sync" not in job_out
