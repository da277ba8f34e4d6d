"""Telemetry cost per call, against the SDK's own unavoidable work as the floor.

* metrics on, tracing off: a guarded call vs one SDK ``Histogram.record``;
* tracing on: a guarded call vs the SDK's own work for the same span (``start_as_current_span``
  with the same attributes) plus that record made inside it;
* ``duration_metric=False``: only observable instruments, nothing per call.
"""

from __future__ import annotations

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult

from otel_breaker import CircuitBreaker, telemetry


class DiscardingExporter(SpanExporter):
    def export(self, spans):
        return SpanExportResult.SUCCESS


def tool() -> int:
    return 1


@pytest.fixture
def meter_provider():
    provider = MeterProvider(metric_readers=[InMemoryMetricReader()])
    yield provider
    provider.shutdown()


@pytest.fixture
def tracer_provider():
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(DiscardingExporter()))
    return provider


@pytest.mark.benchmark(group="metrics on, tracing off")
def test_floor_sdk_histogram_record(benchmark, meter_provider):
    histogram = meter_provider.get_meter("floor").create_histogram("floor.duration", unit="s")
    attributes = {"gen_ai.tool.name": "tool"}
    benchmark(histogram.record, 0.01, attributes)


@pytest.mark.benchmark(group="metrics on, tracing off")
def test_guarded_call_with_metrics(benchmark, meter_provider):
    telemetry.configure(meter_provider=meter_provider)
    benchmark(CircuitBreaker("tool").call, tool)


@pytest.mark.benchmark(group="metrics on, tracing off")
def test_guarded_call_without_duration_metric(benchmark, meter_provider):
    telemetry.configure(meter_provider=meter_provider, duration_metric=False)
    benchmark(CircuitBreaker("tool").call, tool)


@pytest.mark.benchmark(group="tracing and metrics on")
def test_floor_sdk_span_and_record(benchmark, tracer_provider, meter_provider):
    tracer = tracer_provider.get_tracer("floor")
    histogram = meter_provider.get_meter("floor").create_histogram("floor.duration", unit="s")
    attributes = {"gen_ai.tool.name": "tool"}
    span_attributes = {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": "tool",
        "gen_ai.tool.type": "function",
        "otel_breaker.state": "closed",
        "otel_breaker.rejected": False,
    }

    def floor():
        # What an instrumentation does for the span the GenAI conventions and the issue ask
        # for: the usual idiom, every attribute at start, the duration recorded while the
        # span is current (so the SDK may attach an exemplar).
        with tracer.start_as_current_span("execute_tool tool", attributes=span_attributes):
            result = tool()
            histogram.record(0.01, attributes)
        return result

    benchmark(floor)


@pytest.mark.benchmark(group="tracing and metrics on")
def test_guarded_call_with_tracing(benchmark, tracer_provider, meter_provider):
    telemetry.configure(tracer_provider, meter_provider)
    benchmark(CircuitBreaker("tool").call, tool)
