"""Spans, log-based events and metrics of otel-breaker: the facade.

``configure(...)`` sends breaker telemetry to the providers given (default: the
global ones), and :data:`TELEMETRY` is the one process-wide
:class:`Telemetry` the call path reports to. It owns one object of each part,
each its own module: :class:`~.providers.Providers` (where telemetry goes),
:class:`~.spans.Spans` (the tool span of each call), :class:`~.events.Events`
(log-based events) and :class:`~.metrics.Metrics` (the state gauge, counters
and duration); :mod:`.labels` names a tool's attributes. With no SDK
configured nothing here runs beyond two attribute checks per call.
"""

from __future__ import annotations

import os
import threading
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
    from otel_breaker.breaker import CircuitBreaker, State, StateChange
    from otel_breaker.registry import BreakerRegistry


class Telemetry:
    """The process-wide telemetry of all breakers: it hears every transition.

    Its parts are ``providers``, ``spans``, ``events`` and ``metrics``; this object
    reads the settings into them, configures and resets them, and hands each call
    to the part it is for."""

    def __init__(self) -> None:
        # Configuring and resetting are made one at a time.
        self._lock = threading.Lock()
        self._settings_read = False
        self.providers = Providers(self._read_settings)
        self.events = Events(self.providers, self._read_settings)
        self.metrics = Metrics(self.providers, self._read_settings)
        self.spans = Spans(self.providers, self.events, self.metrics)
        # What the call path calls on every tool call (or every rejection, neutral call,
        # retry) is the part's own bound method, set here as an attribute of this object:
        # ``TELEMETRY.start(...)`` runs ``Spans.start`` with no call of ours in between.
        self.start = self.spans.start
        self.detach = self.spans.detach
        self.finish = self.spans.finish
        self.past_call = self.spans.past_call
        self.rejected = self.spans.rejected
        self.escalated = self.spans.escalated
        self.annotate = self.spans.annotate
        self.retry_budget_exhausted = self.spans.retry_budget_exhausted
        self.count_neutral = self.metrics.count_neutral
        self.count_retry = self.metrics.count_retry
        self.logs_on = self.providers.logs_on
        breaker_module.add_global_listener(self._on_transition)
        breaker_module.add_follow_listener(self.events.followed)

    def _on_transition(self, change: StateChange) -> None:
        self.metrics.count_transition(change)
        self.events.announce_transition(change)

    @property
    def estimator(self) -> TokenEstimator:
        """The token estimator the savings are counted with."""
        return self.metrics.estimator

    def watch_slots(self) -> tuple[tuple[dict[str, Any], str], ...]:
        """Where a provider appears when one exists: the explicit one, then the global ones."""
        return self.providers.watch_slots()

    def observing(self) -> bool:
        """Whether any tracer, meter or logger provider exists (explicit or global)."""
        return self.providers.observing()

    def event_logger(self) -> Any:
        """The logger log-based events go to, or None while no logger provider exists."""
        return self.providers.event_logger()

    def event(self, name: str, attributes: dict[str, Any], warning: bool = False) -> None:
        """A log-based event of a module above telemetry (the loop guard, the run budget)."""
        self.events.event(name, attributes, warning)

    def followed(self, breaker: CircuitBreaker, from_state: State, to_state: State) -> None:
        """A breaker followed a change another process made in a shared store."""
        self.events.followed(breaker, from_state, to_state)

    def transitions(self) -> dict[tuple[str, str | None, str, str, str | None, str | None], int]:
        """(tool, agent, from state, to state, source, origin) -> transitions so far."""
        return self.metrics.transitions()

    def settle_savings(self) -> None:
        """Apply the current token estimate to rejections since the last settle."""
        self.metrics.settle_savings()

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
            if span_events is not None:
                self.events.span_events = span_events
            if registry is not None:
                self.metrics.use_registry(registry)
            if capture_content is not None:
                self.spans.capture_content = capture_content
            if duration_metric is not None:
                self.metrics.duration_metric = duration_metric
            if estimator is not None:
                self.metrics.estimator = estimator
            self.providers.use(tracer_provider, meter_provider, logger_provider)
            if meter_provider is not None or duration_metric is not None:
                self.metrics.forget_instruments()
        self.metrics.ensure_meter()

    def reset(self, *, counts: bool = False) -> None:
        """Back to the global providers and the options the settings give;
        ``counts=True`` also forgets transition counts and savings (a clean
        slate, e.g. between tests)."""
        with self._lock:
            self._settings_read = False  # capture_content, duration_metric: from settings again
            if counts:
                self.metrics.forget_counts()
            self.providers.forget()
            self.metrics.forget_instruments()

    def reread_settings(self) -> None:
        """Read the settings again at next use (after ``set_settings`` replaced them);
        options given to :meth:`configure` give way to them."""
        self._settings_read = False

    def after_fork_in_child(self) -> None:
        """Locks another thread held at a fork stay held in the child: replace ours."""
        self._lock = threading.Lock()
        self.metrics.after_fork_in_child()

    def _read_settings(self) -> None:
        if self._settings_read:
            return
        self._settings_read = True
        settings = get_settings()
        self.spans.capture_content = settings.capture_content
        self.metrics.duration_metric = settings.duration_metric
        self.events.span_events = settings.span_events
        prices = {}
        try:
            prices = parse_prices(settings.prices)
        except (OSError, ValueError) as exc:
            logger.warning("otel-breaker: OTEL_BREAKER_PRICES ignored: %s", exc)
        self.metrics.estimator.tokens_per_call = settings.tokens_per_call
        self.metrics.estimator.prices = prices


TELEMETRY = Telemetry()


def observing() -> bool:
    """Whether the call path should start telemetry at all."""
    return TELEMETRY.observing()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=TELEMETRY.after_fork_in_child)


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
