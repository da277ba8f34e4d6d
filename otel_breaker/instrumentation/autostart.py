"""What ``OTEL_BREAKER_ENABLED=true`` does once a supported framework is imported.

The start-up hook (``otel_breaker/_bootstrap.py``) calls :func:`autostart` on
the first import of a supported framework. It reads the configuration (one
log line per bad ``OTEL_BREAKER_*`` value, whose valid parts still apply),
registers post-import hooks for the selected frameworks (nothing is imported
eagerly), and arranges for the OpenTelemetry SDK to be set up from the standard
``OTEL_*`` variables (see :mod:`otel_breaker.sdk_setup`) if, by the first
guarded call, the program has set no provider itself. Every problem is logged;
the program always starts.
"""

from __future__ import annotations

import logging
import os
import threading

logger = logging.getLogger("otel_breaker")

_started = False
_sdk_lock = threading.Lock()
_sdk_checked = False


def autostart() -> None:
    """Instrument lazily from the environment (idempotent)."""
    global _started
    if _started:
        return
    _started = True
    from otel_breaker.config import get_settings

    settings = get_settings()  # logs each bad OTEL_BREAKER_* value once, in one line
    if not settings.enabled:
        return
    if "otel_breaker" in {n.strip() for n in os.environ.get("OTEL_PYTHON_DISABLED_INSTRUMENTATIONS", "").split(",")}:
        return
    from otel_breaker.instrumentation import BreakerInstrumentor

    instrumentor = BreakerInstrumentor()
    try:
        if not instrumentor.is_instrumented_by_opentelemetry:  # the launcher may have loaded it already
            # Each framework is checked by its adapter when (and if) it is imported,
            # so no framework installed is a quiet no-op, as with the launcher.
            instrumentor.instrument(lazy=True, lenient=True, skip_dep_check=True)
    except Exception as exc:
        logger.warning("otel-breaker: could not register framework hooks: %s: %s", type(exc).__name__, exc)
    from otel_breaker.instrumentation.base import before_first_call

    before_first_call(ensure_sdk)
    before_first_call(attach_span_processor)


def ensure_sdk() -> None:
    """Set up the SDK from ``OTEL_*`` variables unless the program already set a provider."""
    global _sdk_checked
    with _sdk_lock:
        if _sdk_checked:
            return
        _sdk_checked = True
    try:
        from otel_breaker.sdk_setup import configure_sdk_from_env, providers_set_by_program

        already = providers_set_by_program()
        if already:
            logger.debug("otel-breaker: the program set its own %s provider(s); no SDK set up", ", ".join(already))
            return
        configure_sdk_from_env()
    except Exception as exc:
        logger.warning(
            "otel-breaker: could not set up the OpenTelemetry SDK from OTEL_* variables: %s: %s",
            type(exc).__name__,
            exc,
        )


def attach_span_processor() -> None:
    """Let breakers see foreign tool spans and learn token usage (SDK providers only)."""
    from opentelemetry import trace

    provider = trace.get_tracer_provider()
    if not hasattr(provider, "add_span_processor"):
        return
    from otel_breaker.processor import BreakerSpanProcessor, attach

    attach(provider, BreakerSpanProcessor())
