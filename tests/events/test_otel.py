"""OpenTelemetry spans of runs and steps (`durable.otel`), issue 17 point 5.

The SDK's in-memory exporter collects the spans of real engines on a local
store. A run's delivery span is a child of the span that was current at
``start()``, in this process and when a client engine in another process
started the run through the store's inbox.
"""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import durable
import durable.otel

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    durable.otel.instrument(provider)
    try:
        yield exporter
    finally:
        durable.otel.uninstrument()
        provider.shutdown()


@durable.step(name="otel.add")
async def add(a: int, b: int) -> int:
    return a + b


@durable.workflow(name="otel.traced")
async def traced(x: int) -> int:
    return await add(await add(x, 1), 2)


def _runs(exporter: InMemorySpanExporter, run_id: str) -> list[ReadableSpan]:
    return [
        s
        for s in exporter.get_finished_spans()
        if s.attributes is not None and s.attributes.get("durable.run_id") == run_id
    ]


async def test_a_run_and_its_steps_are_spans_under_the_callers(
    tmp_path: Path, spans: InMemorySpanExporter
) -> None:
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(spans))
    async with durable.Engine(str(tmp_path / "store")):
        with provider.get_tracer("test").start_as_current_span("request") as caller:
            handle = await traced.options(run_id="otel-1").start(1)
        assert await handle.result(timeout=30) == 4
    mine = _runs(spans, "otel-1")
    [run] = [s for s in mine if s.name == "durable.run otel.traced"]
    steps = sorted((s for s in mine if s.name == "durable.step otel.add"), key=_position)
    assert run.context is not None
    assert caller.get_span_context().trace_id == run.context.trace_id
    assert run.parent is not None
    assert run.parent.span_id == caller.get_span_context().span_id
    assert run.attributes is not None
    assert run.attributes["durable.workflow"] == "otel.traced"
    assert run.attributes["durable.outcome"] == "Succeed"
    assert [_position(s) for s in steps] == [0, 1]
    for s in steps:
        assert s.parent is not None
        assert s.parent.span_id == run.context.span_id
        assert s.attributes is not None
        assert s.attributes["durable.step"] == "otel.add"
        assert s.attributes["durable.workflow"] == "otel.traced"


def _position(span: ReadableSpan) -> int:
    assert span.attributes is not None
    position = span.attributes["durable.position"]
    assert isinstance(position, int)
    return position


async def test_without_instrument_nothing_is_traced(tmp_path: Path) -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    async with durable.Engine(str(tmp_path / "store")):
        with provider.get_tracer("test").start_as_current_span("request"):
            handle = await traced.options(run_id="otel-2").start(1)
        assert await handle.result(timeout=30) == 4
        status = await handle.status()
    assert [s.name for s in exporter.get_finished_spans()] == ["request"]
    assert status is not None


CLIENT = """
import asyncio, sys
from opentelemetry.sdk.trace import TracerProvider
import durable, durable.otel

@durable.step(name="otel.add")
async def add(a: int, b: int) -> int:
    return a + b

@durable.workflow(name="otel.traced")
async def traced(x: int) -> int:
    return await add(await add(x, 1), 2)

async def main() -> None:
    provider = TracerProvider()
    durable.otel.instrument(provider)
    async with durable.Engine(sys.argv[1], role="client"):
        with provider.get_tracer("client").start_as_current_span("client-request") as span:
            handle = await traced.options(run_id="otel-client").start(5)
            ctx = span.get_span_context()
            print(f"{ctx.trace_id:032x} {ctx.span_id:016x}", flush=True)
        print(await handle.result(timeout=60), flush=True)

asyncio.run(main())
"""


@pytest.mark.slow
async def test_a_client_process_start_joins_the_callers_trace(
    tmp_path: Path, spans: InMemorySpanExporter
) -> None:
    store = str(tmp_path / "store")
    async with durable.Engine(store):
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-c",
            CLIENT,
            store,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
        )
        out, err = await asyncio.wait_for(proc.communicate(), 90)
    assert proc.returncode == 0, err.decode()
    ids, result = out.decode().split("\n")[:2]
    assert result == "8"
    trace_id, span_id = ids.split()
    [run] = [s for s in _runs(spans, "otel-client") if s.name.startswith("durable.run")]
    assert run.context is not None
    assert f"{run.context.trace_id:032x}" == trace_id
    assert run.parent is not None
    assert f"{run.parent.span_id:016x}" == span_id
    steps = [s for s in _runs(spans, "otel-client") if s.name.startswith("durable.step")]
    assert len(steps) == 2
    assert all(s.context is not None and s.context.trace_id == run.context.trace_id for s in steps)
