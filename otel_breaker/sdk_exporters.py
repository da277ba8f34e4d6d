"""The exporters our SDK set-up creates, watched, and the private logs SDK names.

A collector that does not answer must cost one warning line, not a stream of
retries and tracebacks: every exporter the zero-code set-up
(:mod:`otel_breaker.sdk_setup`) creates is wrapped in a :class:`WatchedExporter`
sharing one :class:`CollectorWatch`, which pauses exports after a failure and
says once when they work again.
"""

from __future__ import annotations

import logging
import os
import threading
import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

logger = logging.getLogger("otel_breaker")

#: Seconds exports pause after a failed one (then one attempt tells whether the
#: collector is back).
PAUSE_AFTER_FAILURE = 30.0


# -- watching the collector --------------------------------------------------------------------


_quiet = threading.local()


class _QuietWhileWatched(logging.Filter):
    """Drops an exporter's own retry and failure records while a watched export
    runs on this thread: :class:`CollectorWatch` reports them as one line."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not getattr(_quiet, "active", False)


_QUIET = _QuietWhileWatched()


class CollectorWatch:
    """Shared by the exporters of one set-up: one warning when exports fail,
    then a pause instead of a stream of retries, one line when they work again."""

    def __init__(self, clock: Callable[[], float] = time.monotonic, pause: float = PAUSE_AFTER_FAILURE) -> None:
        self._clock = clock
        self._pause = pause
        self._lock = threading.Lock()
        _WATCHES.add(self)
        self._paused_until: float | None = None
        self.warned = False
        self.closing = False
        self.dropped = 0

    def paused(self) -> bool:
        with self._lock:
            if self.closing and self.warned:
                return True  # at exit, a collector already known to be down is not waited for again
            return self._paused_until is not None and self._clock() < self._paused_until

    def failed(self, where: str, detail: str = "", *, at_exit: bool = False) -> None:
        with self._lock:
            self.dropped += 1
            self._paused_until = self._clock() + self._pause
            first = not self.warned
            self.warned = True
        if first and at_exit:
            logger.warning("otel-breaker: OpenTelemetry export (%s) %s; unsent telemetry was dropped", where, detail)
        elif first:
            logger.warning(
                "otel-breaker: OpenTelemetry export failed (%s%s; is the collector reachable?); "
                "telemetry is dropped while it is down and export is retried every %gs",
                where,
                f": {detail}" if detail else "",
                self._pause,
            )

    def skipped(self) -> None:
        with self._lock:
            self.dropped += 1

    def succeeded(self) -> None:
        with self._lock:
            was_down = self.warned and self._paused_until is not None
            self._paused_until = None
            self.warned = False
        if was_down:
            logger.warning("otel-breaker: OpenTelemetry export works again")


#: Every collector watch, for the at-fork handler below.
_WATCHES: weakref.WeakSet[CollectorWatch] = weakref.WeakSet()


def _reinit_after_fork() -> None:
    """A lock another thread held at a fork stays held in the child: replace them."""
    for watch in list(_WATCHES):
        watch._lock = threading.Lock()


if hasattr(os, "register_at_fork"):  # not on Windows, which has no fork
    os.register_at_fork(after_in_child=_reinit_after_fork)


class WatchedExporter:
    """Wraps one span, metric or log exporter created by our set-up (see :class:`CollectorWatch`)."""

    def __init__(self, exporter: Any, watch: CollectorWatch, where: str, success: Any, failure: Any) -> None:
        self._exporter = exporter
        self._watch = watch
        self._where = where
        self._success = success
        self._failure = failure
        for cls in type(exporter).__mro__:
            if cls.__module__.startswith("opentelemetry.exporter"):
                logging.getLogger(cls.__module__).addFilter(_QUIET)

    def export(self, *args: Any, **kwargs: Any) -> Any:
        if self._watch.paused():
            self._watch.skipped()
            return self._failure
        _quiet.active = True
        try:
            result = self._exporter.export(*args, **kwargs)
        except Exception as exc:
            result, detail = self._failure, f"{type(exc).__name__}: {str(exc)[:200]}"
        else:
            detail = ""
        finally:
            _quiet.active = False
        # by name too: the OTLP log exporters answer with their own result enum
        # (LogRecordExportResult), not the SDK's LogExportResult
        if result == self._success or getattr(result, "name", None) == "SUCCESS":
            self._watch.succeeded()
        else:
            self._watch.failed(self._where, detail)
        return result

    def shutdown(self, *args: Any, **kwargs: Any) -> Any:
        _quiet.active = True
        try:
            return self._exporter.shutdown(*args, **kwargs)
        except Exception:
            return None
        finally:
            _quiet.active = False

    def __getattr__(self, name: str) -> Any:
        return getattr(self._exporter, name)


def quiet_shutdown(provider: Any) -> None:
    """Shut ``provider`` down with its exporters' own failure records dropped."""
    _quiet.active = True
    try:
        provider.shutdown()
    except Exception:
        logger.debug("otel-breaker: provider shutdown failed", exc_info=True)
    finally:
        _quiet.active = False


def export_results(signal: str) -> tuple[Any, Any]:
    if signal == "traces":
        from opentelemetry.sdk.trace.export import SpanExportResult

        return SpanExportResult.SUCCESS, SpanExportResult.FAILURE
    if signal == "metrics":
        from opentelemetry.sdk.metrics.export import MetricExportResult

        return MetricExportResult.SUCCESS, MetricExportResult.FAILURE
    return logs_sdk().success, logs_sdk().failure


# -- the parts of the OpenTelemetry Python API that are still private --------------------------


@dataclass(frozen=True)
class LogsSdk:
    LoggerProvider: Any
    BatchLogRecordProcessor: Any
    set_logger_provider: Callable[[Any], None]
    get_logger_provider: Callable[[], Any]
    ProxyLoggerProvider: Any
    success: Any
    failure: Any


def logs_sdk() -> LogsSdk:
    """The logs SDK and API. Their modules are still underscored upstream (the
    logs signal is not declared stable in Python yet); this is the one place we
    name them, and ``test_sdk_setup`` fails loudly if they move."""
    from opentelemetry import _logs
    from opentelemetry._logs._internal import ProxyLoggerProvider
    from opentelemetry.sdk._logs import LoggerProvider
    from opentelemetry.sdk._logs.export import BatchLogRecordProcessor, LogExportResult

    return LogsSdk(
        LoggerProvider,
        BatchLogRecordProcessor,
        _logs.set_logger_provider,
        _logs.get_logger_provider,
        ProxyLoggerProvider,
        LogExportResult.SUCCESS,
        LogExportResult.FAILURE,
    )
