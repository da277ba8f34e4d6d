"""A real OpenTelemetry SDK with in-memory exporters, for tests."""

from __future__ import annotations

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from otel_breaker import telemetry


class Otel:
    """In-memory spans and metrics of one test, wired into otel-breaker's telemetry."""

    def __init__(self, **options) -> None:
        self.spans = InMemorySpanExporter()
        self.tracer_provider = TracerProvider()
        self.tracer_provider.add_span_processor(SimpleSpanProcessor(self.spans))
        self.reader = InMemoryMetricReader()
        self.meter_provider = MeterProvider(metric_readers=[self.reader])
        telemetry.configure(self.tracer_provider, self.meter_provider, **options)

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

    def metric_objects(self) -> dict:
        """metric name -> the SDK Metric (name, unit, description, data)."""
        data = self.reader.get_metrics_data()
        found = {}
        for resource in data.resource_metrics if data else []:
            for scope in resource.scope_metrics:
                for metric in scope.metrics:
                    found[metric.name] = metric
        return found

    def metrics(self) -> dict[str, list]:
        """metric name -> data points."""
        return {name: list(m.data.data_points) for name, m in self.metric_objects().items()}

    def metric_value(self, name: str, **attributes) -> float:
        """Like :meth:`value`; attribute names may also be written with ``__`` for ``.``."""
        return self.value(name, **{k.replace("__", "_"): v for k, v in attributes.items()})

    def value(self, name: str, **attributes) -> float:
        """Sum over the points of ``name`` whose attributes match ``attributes``
        (attribute names written with ``_`` for ``.``)."""
        total = 0.0
        for point in self.metrics().get(name, []):
            attrs = {k.replace(".", "_"): v for k, v in point.attributes.items()}
            if all(attrs.get(k) == v for k, v in attributes.items()):
                total += getattr(point, "value", None) if hasattr(point, "value") else point.count
        return total
