"""What ``OTEL_BREAKER_ENABLED=true`` does at interpreter start-up.

Registers post-import hooks for the selected frameworks (nothing is imported
eagerly) and arranges for the OpenTelemetry SDK to be set up from the standard
``OTEL_*`` variables if, by the first guarded call, the program has configured
none itself. Every problem is logged; the program always starts.
"""

from __future__ import annotations

import logging
import os
import threading

logger = logging.getLogger("otel_breaker")

_started = False
_sdk_lock = threading.Lock()
_sdk_checked = False

_EXPORT_VARIABLES = (
    "OTEL_EXPORTER_OTLP_ENDPOINT",
    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
    "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT",
    "OTEL_TRACES_EXPORTER",
    "OTEL_METRICS_EXPORTER",
)


def autostart() -> None:
    """Instrument lazily from the environment (idempotent)."""
    global _started
    if _started:
        return
    _started = True
    from otel_breaker.config import get_settings
    from otel_breaker.instrumentation import BreakerInstrumentor

    settings = get_settings()
    if not settings.enabled:
        return
    if "otel_breaker" in {n.strip() for n in os.environ.get("OTEL_PYTHON_DISABLED_INSTRUMENTATIONS", "").split(",")}:
        return
    try:
        BreakerInstrumentor().instrument(lazy=True, lenient=True)
    except Exception:
        logger.exception("otel-breaker: could not register framework hooks")
    from otel_breaker.instrumentation.base import before_first_call

    if any(os.environ.get(name) for name in _EXPORT_VARIABLES):
        before_first_call(ensure_sdk)
    before_first_call(attach_span_processor)


def ensure_sdk() -> None:
    """Set up the SDK from ``OTEL_*`` variables unless the program already has one."""
    global _sdk_checked
    with _sdk_lock:
        if _sdk_checked:
            return
        _sdk_checked = True
    from opentelemetry import metrics, trace

    if getattr(trace, "_TRACER_PROVIDER", None) is not None or getattr(metrics._internal, "_METER_PROVIDER", None):
        return
    try:
        from otel_breaker.sdk_setup import configure_sdk_from_env

        configure_sdk_from_env()
    except Exception:
        logger.exception("otel-breaker: could not set up the OpenTelemetry SDK from OTEL_* variables")


def attach_span_processor() -> None:
    """Let breakers see foreign tool spans and learn token usage (SDK providers only)."""
    from opentelemetry import trace

    provider = trace.get_tracer_provider()
    if not hasattr(provider, "add_span_processor"):
        return
    from otel_breaker.processor import BreakerSpanProcessor, attach

    attach(provider, BreakerSpanProcessor())
