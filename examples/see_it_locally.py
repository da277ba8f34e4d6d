"""See otel-breaker's telemetry in one minute, with nothing but console exporters.

    python examples/see_it_locally.py

A tool fails three times in a row, its breaker opens, and the next calls are rejected
without running it. The console shows the ``execute_tool`` spans, the log-based events
``otel_breaker.state_change`` and ``otel_breaker.rejected`` in the same traces, and the
``otel_breaker.*`` metrics at exit.
"""

from __future__ import annotations

from opentelemetry import _logs, metrics, trace
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import ConsoleLogRecordExporter, SimpleLogRecordProcessor
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import ConsoleMetricExporter, PeriodicExportingMetricReader
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import ConsoleSpanExporter, SimpleSpanProcessor

from otel_breaker import CircuitBreakerConfig, get_circuit_breaker, guard

# What `opentelemetry-instrument --traces_exporter console ...` would set up: the three
# global providers, each printing to the console.
resource = Resource.create({"service.name": "see-it-locally"})
tracer_provider = TracerProvider(resource=resource)
tracer_provider.add_span_processor(SimpleSpanProcessor(ConsoleSpanExporter()))
trace.set_tracer_provider(tracer_provider)
metrics.set_meter_provider(
    MeterProvider(resource=resource, metric_readers=[PeriodicExportingMetricReader(ConsoleMetricExporter())])
)
logger_provider = LoggerProvider(resource=resource)
logger_provider.add_log_record_processor(SimpleLogRecordProcessor(ConsoleLogRecordExporter()))
_logs.set_logger_provider(logger_provider)

get_circuit_breaker("flaky_search", CircuitBreakerConfig(failure_threshold=3, recovery_timeout=60))


@guard("flaky_search")
def flaky_search(query: str) -> str:
    raise ConnectionError("search backend unreachable")


def main() -> None:
    tracer = trace.get_tracer("see-it-locally")
    for step in range(5):
        with tracer.start_as_current_span(f"agent step {step}"):
            try:
                result = flaky_search("weather in Paris")
            except ConnectionError as exc:
                result = f"failed: {exc}"
        print(f"step {step}: {result}", flush=True)
    metrics.get_meter_provider().shutdown()  # print the metrics now


if __name__ == "__main__":
    main()
