"""Telemetry over the wire: a real OTLP receiver (rotel) over gRPC and HTTP,
and a real Prometheus endpoint scraped over HTTP."""

from __future__ import annotations

import contextlib
import urllib.request

import pytest
from otel_support import Receiver, free_port

from otel_breaker import CircuitBreakerConfig, Guard, ToolCall, get_circuit_breaker, telemetry


@pytest.fixture
def receiver(tmp_path):
    receiver = Receiver(tmp_path)
    receiver.start()
    yield receiver
    receiver.stop()


def providers(protocol: str, grpc_port: int, http_port: int, logs: bool = False):
    from opentelemetry.sdk._logs import LoggerProvider
    from opentelemetry.sdk._logs.export import BatchLogRecordProcessor
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    if protocol == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc._log_exporter import OTLPLogExporter
        from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import OTLPMetricExporter
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter

        spans = OTLPSpanExporter(endpoint=f"127.0.0.1:{grpc_port}", insecure=True, timeout=2)
        metrics = OTLPMetricExporter(endpoint=f"127.0.0.1:{grpc_port}", insecure=True, timeout=2)
        log_records = OTLPLogExporter(endpoint=f"127.0.0.1:{grpc_port}", insecure=True, timeout=2)
    else:
        from opentelemetry.exporter.otlp.proto.http._log_exporter import OTLPLogExporter
        from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        spans = OTLPSpanExporter(endpoint=f"http://127.0.0.1:{http_port}/v1/traces", timeout=2)
        metrics = OTLPMetricExporter(endpoint=f"http://127.0.0.1:{http_port}/v1/metrics", timeout=2)
        log_records = OTLPLogExporter(endpoint=f"http://127.0.0.1:{http_port}/v1/logs", timeout=2)
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(BatchSpanProcessor(spans, schedule_delay_millis=200))
    reader = PeriodicExportingMetricReader(metrics, export_interval_millis=60_000)
    meter_provider = MeterProvider(metric_readers=[reader])
    logger_provider = None
    if logs:
        logger_provider = LoggerProvider()
        logger_provider.add_log_record_processor(BatchLogRecordProcessor(log_records, schedule_delay_millis=200))
    telemetry.configure(tracer_provider, meter_provider, logger_provider=logger_provider)
    if logs:
        return tracer_provider, meter_provider, logger_provider
    return tracer_provider, meter_provider


def workload() -> list:
    get_circuit_breaker("web_search", CircuitBreakerConfig(failure_threshold=2))

    def fail():
        raise ConnectionError("down")

    results = []
    for _ in range(2):
        with contextlib.suppress(ConnectionError):
            Guard().call(ToolCall("web_search", call_id="c1"), fail)
    results.append(Guard().call(ToolCall("web_search"), lambda: "never"))
    results.append(Guard().call(ToolCall("calculator"), lambda: 42))
    return results


@pytest.mark.parametrize("protocol", ["grpc", "http"])
def test_spans_and_metrics_arrive_at_a_real_otlp_receiver(receiver, protocol):
    tracer_provider, meter_provider = providers(protocol, receiver.grpc_port, receiver.http_port)
    try:
        results = workload()
        tracer_provider.force_flush()
        meter_provider.force_flush()
        text = receiver.wait_for(
            "execute_tool web_search",
            "execute_tool calculator",
            "otel_breaker.state_change",
            "otel_breaker.rejected",
            "Name: otel_breaker.calls.rejected",
            "Name: otel_breaker.transitions",
            "Name: otel_breaker.state",
            "Name: otel_breaker.tokens.saved",
            "Name: gen_ai.execute_tool.duration",
        )
    finally:
        tracer_provider.shutdown()
        meter_provider.shutdown()
        telemetry.TELEMETRY.reset()
    assert results[0]["circuit_open"] is True and results[1] == 42
    assert "circuit_open" in text  # error.type of the rejected call


@pytest.mark.parametrize("protocol", ["grpc", "http"])
def test_log_based_events_arrive_at_a_real_otlp_receiver(receiver, protocol):
    tracer_provider, meter_provider, logger_provider = providers(
        protocol, receiver.grpc_port, receiver.http_port, logs=True
    )
    try:
        workload()
        get_circuit_breaker("web_search").force_close()  # a change with no span around it
        tracer_provider.force_flush()
        logger_provider.force_flush()
        text = receiver.wait_for(
            "EventName: otel_breaker.state_change",
            "EventName: otel_breaker.rejected",
            "SeverityText: WARN",
            "otel_breaker.to_state: Str(closed)",
        )
    finally:
        tracer_provider.shutdown()
        meter_provider.shutdown()
        logger_provider.shutdown()
        telemetry.TELEMETRY.reset()
    logs = text[text.find("ResourceLog") :]
    assert "InstrumentationScope otel_breaker" in logs
    rejected = logs[logs.find("EventName: otel_breaker.rejected") :]
    assert "otel_breaker.retry_after_s: Int(60)" in rejected.split("LogRecord #", 1)[0]


def test_every_tool_call_completes_with_the_receiver_stopped(tmp_path):
    receiver = Receiver(tmp_path)
    receiver.start()
    tracer_provider, meter_provider = providers("grpc", receiver.grpc_port, receiver.http_port)
    try:
        receiver.stop()  # the collector goes down mid-run
        outputs = [Guard().call(ToolCall("calculator"), lambda i=i: i * 2) for i in range(500)]
        assert outputs == [i * 2 for i in range(500)]
        assert get_circuit_breaker("calculator").stats.success_count == 500  # nothing lost
    finally:
        tracer_provider.shutdown()
        meter_provider.shutdown()
        telemetry.TELEMETRY.reset()


def test_prometheus_endpoint_exposes_the_documented_names():
    prometheus = pytest.importorskip("opentelemetry.exporter.prometheus")
    from opentelemetry.sdk.metrics import MeterProvider
    from prometheus_client import start_http_server

    reader = prometheus.PrometheusMetricReader()
    provider = MeterProvider(metric_readers=[reader])
    telemetry.configure(meter_provider=provider)
    port = free_port()
    server, _thread = start_http_server(port, addr="127.0.0.1")
    try:
        workload()
        body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    finally:
        server.shutdown()
        provider.shutdown()  # also unregisters the reader's collector
        telemetry.TELEMETRY.reset()
    expected = {
        "otel_breaker_state": "gauge",
        "otel_breaker_transitions_total": "counter",
        "otel_breaker_calls_total": "counter",
        "otel_breaker_calls_rejected_total": "counter",
        "otel_breaker_tokens_saved_total": "counter",
        "gen_ai_execute_tool_duration_seconds": "histogram",
    }
    for name, kind in expected.items():
        base = name.removesuffix("_total")
        assert f"# TYPE {base if kind == 'counter' else name} {kind}" in body or f"# TYPE {name} {kind}" in body, name
        help_line = next(
            line
            for line in body.splitlines()
            if line.startswith(f"# HELP {name}") or line.startswith(f"# HELP {base} ")
        )
        assert len(help_line.split(" ", 3)[3]) > 10, help_line
    assert 'otel_breaker_state{gen_ai_tool_name="web_search",otel_breaker_state="open"' in body
    assert (
        'otel_breaker_calls_rejected_total{gen_ai_tool_name="web_search",otel_breaker_mode="enforce",otel_breaker_state="open"'
        in body
    )
    assert (
        'otel_breaker_transitions_total{gen_ai_tool_name="web_search",otel_breaker_from_state="closed",otel_breaker_to_state="open"'
        in body
    )
    assert (
        'gen_ai_execute_tool_duration_seconds_bucket{error_type="ConnectionError",gen_ai_tool_name="web_search"' in body
    )


@pytest.fixture(autouse=True)
def _no_proxy(monkeypatch):
    """Loopback traffic never goes through a proxy a machine may configure."""
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
