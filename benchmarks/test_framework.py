"""A framework tool call with tracing on: otel-breaker's adapter against doing it by hand.

LangChain's ``tool.invoke`` with the real SDK (a ``TracerProvider`` whose spans go
to an exporter that discards them, a ``MeterProvider`` with an in-memory reader):

* floor: the same ``invoke``, un-instrumented, inside a hand-written SDK span
  (``start_as_current_span``) carrying the same attributes as the adapter's tool
  span, and one histogram record of the call's measured duration: the same
  telemetry, written by hand;
* minimal floor: as the floor, with only four span attributes and a constant
  recorded instead of a measured duration (the least any instrumentation does);
* guarded: ``invoke`` with the LangChain adapter on (breaker, span, duration metric).

The target is guarded/floor <= 1.03 in the same run (docs/performance.md).
"""

from __future__ import annotations

import time

import pytest

pytest.importorskip("langchain_core")

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult

from otel_breaker import semconv, telemetry
from otel_breaker.identity import code_origin, origin_of
from otel_breaker.instrumentation import BreakerInstrumentor

pytestmark = pytest.mark.benchmark(group="tracing on: one LangChain tool.invoke", min_rounds=20, warmup=True)


class DiscardingExporter(SpanExporter):
    def export(self, spans):
        return SpanExportResult.SUCCESS


@pytest.fixture
def providers():
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(DiscardingExporter()))
    meter_provider = MeterProvider(metric_readers=[InMemoryMetricReader()])
    yield tracer_provider, meter_provider
    meter_provider.shutdown()


def make_tool():
    from langchain_core.tools import tool

    @tool
    def lookup(city: str) -> str:
        """Look up a city."""
        return city

    return lookup


def test_floor_hand_written_span_and_record(benchmark, providers):
    tracer_provider, meter_provider = providers
    lookup = make_tool()
    tracer = tracer_provider.get_tracer("floor")
    histogram = meter_provider.get_meter("floor").create_histogram("floor.duration", unit="s")
    origin = code_origin(lookup.func)
    metric_attributes = {semconv.ATTR_TOOL: "lookup", semconv.ATTR_ORIGIN: origin}
    span_attributes = {
        semconv.ATTR_OPERATION: semconv.OPERATION,
        semconv.ATTR_TOOL: "lookup",
        semconv.ATTR_ORIGIN: origin,
        semconv.ATTR_GUARDED: True,
        semconv.ATTR_TOOL_TYPE: "function",
        semconv.ATTR_FRAMEWORK: "langchain",
        semconv.ATTR_STATE: "closed",
        semconv.ATTR_REJECTED: False,
        semconv.ATTR_EFFECTS: "unknown",
    }

    def floor():
        with tracer.start_as_current_span("execute_tool lookup", attributes=span_attributes):
            start = time.perf_counter()
            result = lookup.invoke({"city": "Oslo"})
            histogram.record(time.perf_counter() - start, metric_attributes)
        return result

    assert benchmark(floor) == "Oslo"


def test_minimal_floor_four_attributes_constant_record(benchmark, providers):
    tracer_provider, meter_provider = providers
    lookup = make_tool()
    tracer = tracer_provider.get_tracer("floor")
    histogram = meter_provider.get_meter("floor").create_histogram("floor.duration", unit="s")
    metric_attributes = {"gen_ai.tool.name": "lookup"}
    span_attributes = {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": "lookup",
        "otel_breaker.state": "closed",
        "otel_breaker.rejected": False,
    }

    def floor():
        with tracer.start_as_current_span("execute_tool lookup", attributes=span_attributes):
            result = lookup.invoke({"city": "Oslo"})
            histogram.record(0.01, metric_attributes)
        return result

    assert benchmark(floor) == "Oslo"


def test_guarded_langchain_invoke(benchmark, providers):
    tracer_provider, meter_provider = providers
    telemetry.configure(tracer_provider, meter_provider)
    instrumentor = BreakerInstrumentor()
    instrumentor.instrument(frameworks=["langchain"])
    try:
        lookup = make_tool()
        assert benchmark(lookup.invoke, {"city": "Oslo"}) == "Oslo"
        # The floor's span carries exactly the attributes of the adapter's span.
        (span,) = _spans_of(tracer_provider, lambda: lookup.invoke({"city": "Oslo"}))
        assert set(span.attributes) == FLOOR_SPAN_KEYS
    finally:
        instrumentor.uninstrument()


FLOOR_SPAN_KEYS = {
    semconv.ATTR_OPERATION,
    semconv.ATTR_TOOL,
    semconv.ATTR_ORIGIN,
    semconv.ATTR_GUARDED,
    semconv.ATTR_TOOL_TYPE,
    semconv.ATTR_FRAMEWORK,
    semconv.ATTR_STATE,
    semconv.ATTR_REJECTED,
    semconv.ATTR_EFFECTS,
}


def _spans_of(tracer_provider, fn):
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    exporter = InMemorySpanExporter()
    tracer_provider.add_span_processor(SimpleSpanProcessor(exporter))
    fn()
    return exporter.get_finished_spans()


# -- the tool's identity: read once per tool object, not on every call ----------------------------


@pytest.mark.benchmark(group="tool identity: per call")
def test_identity_cached_per_tool_object(benchmark):
    """What every guarded call pays for its tool's code origin: one cache look-up."""
    lookup = make_tool()
    assert benchmark(origin_of, lookup, "langchain_core") == code_origin(lookup.func)


@pytest.mark.benchmark(group="tool identity: per call")
def test_identity_computed_each_time(benchmark):
    """What it would cost to read the origin on every call (for comparison)."""
    lookup = make_tool()
    assert benchmark(code_origin, lookup, "langchain_core") == code_origin(lookup.func)


# -- no SDK configured: what the switch adds to a plain invoke ------------------------------------


@pytest.mark.benchmark(group="no SDK: one LangChain tool.invoke")
def test_plain_invoke_no_sdk(benchmark):
    lookup = make_tool()
    assert benchmark(lookup.invoke, {"city": "Oslo"}) == "Oslo"


@pytest.mark.benchmark(group="no SDK: one LangChain tool.invoke")
def test_guarded_invoke_no_sdk(benchmark):
    """The adapter on, no tracer, meter or logger provider anywhere (the telemetry is skipped)."""
    telemetry.TELEMETRY.reset(counts=True)
    assert not telemetry.observing()
    instrumentor = BreakerInstrumentor()
    instrumentor.instrument(frameworks=["langchain"])
    try:
        lookup = make_tool()
        assert benchmark(lookup.invoke, {"city": "Oslo"}) == "Oslo"
    finally:
        instrumentor.uninstrument()
