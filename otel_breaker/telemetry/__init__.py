"""Spans, log-based events and metrics of otel-breaker: the facade.

``configure(...)`` sends breaker telemetry to the providers given (default: the
global ones), and :data:`TELEMETRY` is the one process-wide
:class:`Telemetry` the call path reports to. Its parts live in their own
modules: :mod:`.providers` (where telemetry goes), :mod:`.spans` (the tool
span of each call), :mod:`.events` (log-based events), :mod:`.metrics` (the
state gauge, counters and duration) and :mod:`.labels` (the attributes that
name a tool). With no SDK configured nothing here runs beyond two attribute
checks per call.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from otel_breaker import breaker as breaker_module
from otel_breaker.config import get_settings
from otel_breaker.loglines import logger
from otel_breaker.telemetry.events import Events
from otel_breaker.telemetry.metrics import Metrics
from otel_breaker.telemetry.providers import Providers
from otel_breaker.telemetry.spans import Spans
from otel_breaker.tokens import TokenEstimator, parse_prices

if TYPE_CHECKING:
    from otel_breaker.breaker import State, StateChange
    from otel_breaker.registry import BreakerRegistry


class Telemetry(Providers, Spans, Events, Metrics):
    """The process-wide telemetry of all breakers: it hears every transition."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._tracer_provider: Any = None
        self._tracer: Any = None
        self._meter_provider: Any = None
        self._meter_ready = False
        self._logger_provider: Any = None
        self._event_logger: Any = None
        self._instrumentation_enabled: Callable[[], bool] = self._first_instrumentation_check
        self._duration: Any = None
        self._registry: BreakerRegistry | None = None
        self.capture_content = False
        self.duration_metric = True
        #: Span events next to the log-based events (``OTEL_BREAKER_SPAN_EVENTS``).
        self.span_events = True
        self.estimator = TokenEstimator()
        self._transitions: dict[tuple[str, str | None, str, str, str | None, str | None], int] = {}
        #: (tool, agent, source, origin) -> the state its breaker last entered (the gauge of a pruned one).
        self._last_state: dict[tuple[str, str | None, str | None, str | None], State] = {}
        #: (tool, agent, source, origin, reason, rule) -> calls that ended neutral that way.
        self._neutral: dict[tuple[str, str | None, str | None, str | None, str, str], int] = {}
        #: (tool, agent, source, origin, outcome) -> retries made below the model (or refused by the budget).
        self._retries: dict[tuple[str, str | None, str | None, str | None, str], int] = {}
        self._settings_read = False
        # ``explicit`` lives in a slot the breaker reads on every call (see observing).
        self._explicit: dict[str, Any] = {"explicit": None}
        breaker_module.add_global_listener(self._on_transition)
        breaker_module.add_follow_listener(self.followed)

    def _on_transition(self, change: StateChange) -> None:
        self._count_transition(change)
        self._announce_transition(change)

    def configure(
        self,
        tracer_provider: Any = None,
        meter_provider: Any = None,
        *,
        registry: BreakerRegistry | None = None,
        capture_content: bool | None = None,
        duration_metric: bool | None = None,
        estimator: TokenEstimator | None = None,
        logger_provider: Any = None,
        span_events: bool | None = None,
    ) -> None:
        """Use these providers instead of the global ones (and other options).

        ``logger_provider`` receives the log-based events; ``span_events=False``
        keeps state changes and rejections off the spans."""
        self._read_settings()
        with self._lock:
            if tracer_provider is not None:
                self._tracer_provider = tracer_provider
                self._tracer = None
                self.explicit = True
            if meter_provider is not None:
                self._meter_provider = meter_provider
                self._meter_ready = False
                self._duration = None
                self.explicit = True
            if logger_provider is not None:
                self._logger_provider = logger_provider
                self._event_logger = None
                self.explicit = True
            if span_events is not None:
                self.span_events = span_events
            if registry is not None:
                self._registry = registry
            if capture_content is not None:
                self.capture_content = capture_content
            if duration_metric is not None:
                self.duration_metric = duration_metric
                self._meter_ready = False
                self._duration = None
            if estimator is not None:
                self.estimator = estimator
        self._ensure_meter()

    def reset(self, *, counts: bool = False) -> None:
        """Back to the global providers and the options the settings give;
        ``counts=True`` also forgets transition counts and savings (a clean
        slate, e.g. between tests)."""
        with self._lock:
            self._settings_read = False  # capture_content, duration_metric: from settings again
            if counts:
                self._transitions.clear()
                self._last_state.clear()
                self._neutral.clear()
                self._retries.clear()
                self.estimator = TokenEstimator(self.estimator.tokens_per_call)
                self._registry = None
                for breaker in breaker_module.all_breakers():
                    breaker.retired = True  # earlier breakers no longer exported
            self._tracer_provider = None
            self._tracer = None
            self._meter_provider = None
            self._meter_ready = False
            self._duration = None
            self._logger_provider = None
            self._event_logger = None
            self.explicit = False

    def _read_settings(self) -> None:
        if self._settings_read:
            return
        self._settings_read = True
        settings = get_settings()
        self.capture_content = settings.capture_content
        self.duration_metric = settings.duration_metric
        self.span_events = settings.span_events
        prices = {}
        try:
            prices = parse_prices(settings.prices)
        except (OSError, ValueError) as exc:
            logger.warning("otel-breaker: OTEL_BREAKER_PRICES ignored: %s", exc)
        self.estimator.tokens_per_call = settings.tokens_per_call
        self.estimator.prices = prices


TELEMETRY = Telemetry()


def observing() -> bool:
    """Whether the call path should start telemetry at all."""
    return TELEMETRY.observing()


def _reinit_after_fork() -> None:
    """A lock another thread held at a fork stays held in the child: replace it."""
    TELEMETRY._lock = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_reinit_after_fork)


def configure(
    tracer_provider: Any = None,
    meter_provider: Any = None,
    *,
    registry: BreakerRegistry | None = None,
    capture_content: bool | None = None,
    duration_metric: bool | None = None,
    estimator: TokenEstimator | None = None,
    logger_provider: Any = None,
    span_events: bool | None = None,
) -> Telemetry:
    """Send breaker telemetry to these providers (default: the global ones)."""
    TELEMETRY.configure(
        tracer_provider,
        meter_provider,
        registry=registry,
        capture_content=capture_content,
        duration_metric=duration_metric,
        estimator=estimator,
        logger_provider=logger_provider,
        span_events=span_events,
    )
    return TELEMETRY
