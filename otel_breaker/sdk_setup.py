"""Set up the OpenTelemetry SDK from the standard ``OTEL_*`` variables.

Used when otel-breaker is switched on by ``OTEL_BREAKER_ENABLED`` without the
``opentelemetry-instrument`` launcher and the program configured no SDK: the
same configurator the launcher uses, with the distro's defaults (OTLP traces
and metrics). The protocol follows ``OTEL_EXPORTER_OTLP_PROTOCOL``; unset, an
endpoint on port 4318 means OTLP/HTTP, anything else gRPC.
"""

from __future__ import annotations

import logging
import os

logger = logging.getLogger("otel_breaker")


def _default_protocol() -> str:
    endpoint = os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT", "")
    return "http/protobuf" if endpoint.rstrip("/").endswith(":4318") else "grpc"


def configure_sdk_from_env() -> None:
    """Install SDK tracer and meter providers exporting as the environment says."""
    os.environ.setdefault("OTEL_TRACES_EXPORTER", "otlp")
    os.environ.setdefault("OTEL_METRICS_EXPORTER", "otlp")
    os.environ.setdefault("OTEL_LOGS_EXPORTER", "none")
    os.environ.setdefault("OTEL_EXPORTER_OTLP_PROTOCOL", _default_protocol())
    from opentelemetry.sdk._configuration import _OTelSDKConfigurator

    _OTelSDKConfigurator().configure()
    logger.info(
        "otel-breaker: OpenTelemetry SDK configured from OTEL_* variables (%s)",
        os.environ.get("OTEL_EXPORTER_OTLP_PROTOCOL"),
    )
