"""A real OpenTelemetry SDK with in-memory exporters, for tests."""

from __future__ import annotations

import contextlib
import pathlib
import socket
import subprocess
import time

import pytest
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


def free_port() -> int:
    with contextlib.closing(socket.socket()) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def rotel_binary() -> str | None:
    try:
        import rotel
    except ImportError:
        return None
    path = pathlib.Path(rotel.__file__).parent / "rotel-agent"
    return str(path) if path.exists() else None


class Receiver:
    """A real OTLP receiver that logs every span and metric it gets."""

    def __init__(self, tmp_path: pathlib.Path) -> None:
        self.grpc_port, self.http_port = free_port(), free_port()
        self.log = tmp_path / "rotel.log"
        self.process: subprocess.Popen | None = None

    def start(self) -> None:
        binary = rotel_binary()
        if binary is None:
            pytest.skip("the rotel package (OTLP receiver) is not installed")
        command = [
            binary, "start",
            "--otlp-grpc-endpoint", f"127.0.0.1:{self.grpc_port}",
            "--otlp-http-endpoint", f"127.0.0.1:{self.http_port}",
            "--exporter", "blackhole",
            "--debug-log", "traces", "--debug-log", "metrics", "--debug-log", "logs",
            "--debug-log-verbosity", "detailed",
            "--pid-file", str(self.log.with_suffix(".pid")),
        ]  # fmt: skip
        self.process = subprocess.Popen(command, stdout=self.log.open("ab"), stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", self.http_port), 0.2):
                return
            time.sleep(0.05)
        raise RuntimeError(f"rotel did not start: {self.text()}")

    def stop(self) -> None:
        if self.process is not None:
            self.process.terminate()
            self.process.wait(10)
            self.process = None

    def text(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def wait_for(self, *needles: str, timeout: float = 20) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            text = self.text()
            if all(n in text for n in needles):
                return text
            time.sleep(0.1)
        missing = [n for n in needles if n not in self.text()]
        raise AssertionError(f"the receiver never got {missing}")
