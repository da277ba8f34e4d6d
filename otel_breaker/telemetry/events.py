"""Log-based events: state changes and rejections (and the loop guard's).

OpenTelemetry is retiring span events for log-based events (OTEP 4430): each
state change and rejection is a log record named ``otel_breaker.state_change``
or ``otel_breaker.rejected``, emitted through the Logs API when a logger
provider exists and correlated with the current span. Span events of the same
names stay on by default behind ``OTEL_BREAKER_SPAN_EVENTS``.
"""

from __future__ import annotations

import inspect
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from opentelemetry import _logs as logs_api
from opentelemetry import trace as trace_api
from opentelemetry._logs import SeverityNumber

from otel_breaker.breaker import State
from otel_breaker.loglines import logger
from otel_breaker.semconv import (
    ATTR_FROM_STATE,
    ATTR_GUARDED,
    ATTR_REASON,
    ATTR_TO_STATE,
    EVENT_STATE_CHANGE,
)
from otel_breaker.telemetry.labels import breaker_labels

if TYPE_CHECKING:
    from otel_breaker.breaker import CircuitBreaker, StateChange
    from otel_breaker.telemetry.providers import Providers


#: Severity of each log-based event: an opening is a warning (a tool is cut off),
#: a recovery or probe is information, a rejection is information too (it is the
#: breaker doing its job; the opening already warned).
TRANSITION_SEVERITY = {
    State.OPEN: (SeverityNumber.WARN, "WARN"),
    State.HALF_OPEN: (SeverityNumber.INFO, "INFO"),
    State.CLOSED: (SeverityNumber.INFO, "INFO"),
}
REJECTED_SEVERITY = (SeverityNumber.INFO, "INFO")
#: ``otel_breaker.reason`` of a change this process followed from a shared store.
REASON_SHARED_STORE = "shared_store"


def _make_log_record() -> Callable[..., Any]:
    """The API's LogRecord, named by ``event_name`` where the API has that field
    (1.35 and later); older APIs get the name as an ``event.name`` attribute."""
    record_type = logs_api.LogRecord
    if "event_name" in inspect.signature(record_type.__init__).parameters:
        return record_type

    def legacy(*, event_name: str, attributes: dict[str, Any], **fields: Any) -> Any:
        return record_type(attributes={"event.name": event_name, **attributes}, **fields)

    return legacy


_LOG_RECORD: Callable[..., Any] | None = None


def log_record(name: str, severity: tuple[SeverityNumber, str], attributes: dict[str, Any], context: Any) -> Any:
    """A log-based event; trace and span ids come from the current context."""
    global _LOG_RECORD
    if _LOG_RECORD is None:
        _LOG_RECORD = _make_log_record()
    return _LOG_RECORD(
        timestamp=time.time_ns(),
        context=context,
        severity_number=severity[0],
        severity_text=severity[1],
        event_name=name,
        attributes=attributes,
    )


class Events:
    """The log-based events: each goes to the providers' event logger, when one exists.

    ``span_events`` says whether a state change or rejection inside a tool call's span
    is also a span event (the tool span reads it for rejections); ``read_settings`` is
    called before a state change is told, so it is the settings' when nothing configured it."""

    def __init__(self, providers: Providers, read_settings: Callable[[], None]) -> None:
        self._providers = providers
        self._read_settings = read_settings
        #: Span events next to the log-based events (``OTEL_BREAKER_SPAN_EVENTS``).
        self.span_events = True

    def event(self, name: str, attributes: dict[str, Any], warning: bool = False) -> None:
        """A log-based event of a module above this one (the loop guard), with the
        active span's trace context."""
        self.emit(name, (SeverityNumber.WARN, "WARN") if warning else REJECTED_SEVERITY, attributes)

    def emit(self, name: str, severity: tuple[SeverityNumber, str], attributes: dict[str, Any]) -> None:
        """One log-based event, correlated with the current span; never raises."""
        try:
            event_logger = self._providers.event_logger()
            if event_logger is None:
                return
            event_logger.emit(log_record(name, severity, attributes, None))
        except Exception:  # telemetry never fails a call or a transition
            logger.debug("otel-breaker: emitting %s failed", name, exc_info=True)

    def announce_transition(self, change: StateChange) -> None:
        """The state change as a log-based event (and a span event inside a tool call's span)."""
        event = {
            ATTR_FROM_STATE: change.from_state.value,
            ATTR_TO_STATE: change.to_state.value,
            ATTR_REASON: change.reason,
        }
        self._read_settings()
        span = trace_api.get_current_span()
        in_call = span.is_recording() and bool(getattr(span, "attributes", {}).get(ATTR_GUARDED))
        if in_call and self.span_events:
            span.add_event(EVENT_STATE_CHANGE, event)
        # Every transition, with or without a span around it (a cooldown that ends on
        # a state read, a health check, a manual open, a change another worker made):
        # inside a tool call's span the event carries its trace context.
        severity = TRANSITION_SEVERITY[change.to_state]
        self.emit(EVENT_STATE_CHANGE, severity, {**breaker_labels(change.breaker), **event})

    def followed(self, breaker: CircuitBreaker, from_state: State, to_state: State) -> None:
        """A breaker followed a change another process made in a shared store (that
        process counted the transition; this one only tells its own log, so the change
        is seen where the breaker lives, also when it came from the command line)."""
        if from_state is to_state:
            return
        event = {
            ATTR_FROM_STATE: from_state.value,
            ATTR_TO_STATE: to_state.value,
            ATTR_REASON: REASON_SHARED_STORE,
        }
        self.emit(EVENT_STATE_CHANGE, TRANSITION_SEVERITY[to_state], {**breaker_labels(breaker), **event})
