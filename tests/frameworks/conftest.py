"""Shared fixtures for the framework suites: real SDK, in-memory exporters, a
fresh breaker registry and an instrumentor per test."""

from __future__ import annotations

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from otel_breaker import telemetry
from otel_breaker.config import set_settings
from otel_breaker.instrumentation import BreakerInstrumentor
from otel_breaker.registry import default_registry


class Otel:
    """In-memory spans and metrics of one test."""

    def __init__(self) -> None:
        self.spans = InMemorySpanExporter()
        self.tracer_provider = TracerProvider()
        self.tracer_provider.add_span_processor(SimpleSpanProcessor(self.spans))
        self.reader = InMemoryMetricReader()
        self.meter_provider = MeterProvider(metric_readers=[self.reader])

    def finished_spans(self):
        return list(self.spans.get_finished_spans())

    def tool_spans(self, tool: str | None = None):
        return [
            s
            for s in self.finished_spans()
            if s.attributes.get("gen_ai.operation.name") == "execute_tool"
            and s.attributes.get("otel_breaker.guarded")
            and (tool is None or s.attributes.get("gen_ai.tool.name") == tool)
        ]

    def metrics(self) -> dict[str, list]:
        """metric name -> data points."""
        data = self.reader.get_metrics_data()
        found: dict[str, list] = {}
        for resource in data.resource_metrics if data else []:
            for scope in resource.scope_metrics:
                for metric in scope.metrics:
                    found.setdefault(metric.name, []).extend(metric.data.data_points)
        return found

    def metric_value(self, name: str, **attributes) -> float:
        """Sum of the points of ``name`` whose attributes include ``attributes``
        (keys with dots written with underscores, e.g. gen_ai_tool_name)."""
        wanted = {k.replace("__", "."): v for k, v in attributes.items()}
        total = 0.0
        for point in self.metrics().get(name, []):
            attrs = {k.replace(".", "_"): v for k, v in point.attributes.items()}
            if all(attrs.get(k.replace(".", "_")) == v for k, v in wanted.items()):
                total += getattr(point, "value", getattr(point, "count", 0))
        return total


@pytest.fixture
def otel():
    """A real SDK with in-memory exporters wired into otel-breaker's telemetry."""
    setup = Otel()
    telemetry.configure(setup.tracer_provider, setup.meter_provider)
    yield setup
    telemetry.TELEMETRY.reset()


@pytest.fixture(autouse=True)
def fresh_breakers():
    """Every test starts with no breakers and default settings."""
    set_settings(None)
    default_registry().clear()
    yield
    default_registry().clear()
    set_settings(None)


@pytest.fixture
def instrument():
    """``instrument("langchain")`` patches one framework for this test only."""
    instrumentor = BreakerInstrumentor()

    def _instrument(*frameworks: str):
        instrumentor.instrument(frameworks=list(frameworks))
        return instrumentor

    yield _instrument
    if instrumentor.is_instrumented_by_opentelemetry:
        instrumentor.uninstrument()
