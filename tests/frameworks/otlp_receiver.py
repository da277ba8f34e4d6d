"""A tiny real OTLP receiver (gRPC and HTTP/protobuf) on 127.0.0.1, for the export tests.

It decodes what the SDK's own OTLP exporters send with the protocol's own
message classes (``opentelemetry-proto``) and keeps every span it gets, so a
test counts exactly what a collector would have received.
"""

from __future__ import annotations

import threading
import time
from concurrent import futures
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from opentelemetry.proto.collector.logs.v1 import logs_service_pb2
from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2


@dataclass(frozen=True)
class ReceivedSpan:
    name: str
    scope: str
    attributes: dict[str, Any]


def _value(any_value: Any) -> Any:
    kind = any_value.WhichOneof("value")
    return getattr(any_value, kind) if kind else None


class OtlpReceiver:
    """Both transports at once; ``spans``, ``metric_names`` and ``log_count`` are what arrived."""

    def __init__(self) -> None:
        self.spans: list[ReceivedSpan] = []
        self.metric_names: set[str] = set()
        #: One entry per metrics export: instrument name -> (attributes, value) of its points.
        self.metric_exports: list[dict[str, list[tuple[dict[str, Any], float]]]] = []
        self.log_count = 0
        self._lock = threading.Lock()
        self._http: ThreadingHTTPServer | None = None
        self._grpc: Any = None
        self.http_port = 0
        self.grpc_port = 0

    # -- what arrived ------------------------------------------------------------------------

    def _traces(self, request: Any) -> None:
        with self._lock:
            for resource_spans in request.resource_spans:
                for scope_spans in resource_spans.scope_spans:
                    for span in scope_spans.spans:
                        attributes = {kv.key: _value(kv.value) for kv in span.attributes}
                        self.spans.append(ReceivedSpan(span.name, scope_spans.scope.name, attributes))

    def _metrics(self, request: Any) -> None:
        export: dict[str, list[tuple[dict[str, Any], float]]] = {}
        for resource_metrics in request.resource_metrics:
            for scope_metrics in resource_metrics.scope_metrics:
                for metric in scope_metrics.metrics:
                    kind = metric.WhichOneof("data")
                    points = export.setdefault(metric.name, [])
                    if kind in ("gauge", "sum"):
                        for point in getattr(metric, kind).data_points:
                            value = point.as_double if point.WhichOneof("value") == "as_double" else point.as_int
                            points.append(({kv.key: _value(kv.value) for kv in point.attributes}, value))
        with self._lock:
            self.metric_names.update(export)
            self.metric_exports.append(export)

    def _logs(self, request: Any) -> None:
        with self._lock:
            self.log_count += sum(
                len(scope.log_records) for resource in request.resource_logs for scope in resource.scope_logs
            )

    def names(self) -> dict[str, int]:
        """Span name (operation only, the first word: ``chat``, ``execute_tool``) -> how many."""
        counts: dict[str, int] = {}
        with self._lock:
            for span in self.spans:
                operation = span.name.split(" ", 1)[0]
                counts[operation] = counts.get(operation, 0) + 1
        return counts

    def wait_for_spans(self, count: int, timeout: float = 20) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and len(self.spans) < count:
            time.sleep(0.05)

    # -- the servers -------------------------------------------------------------------------

    def start(self) -> OtlpReceiver:
        self._start_http()
        self._start_grpc()
        return self

    def _start_http(self) -> None:
        routes = {
            "/v1/traces": (trace_service_pb2.ExportTraceServiceRequest, self._traces),
            "/v1/metrics": (metrics_service_pb2.ExportMetricsServiceRequest, self._metrics),
            "/v1/logs": (logs_service_pb2.ExportLogsServiceRequest, self._logs),
        }

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                route = routes.get(self.path)
                if route is None:
                    self.send_response(404)
                    self.end_headers()
                    return
                message = route[0]()
                message.ParseFromString(body)
                route[1](message)
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self._http = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.http_port = self._http.server_address[1]
        threading.Thread(target=self._http.serve_forever, daemon=True).start()

    def _start_grpc(self) -> None:
        import grpc
        from opentelemetry.proto.collector.logs.v1 import logs_service_pb2_grpc
        from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2_grpc
        from opentelemetry.proto.collector.trace.v1 import trace_service_pb2_grpc

        receiver = self

        class Traces(trace_service_pb2_grpc.TraceServiceServicer):
            def Export(self, request, context):
                receiver._traces(request)
                return trace_service_pb2.ExportTraceServiceResponse()

        class Metrics(metrics_service_pb2_grpc.MetricsServiceServicer):
            def Export(self, request, context):
                receiver._metrics(request)
                return metrics_service_pb2.ExportMetricsServiceResponse()

        class Logs(logs_service_pb2_grpc.LogsServiceServicer):
            def Export(self, request, context):
                receiver._logs(request)
                return logs_service_pb2.ExportLogsServiceResponse()

        self._grpc = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        trace_service_pb2_grpc.add_TraceServiceServicer_to_server(Traces(), self._grpc)
        metrics_service_pb2_grpc.add_MetricsServiceServicer_to_server(Metrics(), self._grpc)
        logs_service_pb2_grpc.add_LogsServiceServicer_to_server(Logs(), self._grpc)
        self.grpc_port = self._grpc.add_insecure_port("127.0.0.1:0")
        self._grpc.start()

    def stop(self) -> None:
        if self._http is not None:
            self._http.shutdown()
            self._http.server_close()
        if self._grpc is not None:
            self._grpc.stop(0)

    def endpoint(self, protocol: str) -> dict[str, str]:
        """The ``OTEL_*`` variables that send every signal here over ``protocol``."""
        port = self.grpc_port if protocol == "grpc" else self.http_port
        return {"OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{port}", "OTEL_EXPORTER_OTLP_PROTOCOL": protocol}
