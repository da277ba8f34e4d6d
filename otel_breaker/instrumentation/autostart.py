"""What ``OTEL_BREAKER_ENABLED=true`` does once a supported framework is imported.

The start-up hook (``otel_breaker/_bootstrap.py``) calls :func:`autostart` on
the first import of a supported framework. It reads the configuration (one
log line per bad ``OTEL_BREAKER_*`` value, whose valid parts still apply),
registers post-import hooks for the selected frameworks (nothing is imported
eagerly), and, when the standard ``OTEL_*`` variables ask for export and the
program has set no provider of its own, sets the OpenTelemetry SDK up right
there (see :mod:`otel_breaker.sdk_setup`): the framework's module has not run
yet, so its very first span is recorded. Nothing of the SDK is imported when
nothing is asked for. Every problem is logged; the program always starts.

A program that sets its own providers in code does so before it imports the
framework (as with ``opentelemetry-instrument``), or leaves the ``OTEL_*``
exporter variables unset.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Mapping
from typing import Any

from otel_breaker.loglines import logger

_started = False
_sdk_lock = threading.Lock()
_sdk_checked = False


def _reinit_after_fork() -> None:
    """A thread checking the SDK at the fork holds this lock in the child forever (the
    child has only the forking thread), and the child's first call that checks it would
    wait on it: the child gets a fresh lock."""
    global _sdk_lock
    _sdk_lock = threading.Lock()


if hasattr(os, "register_at_fork"):  # not on Windows, which has no fork
    os.register_at_fork(after_in_child=_reinit_after_fork)


def autostart() -> None:
    """Instrument lazily from the environment (idempotent)."""
    global _started
    if _started:
        return
    _started = True
    from otel_breaker.instrumentation.frameworks import settings_needed_now

    settings = None
    if settings_needed_now():
        from otel_breaker.config import get_settings

        settings = get_settings()  # logs each bad OTEL_BREAKER_* value once, in one line
        if not settings.enabled:
            return
    if "otel_breaker" in {n.strip() for n in os.environ.get("OTEL_PYTHON_DISABLED_INSTRUMENTATIONS", "").split(",")}:
        return
    from otel_breaker.instrumentation.frameworks import FRAMEWORKS

    if settings is not None and settings.status_addr:  # the status server (http.server, threads) only when asked for
        from otel_breaker import status_server

        status_server.start_from_settings(settings)
    try:
        if not FRAMEWORKS.started_by_switch and not _launcher_instrumented():
            # Each framework is checked by its adapter when (and if) it is imported,
            # so no framework installed is a quiet no-op, as with the launcher.
            FRAMEWORKS.enable(None, lazy=True, lenient=True)
            FRAMEWORKS.started_by_switch = True
    except Exception as exc:
        logger.warning("otel-breaker: could not register framework hooks: %s: %s", type(exc).__name__, exc)
    # Now, before the framework's module runs: its first span must find a provider.
    if ensure_sdk() is not None:
        attach_span_processor()
    from otel_breaker.instrumentation.base import before_first_call

    before_first_call(attach_span_processor)


def _launcher_instrumented() -> bool:
    """Whether ``opentelemetry-instrument`` already loaded our instrumentor."""
    import sys

    module = sys.modules.get("otel_breaker.instrumentation.instrumentor")
    # ``instrument()`` sets the flag on the instance (``BaseInstrumentor`` is a singleton:
    # this is the one the launcher made), never on the class.
    return module is not None and module.BreakerInstrumentor().is_instrumented_by_opentelemetry


def export_asked(environ: Mapping[str, str] | None = None) -> bool:
    """Whether any ``OTEL_*`` variable asks for export (a few lookups: nothing imported)."""
    env = os.environ if environ is None else environ
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    return any(
        env.get(name, "").strip()
        for name in (
            "OTEL_TRACES_EXPORTER",
            "OTEL_METRICS_EXPORTER",
            "OTEL_LOGS_EXPORTER",
            "OTEL_EXPORTER_OTLP_ENDPOINT",
            "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
            "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT",
            "OTEL_EXPORTER_OTLP_LOGS_ENDPOINT",
        )
    )


def ensure_sdk() -> Any:
    """Set up the SDK from ``OTEL_*`` variables for the signals whose provider the
    program has not set (once per process); the set-up, or None."""
    global _sdk_checked
    with _sdk_lock:
        if _sdk_checked:
            return None
        _sdk_checked = True
    if not export_asked():
        logger.debug("otel-breaker: no OpenTelemetry export asked for; no SDK set up")
        return None
    try:
        from otel_breaker.sdk_setup import configure_sdk_from_env, providers_set_by_program

        already = providers_set_by_program()
        if already:
            logger.debug("otel-breaker: the program set its own %s provider(s); no SDK set up", ", ".join(already))
            return None
        return configure_sdk_from_env()
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


def launched_by_opentelemetry_instrument() -> bool:
    """Whether this process was started by ``opentelemetry-instrument`` (its start-up module is loaded)."""
    import sys

    return "opentelemetry.instrumentation.auto_instrumentation" in sys.modules


def after_launcher() -> None:
    """``opentelemetry-instrument`` loaded our instrumentor. With ``opentelemetry-distro``
    its configurator has set the SDK up by now; without it nothing has, and the
    launcher says nothing: then we set it up from ``OTEL_*`` as the switch does,
    or say in one line what to install."""
    try:
        from otel_breaker.sdk_setup import providers_set_by_program

        if providers_set_by_program():
            return
    except ImportError:
        pass
    if export_asked():
        if ensure_sdk() is not None:
            attach_span_processor()
        return
    logger.warning(
        "otel-breaker: opentelemetry-instrument set up no OpenTelemetry SDK and no OTEL_*_EXPORTER or "
        "OTLP endpoint is set, so nothing is exported; pip install opentelemetry-distro (the launcher's "
        "default set-up), or set OTEL_EXPORTER_OTLP_ENDPOINT"
    )
