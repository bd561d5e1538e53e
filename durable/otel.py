"""OpenTelemetry spans for runs and steps (the ``otel`` extra).

```python
import durable.otel

durable.otel.instrument()          # the global tracer provider, or pass one
```

From then on, in this process:

- ``start()`` of a workflow (also on an ``Engine(url, role="client")``,
  whose start travels through the store's inbox) stores the caller's
  current trace context with the run, as W3C ``traceparent`` (and
  ``tracestate``) headers of the run (a ``traceparent`` given in
  ``.options(headers=...)`` is kept as is);
- each delivery of a run is a span ``durable.run <workflow>`` whose parent
  is that stored context, so a run's spans join the trace of the request
  that started it, in whichever process runs it; a run that waits
  (a signal, a sleep, a child) has one such span per delivery;
- each step that runs (not one answered from the journal) is a span
  ``durable.step <name>``, child of its delivery's span.

Attributes: ``durable.run_id``, ``durable.workflow``, ``durable.delivery``,
``durable.step``, ``durable.position``, ``durable.outcome``. Only this
module imports ``opentelemetry``; the engine reaches it through
`durable.events.TRACING`.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from opentelemetry import trace
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from durable import events

__all__ = ["instrument", "uninstrument"]

_PROPAGATOR = TraceContextTextMapPropagator()


class _Tracing:
    """`durable.events.Tracing` on an OpenTelemetry tracer."""

    def __init__(self, provider: trace.TracerProvider | None) -> None:
        from durable import __version__

        self.tracer = trace.get_tracer("durable", __version__, tracer_provider=provider)

    def inject(self, headers: dict[str, str]) -> None:
        if "traceparent" not in headers:
            _PROPAGATOR.inject(headers)

    @contextmanager
    def run_span(self, run_id: str, delivery: int, headers: Mapping[str, str]) -> Iterator[Any]:
        parent = _PROPAGATOR.extract(dict(headers)) if "traceparent" in headers else None
        attributes: dict[str, Any] = {"durable.run_id": run_id, "durable.delivery": delivery}
        with self.tracer.start_as_current_span(
            "durable.run", context=parent, kind=trace.SpanKind.CONSUMER, attributes=attributes
        ) as span:
            yield span

    @contextmanager
    def step_span(self, run_id: str, step: str, position: int) -> Iterator[Any]:
        attributes = {
            "durable.run_id": run_id,
            "durable.workflow": events.bound().get("workflow", ""),
            "durable.step": step,
            "durable.position": position,
        }
        with self.tracer.start_as_current_span(
            f"durable.step {step}", attributes=attributes
        ) as span:
            yield span

    def annotate(self, **attributes: Any) -> None:
        span = trace.get_current_span()
        for key, value in attributes.items():
            if value is None:
                continue
            if key == "workflow":
                span.update_name(f"durable.run {value}")
            span.set_attribute(f"durable.{key}", value)


def instrument(tracer_provider: trace.TracerProvider | None = None) -> None:
    """Report spans of runs and steps to ``tracer_provider`` (default: the
    global one) and carry trace context from ``start()`` into runs; see the
    module docstring. Calling it again replaces the provider."""
    events.TRACING = _Tracing(tracer_provider)


def uninstrument() -> None:
    """Stop tracing: no spans, no trace context stored at ``start()``."""
    events.TRACING = None
