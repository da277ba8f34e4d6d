"""The demo's telemetry: an OpenTelemetry SDK of its own, with the exporters its options ask for.

Built as the zero-code set-up builds them (:mod:`otel_breaker.sdk_setup`): a
collector that is not there is one line on stderr and never holds the demo.
"""

from __future__ import annotations

import os
import sys
import time
from dataclasses import dataclass
from typing import Any

from otel_breaker.cli import UsageError


@dataclass
class Exporters:
    tracer_provider: Any
    meter_provider: Any
    metrics_port: int | None = None
    metrics_host: str = "127.0.0.1"
    otlp: str | None = None
    watch: Any = None
    logger_provider: Any = None
    where: str = "OTLP"

    def providers(self) -> list[Any]:
        return [p for p in (self.tracer_provider, self.meter_provider, self.logger_provider) if p is not None]


#: Metric export interval of ``--otlp`` unless OTEL_METRIC_EXPORT_INTERVAL says otherwise:
#: short, so ``increase()`` panels see a paced run as it happens.
EXPORT_INTERVAL_MS = 5000
#: Seconds the demo waits for its last export at the end (unless an OTLP timeout is set).
DEMO_EXIT_BUDGET = 2.0


def _resource() -> Any:
    from opentelemetry.sdk.resources import Resource

    attributes = {} if os.environ.get("OTEL_SERVICE_NAME") else {"service.name": "otel-breaker-demo"}
    return Resource.create(attributes)


def metrics_url(host: str, port: int) -> str:
    """The address the metrics are served at, as a browser or Prometheus writes it."""
    return f"http://{f'[{host}]' if ':' in host else host}:{port}/metrics"


def set_up_telemetry(serve_metrics: int | None, otlp: bool, metrics_host: str = "127.0.0.1") -> Exporters:
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader
    from opentelemetry.sdk.trace import TracerProvider

    from otel_breaker import telemetry
    from otel_breaker.simulation.world import MODEL, PRICE_PER_TOKEN
    from otel_breaker.token_prices import Price
    from otel_breaker.tokens import TokenEstimator

    readers: list[Any] = [InMemoryMetricReader()]
    port = None
    if serve_metrics is not None:
        try:
            from opentelemetry.exporter.prometheus import PrometheusMetricReader
            from prometheus_client import start_http_server
        except ImportError:
            raise UsageError(
                "--serve-metrics needs the Prometheus exporter: pip install opentelemetry-exporter-prometheus "
                "(the [prometheus] extra)"
            ) from None
        readers.append(PrometheusMetricReader())
        try:
            server, _thread = start_http_server(serve_metrics, addr=metrics_host)
        except OSError as exc:
            raise UsageError(
                f"--serve-metrics: cannot listen on {metrics_host} port {serve_metrics}: {exc.strerror or exc}"
            ) from None
        port = server.server_port
    tracer_provider = TracerProvider(resource=_resource(), shutdown_on_exit=False)
    exporters = Exporters(tracer_provider, None, port, metrics_host)
    if otlp:
        _add_otlp(exporters, readers)
    exporters.meter_provider = MeterProvider(metric_readers=readers, resource=_resource(), shutdown_on_exit=False)
    # Priced, so the cost panels estimate what rejected calls saved.
    estimator = TokenEstimator(prices={MODEL: Price(*PRICE_PER_TOKEN)})
    telemetry.configure(tracer_provider, exporters.meter_provider, estimator=estimator)
    return exporters


def _add_otlp(exporters: Exporters, readers: list[Any]) -> None:
    """OTLP for traces, metrics (every :data:`EXPORT_INTERVAL_MS`) and logs, built
    as the zero-code set-up builds them: watched, so a missing collector is one
    line and never holds the demo."""
    from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    from otel_breaker import sdk_exporters, sdk_setup

    try:
        plan = sdk_setup.plan_export(force_otlp=True)
    except ImportError as exc:  # pragma: no cover - the OTLP exporters are a default dependency
        raise UsageError(
            f"--otlp needs the OTLP exporter ({exc.name}): pip install opentelemetry-exporter-otlp"
        ) from None
    if plan.problems:
        raise UsageError(f"--otlp: {plan.problems[0]}")
    if not plan.exporters("traces") or not plan.exporters("metrics"):
        raise UsageError("--otlp needs the OTLP exporter: pip install opentelemetry-exporter-otlp")
    watch = sdk_exporters.CollectorWatch()
    (traces,) = plan.exporters("traces")
    exporters.tracer_provider.add_span_processor(BatchSpanProcessor(sdk_setup.load_exporter(traces, watch)))
    (metrics,) = plan.exporters("metrics")
    interval = None if os.environ.get("OTEL_METRIC_EXPORT_INTERVAL") else EXPORT_INTERVAL_MS
    readers.append(
        PeriodicExportingMetricReader(sdk_setup.load_exporter(metrics, watch), export_interval_millis=interval)
    )
    for logs_exporter in plan.exporters("logs"):  # log-based events, through the global logger provider
        try:
            logs = sdk_exporters.logs_sdk()
        except ImportError:
            break
        exporters.logger_provider = logs.LoggerProvider(resource=_resource(), shutdown_on_exit=False)
        exporters.logger_provider.add_log_record_processor(
            logs.BatchLogRecordProcessor(sdk_setup.load_exporter(logs_exporter, watch))
        )
        logs.set_logger_provider(exporters.logger_provider)
    protocol = "grpc" if traces.entry_point == "otlp_proto_grpc" else "http/protobuf"
    default = "http://localhost:4317" if protocol == "grpc" else "http://localhost:4318"
    exporters.otlp = f"{os.environ.get('OTEL_EXPORTER_OTLP_ENDPOINT') or default} ({protocol})"
    exporters.watch = watch
    exporters.where = traces.description


def close(exporters: Exporters) -> None:
    """Flush and shut down, never waiting long for a collector that is not there."""
    from otel_breaker import sdk_setup

    budget = sdk_setup.exit_budget()
    if budget == sdk_setup.EXIT_BUDGET:  # no OTLP timeout given: an interactive command waits less
        budget = DEMO_EXIT_BUDGET
    finished = sdk_setup.shutdown_within(exporters.providers(), budget, exporters.watch, exporters.where)
    if exporters.otlp and finished and not exporters.watch.warned:
        print(f"Sent spans and metrics over OTLP to {exporters.otlp}", file=sys.stderr)


def serve(host: str, port: int, hold: float | None) -> None:
    print(f"Serving Prometheus metrics at {metrics_url(host, port)}", end="", flush=True)
    print(f" for {hold:g}s" if hold is not None else " (Ctrl-C to stop)", flush=True)
    deadline = None if hold is None else time.monotonic() + hold
    try:
        while deadline is None or time.monotonic() < deadline:
            time.sleep(0.2 if deadline is None else max(0.0, min(0.2, deadline - time.monotonic())))
    except KeyboardInterrupt:
        pass
