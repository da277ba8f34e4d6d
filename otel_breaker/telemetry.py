"""Spans, log-based events and metrics of otel-breaker.

Spans follow the GenAI semantic conventions (``execute_tool {tool}``). State
changes and rejections are log-based events (``otel_breaker.state_change``,
``otel_breaker.rejected``) emitted through the OpenTelemetry Logs API when a
logger provider exists, correlated with the current span; span events of the
same names stay on by default behind ``OTEL_BREAKER_SPAN_EVENTS``. Every name,
unit and description comes from :mod:`otel_breaker.semconv`.

Speed: an SDK ``Counter.add`` costs several microseconds, more than a breaker
decision. So per-call work is at most a span and one duration record; every
count (calls by outcome, rejections, transitions, tokens saved) lives in plain
integers and is exported through observable instruments read at collection
time. With no SDK configured nothing here runs beyond two attribute checks.
"""

from __future__ import annotations

import inspect
import logging
import os
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any, NamedTuple

from opentelemetry import _logs as logs_api
from opentelemetry import context as context_api
from opentelemetry import metrics as metrics_api
from opentelemetry import trace as trace_api
from opentelemetry._logs import SeverityNumber
from opentelemetry.metrics import CallbackOptions, Observation
from opentelemetry.trace import SpanKind, Status, StatusCode

from otel_breaker import breaker as breaker_module
from otel_breaker import semconv
from otel_breaker.breaker import SHADOW, CircuitBreaker, State, StateChange, all_breakers
from otel_breaker.config import get_settings
from otel_breaker.registry import BreakerRegistry, counts_key, default_registry
from otel_breaker.sanitize import (  # noqa: F401 - MAX_ATTRIBUTE_CHARS and bounded stay importable from here
    MAX_ATTRIBUTE_CHARS,
    bounded,
    exception_message,
    exception_stacktrace,
)
from otel_breaker.semconv import (  # noqa: F401 - re-exported: the names other modules and users import from here
    ATTR_AGENT,
    ATTR_ERROR_TYPE,
    ATTR_ESCALATED,
    ATTR_ESTIMATE_SOURCE,
    ATTR_EXCEPTION_TYPE,
    ATTR_FRAMEWORK,
    ATTR_FROM_STATE,
    ATTR_GUARDED,
    ATTR_MODE,
    ATTR_MODEL,
    ATTR_OPERATION,
    ATTR_ORIGIN,
    ATTR_OUTCOME,
    ATTR_REASON,
    ATTR_REJECTED,
    ATTR_RETRY_AFTER,
    ATTR_SOURCE,
    ATTR_STATE,
    ATTR_STORE,
    ATTR_TO_STATE,
    ATTR_TOOL,
    ATTR_TOOL_ARGUMENTS,
    ATTR_TOOL_CALL_ID,
    ATTR_TOOL_TYPE,
    ATTR_UPSTREAM,
    ATTR_WOULD_REJECT,
    DURATION_BUCKETS,
    ERROR_CIRCUIT_OPEN,
    EVENT_EXCEPTION,
    EVENT_REJECTED,
    EVENT_STATE_CHANGE,
    OPERATION,
    SCOPE_NAME,
    SPAN_NAME,
    span_name,
)
from otel_breaker.tokens import TokenEstimator, parse_prices
from otel_breaker.upstream import label_of as _upstream_label

if TYPE_CHECKING:
    from otel_breaker.rejection import Rejection
    from otel_breaker.toolcall import ToolCall

logger = logging.getLogger("otel_breaker")

try:
    from otel_breaker._version import __version__
except ImportError:  # pragma: no cover
    __version__ = "0.0.0"

# Instrument names, kept for code that imported them from here.
METRIC_STATE = semconv.STATE.name
METRIC_TRANSITIONS = semconv.TRANSITIONS.name
METRIC_CALLS = semconv.CALLS.name
METRIC_REJECTED = semconv.REJECTED.name
METRIC_TOKENS_SAVED = semconv.TOKENS_SAVED.name
METRIC_COST_SAVED = semconv.COST_SAVED.name
METRIC_DURATION = semconv.DURATION.name
METRIC_STORE_ERRORS = semconv.STORE_ERRORS.name

OUTCOMES = ("success", "failure", "ignored")
STATES = (State.CLOSED, State.OPEN, State.HALF_OPEN)
#: The OpenTelemetry SDK's default limit of series (attribute sets) per instrument.
SDK_CARDINALITY_LIMIT = 2000

#: Severity of each log-based event: an opening is a warning (a tool is cut off),
#: a recovery or probe is information, a rejection is information too (it is the
#: breaker doing its job; the opening already warned).
_TRANSITION_SEVERITY = {
    State.OPEN: (SeverityNumber.WARN, "WARN"),
    State.HALF_OPEN: (SeverityNumber.INFO, "INFO"),
    State.CLOSED: (SeverityNumber.INFO, "INFO"),
}
_REJECTED_SEVERITY = (SeverityNumber.INFO, "INFO")
#: ``otel_breaker.reason`` of a change this process followed from a shared store.
REASON_SHARED_STORE = "shared_store"


def _labels(breaker: CircuitBreaker) -> dict[str, str]:
    return _key_labels(breaker.name, breaker.agent_name, breaker.source, breaker.origin)


class CachedSpanAttributes(NamedTuple):
    """A tool span's name and fixed attributes for one shape of call (``key``: tool,
    framework, tool type, agent name, source), built once and kept in the breaker's
    ``span_cache`` while ``settings`` (the settings object the upstream label was
    read from) is the current one. :meth:`Telemetry.start` fills and reads it."""

    key: tuple[str, str, str, str | None, str | None]
    settings: object
    name: str
    attributes: dict[str, Any]


def _span_shape(call: ToolCall, key: tuple, settings: Any) -> CachedSpanAttributes:
    """The name and fixed attributes of ``call``'s tool span: its series labels and more."""
    attributes: dict[str, Any] = {
        ATTR_OPERATION: OPERATION,
        **_key_labels(call.tool, call.agent_name, call.source, call.origin),
        ATTR_GUARDED: True,
    }
    if call.tool_type:
        attributes[ATTR_TOOL_TYPE] = call.tool_type
    if call.framework != "python":
        attributes[ATTR_FRAMEWORK] = call.framework
    return CachedSpanAttributes(key, settings, span_name(attributes[ATTR_TOOL]), attributes)


def _native_tool_span(parent: Any, call: ToolCall) -> Any:
    """The framework's own ``execute_tool`` span of this call when it is current, else None.

    Google ADK, Agent Framework, Semantic Kernel and Strands (and others with
    their tracing on) open one around the tool they run; the GenAI conventions
    ask instrumentations not to add a second one. It is this call's when it
    names the same tool or call id; a span we already marked is not foreign."""
    span = trace_api.get_current_span(parent)
    if not span.is_recording():
        return None
    attributes = getattr(span, "attributes", None)
    if attributes is None or attributes.get(ATTR_GUARDED):
        return None
    name = str(getattr(span, "name", ""))
    if attributes.get(ATTR_OPERATION) != OPERATION and not name.startswith(OPERATION):
        return None
    call_id = attributes.get(ATTR_TOOL_CALL_ID)
    if call_id is not None and call.call_id is not None:
        return span if str(call_id) == str(call.call_id) else None
    tool = attributes.get(ATTR_TOOL)
    if tool is None:
        tool = name[len(OPERATION) :].strip()
    tool = str(tool)
    if tool == call.tool or not tool or tool.endswith(call.tool) or call.tool.endswith(tool):
        return span
    return None


def _annotate_native(span: Any, shape: CachedSpanAttributes, call: ToolCall, state: str) -> None:
    """Our attributes on the framework's tool span; its own ``gen_ai.*`` values win."""
    existing = span.attributes
    attributes = {
        key: value for key, value in shape.attributes.items() if key.startswith("otel_breaker.") or key not in existing
    }
    attributes[ATTR_STATE] = state
    attributes[ATTR_REJECTED] = False
    if call.call_id is not None and ATTR_TOOL_CALL_ID not in existing:
        attributes[ATTR_TOOL_CALL_ID] = bounded(call.call_id)
    span.set_attributes(attributes)


def _key_labels(tool: str, agent: str | None, source: str | None = None, origin: str | None = None) -> dict[str, str]:
    """Series labels: the bounded parts of a tool's identity, so two same-named tools
    of different sources or code are two series (never an object id or a per-request value)."""
    labels = {ATTR_TOOL: bounded(tool)}
    if agent:
        labels[ATTR_AGENT] = bounded(agent)
    if source:
        labels[ATTR_SOURCE] = bounded(source)
    if origin:
        labels[ATTR_ORIGIN] = bounded(origin)
    upstream = _upstream_label(tool, source)
    if upstream:
        labels[ATTR_UPSTREAM] = bounded(upstream)
    return labels


def _call_labels(call: ToolCall) -> dict[str, Any]:
    labels: dict[str, Any] = {ATTR_TOOL: bounded(call.tool)}
    if call.agent_name:
        labels[ATTR_AGENT] = bounded(call.agent_name)
    if call.call_id is not None:
        labels[ATTR_TOOL_CALL_ID] = bounded(call.call_id)
    upstream = _upstream_label(call.tool, call.source)
    if upstream:
        labels[ATTR_UPSTREAM] = bounded(upstream)
    return labels


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


def _log_record(name: str, severity: tuple[SeverityNumber, str], attributes: dict[str, Any], context: Any) -> Any:
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


# ``State.X.value`` is an enum property (slow on a per-call path): the texts, read once.
_STATE_TEXT: dict[State, str] = {state: state.value for state in State}
_CLOSED_TEXT, _OPEN_TEXT, _HALF_OPEN_TEXT = State.CLOSED.value, State.OPEN.value, State.HALF_OPEN.value


def _admitted_state(permit: Any) -> str:
    if isinstance(permit, tuple):
        return _HALF_OPEN_TEXT
    if permit == SHADOW:
        return _OPEN_TEXT
    return _CLOSED_TEXT


def _global_provider_slots() -> tuple[Mapping[str, Any], Mapping[str, Any], Mapping[str, Any]]:
    """The OpenTelemetry API's global tracer, meter and logger provider slots.

    The one place that reads private OpenTelemetry state. The API has no public
    "has a provider been set?" test that costs nothing: ``get_tracer_provider()``
    answers with a proxy and reads the environment on every call, too slow for a
    check made on every tool call. The slots are module globals that stay None
    until an SDK sets a provider (set once, never unset), so a dict lookup
    answers. Should a future API rename them, each falls back to "always
    observe", and ``tests/test_telemetry.py`` fails loudly.
    """
    from opentelemetry._logs import _internal as logs_internal

    found = []
    for module, slot in (
        (trace_api, "_TRACER_PROVIDER"),
        (metrics_api._internal, "_METER_PROVIDER"),
        (logs_internal, "_LOGGER_PROVIDER"),
    ):
        names = vars(module)
        if slot in names:
            found.append(names)
        else:  # pragma: no cover - an API that moved its globals
            logger.debug("otel-breaker: %s.%s not found; assuming a provider is set", module.__name__, slot)
            found.append({slot: True})
    return found[0], found[1], found[2]


_TRACE_GLOBALS, _METRICS_GLOBALS, _LOGS_GLOBALS = _global_provider_slots()


def _suppression_check() -> Callable[[], bool]:
    """``is_instrumentation_enabled`` of opentelemetry-instrumentation (the public
    test every contrib instrumentation honours), imported on first use: it is not
    installed with the API alone, and importing it costs tens of milliseconds."""
    try:
        from opentelemetry.instrumentation.utils import is_instrumentation_enabled
    except ImportError:  # the API alone: only the API's own key can suppress
        key = context_api._SUPPRESS_INSTRUMENTATION_KEY

        def is_instrumentation_enabled() -> bool:
            return not context_api.get_value(key)

    return is_instrumentation_enabled


class Telemetry:
    """The process-wide telemetry of all breakers."""

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
        self._transitions: dict[tuple[str, str | None, str, str, str | None], int] = {}
        #: (tool, agent, source) -> the state its breaker last entered (the gauge of a pruned one).
        self._last_state: dict[tuple[str, str | None, str | None, str | None], State] = {}
        self._settings_read = False
        # ``explicit`` lives in a slot the breaker reads on every call (see observing).
        self._explicit: dict[str, Any] = {"explicit": None}
        breaker_module.add_global_listener(self._on_transition)
        breaker_module.add_follow_listener(self.followed)

    def _first_instrumentation_check(self) -> bool:
        self._instrumentation_enabled = _suppression_check()
        return self._instrumentation_enabled()

    @property
    def explicit(self) -> bool:
        """True once explicit providers are configured; with no providers at all
        (and no global SDK) the call path skips telemetry entirely."""
        return self._explicit["explicit"] is not None

    @explicit.setter
    def explicit(self, value: bool) -> None:
        self._explicit["explicit"] = True if value else None

    def watch_slots(self) -> tuple[tuple[dict[str, Any], str], ...]:
        """Where a provider appears when one exists: the explicit one, then the global ones."""
        return (
            (self._explicit, "explicit"),
            (_TRACE_GLOBALS, "_TRACER_PROVIDER"),
            (_METRICS_GLOBALS, "_METER_PROVIDER"),
            (_LOGS_GLOBALS, "_LOGGER_PROVIDER"),
        )

    def observing(self) -> bool:
        """Whether any tracer, meter or logger provider exists (explicit or global)."""
        return any(slot.get(name) is not None for slot, name in self.watch_slots())

    # -- configuration ---------------------------------------------------------------

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
                self.estimator = TokenEstimator(self.estimator.tokens_per_call)
                self._registry = None
                for breaker in all_breakers():
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

    @property
    def registry(self) -> BreakerRegistry:
        return self._registry if self._registry is not None else default_registry()

    # -- providers -------------------------------------------------------------------------

    def tracer(self) -> Any:
        """The tracer, or None while no tracer provider is configured anywhere."""
        tracer = self._tracer
        if tracer is not None:
            return tracer
        provider = self._tracer_provider
        if provider is None:
            if _TRACE_GLOBALS.get("_TRACER_PROVIDER", True) is None:
                return None
            provider = trace_api.get_tracer_provider()
        self._read_settings()
        self._tracer = provider.get_tracer(SCOPE_NAME, __version__, schema_url=semconv.SCHEMA_URL)
        return self._tracer

    def _ensure_meter(self) -> bool:
        if self._meter_ready:
            return True
        provider = self._meter_provider
        if provider is None:
            if _METRICS_GLOBALS.get("_METER_PROVIDER", True) is None:
                return False
            provider = metrics_api.get_meter_provider()
        with self._lock:
            if self._meter_ready:
                return True
            self._read_settings()
            self._create_instruments(provider.get_meter(SCOPE_NAME, __version__, schema_url=semconv.SCHEMA_URL))
            self._meter_ready = True
        return True

    def _create_instruments(self, meter: Any) -> None:
        meter.create_observable_gauge(
            semconv.STATE.name,
            callbacks=[self._within_cardinality(semconv.STATE.name, self._observe_state)],
            unit=semconv.STATE.unit,
            description=semconv.STATE.description,
        )
        counters = (
            (semconv.TRANSITIONS, self._observe_transitions),
            (semconv.CALLS, self._observe_calls),
            (semconv.REJECTED, self._observe_rejected),
            (semconv.TOKENS_SAVED, self._observe_tokens),
            (semconv.COST_SAVED, self._observe_cost),
            (semconv.STORE_ERRORS, self._observe_store_errors),
        )
        counters += ((semconv.LOOPS, self._observe_loops),)
        for instrument, callback in counters:
            meter.create_observable_counter(
                instrument.name,
                callbacks=[self._within_cardinality(instrument.name, callback)],
                unit=instrument.unit,
                description=instrument.description,
            )
        if self.duration_metric:
            self._duration = meter.create_histogram(
                semconv.DURATION.name,
                unit=semconv.DURATION.unit,
                description=semconv.DURATION.description,
                explicit_bucket_boundaries_advisory=list(DURATION_BUCKETS),
            )

    def _within_cardinality(self, name: str, callback: Any) -> Any:
        """``callback``, warning once when it yields more series than the SDK keeps
        per instrument by default: the SDK folds the rest into one overflow series."""

        def observe(options: CallbackOptions) -> list[Observation]:
            observations = list(callback(options))
            if len(observations) > SDK_CARDINALITY_LIMIT and name not in _CARDINALITY_WARNED:
                _CARDINALITY_WARNED.add(name)
                logger.warning(
                    "otel-breaker: %s has %d series, more than the %d the OpenTelemetry SDK keeps per instrument "
                    "by default; the rest are summed into one series with otel.metric.overflow=true. Raise the "
                    "SDK's limit (a View with aggregation_cardinality_limit, or the reader's cardinality_limits) "
                    "or lower OTEL_BREAKER_MAX_BREAKERS (logged once per instrument).",
                    name,
                    len(observations),
                    SDK_CARDINALITY_LIMIT,
                )
            return observations

        return observe

    # -- the per-call hooks the guard calls --------------------------------------------------

    def start(self, call: ToolCall, breaker: CircuitBreaker, start_time: int | None = None) -> Any:
        """Start the tool span (made current). None when tracing is off or suppressed.

        ``start_time`` (ns since the epoch) is for a call whose span is made after it ran."""
        if not self._meter_ready:
            self._ensure_meter()
        tracer = self._tracer
        if tracer is None:
            if self._tracer_provider is None and _TRACE_GLOBALS.get("_TRACER_PROVIDER", True) is None:
                return None  # metrics only: no tracer anywhere
            tracer = self.tracer()
        # The span's parent, and the context it is made current in: read once. An empty
        # context holds no suppression key, so only a non-empty one is asked about.
        parent = context_api.get_current()
        if parent and not self._instrumentation_enabled():
            return None
        # The state before admission is nearly always the admitted one: set it now, in
        # one go with the rest, and correct it in finish() in the rare other case.
        state = _STATE_TEXT[breaker.peek_state()]
        # Name and fixed attributes: built once per breaker and shape of call.
        shape = breaker.span_cache
        key = (call.tool, call.framework, call.tool_type, call.agent_name, call.source, call.origin)
        settings = get_settings()
        if shape is None or shape.key != key or shape.settings is not settings:
            shape = breaker.span_cache = _span_shape(call, key, settings)
        native = _native_tool_span(parent, call) if parent else None
        if native is not None:
            # The framework traces this call itself: one span per call, so ours is
            # not started; the framework's carries our attributes instead.
            _annotate_native(native, shape, call, state)
            return (native, None, state)
        attributes = {**shape.attributes, ATTR_STATE: state, ATTR_REJECTED: False}
        if call.call_id is not None:
            attributes[ATTR_TOOL_CALL_ID] = bounded(call.call_id)
        if self.capture_content and call.arguments is not None:
            attributes[ATTR_TOOL_ARGUMENTS] = bounded(call.arguments)
        span = tracer.start_span(
            shape.name, parent, kind=SpanKind.INTERNAL, attributes=attributes, start_time=start_time
        )
        token = context_api.attach(trace_api.set_span_in_context(span, parent))
        return (span, token, state)

    def detach(self, handle: Any) -> None:
        if handle[1] is None:  # the framework's own span: its context is the framework's to leave
            return
        try:
            context_api.detach(handle[1])
        except Exception:  # a foreign context manager misbehaved; never fail the call
            logger.debug("otel-breaker: context detach failed", exc_info=True)

    def finish(
        self,
        handle: Any,
        call: ToolCall,
        breaker: CircuitBreaker,
        elapsed: float,
        err: str | None,
        exc: BaseException | None,
        permit: Any = None,
        end_time: int | None = None,
    ) -> None:
        """Record the duration and end the span of a call that ran."""
        duration = self._duration
        if duration is not None:
            cache = breaker.telemetry_cache
            if cache is None:
                # The semconv attributes of the duration: tool, agent, tool type, error.type
                # (and our source and upstream); never a session or call id.
                labels = _labels(breaker)
                if call.tool_type:
                    labels[ATTR_TOOL_TYPE] = call.tool_type
                cache = breaker.telemetry_cache = {None: labels}
            attributes = cache.get(err)
            if attributes is None:
                attributes = cache[err] = {**cache[None], ATTR_ERROR_TYPE: err}
            try:
                # Under the lock our fork handlers take: no thread of ours is inside the
                # SDK's record (holding its aggregation lock) when the process forks.
                with _RECORDING.lock:
                    duration.record(elapsed, attributes)
            except Exception:
                logger.debug("otel-breaker: duration record failed", exc_info=True)
        if handle is None:
            return
        span = handle[0]
        try:
            admitted = _CLOSED_TEXT if permit.__class__ is int and permit != SHADOW else _admitted_state(permit)
            if (admitted != handle[2] or err is not None) and span.is_recording():
                attributes = {ATTR_STATE: admitted}
                if permit == SHADOW:
                    attributes[ATTR_WOULD_REJECT] = True
                if err is not None:
                    attributes[ATTR_ERROR_TYPE] = err
                span.set_attributes(attributes)
                if err is not None:
                    description = exception_message(exc) if (exc is not None and self.capture_content) else None
                    span.set_status(Status(StatusCode.ERROR, description))
                if exc is not None and handle[1] is not None:
                    self._exception_event(span, exc)
        finally:
            if handle[1] is not None:  # the framework ends its own span
                # Ending runs the span processors (an exporter's lock): under the recording
                # lock, so no thread of ours holds one of theirs when the process forks.
                with _RECORDING.lock:
                    span.end(end_time=end_time)

    def past_call(
        self,
        call: ToolCall,
        breaker: CircuitBreaker,
        start_ns: int,
        end_ns: int,
        err: str | None,
        exc: BaseException | None,
        permit: Any,
    ) -> None:
        """The span and duration point of a call that could only be judged a tool call
        once it had run (an MCP name its server first had to confirm), with the call's
        own start and end times: every real tool call is seen, none twice."""
        handle = self.start(call, breaker, start_time=start_ns)
        if handle is not None:
            self.detach(handle)
        self.finish(handle, call, breaker, max(0, end_ns - start_ns) / 1e9, err, exc, permit, end_time=end_ns)

    def exception(self, handle: Any, exc: BaseException) -> None:
        """Add an exception event to a call's span (already ended spans ignore it)."""
        if handle is not None:
            self._exception_event(handle[0], exc)

    def _exception_event(self, span: Any, exc: BaseException) -> None:
        if self.capture_content:
            # Capped and with obvious secrets masked: exception text is the tool's, not ours.
            span.add_event(
                "exception",
                {
                    "exception.type": type(exc).__qualname__,
                    "exception.message": exception_message(exc),
                    "exception.stacktrace": exception_stacktrace(exc),
                },
            )
        else:
            span.add_event(EVENT_EXCEPTION, {ATTR_EXCEPTION_TYPE: type(exc).__qualname__})

    def rejected(self, handle: Any, call: ToolCall, breaker: CircuitBreaker, info: Rejection) -> None:
        """A call was rejected: one log-based event, and its short span finished.
        (Counting is the breaker's.)"""
        retry_after = -1.0 if info.retry_after is None else info.retry_after
        event = {ATTR_STATE: info.state.value, ATTR_RETRY_AFTER: retry_after}
        if handle is None:
            self._emit_event(EVENT_REJECTED, _REJECTED_SEVERITY, {**_call_labels(call), **event}, None)
            return
        span = handle[0]
        try:
            if span.is_recording():
                span.set_attributes(
                    {ATTR_STATE: info.state.value, ATTR_REJECTED: True, ATTR_ERROR_TYPE: ERROR_CIRCUIT_OPEN}
                )
                if self.span_events:
                    span.add_event(EVENT_REJECTED, event)
                span.set_status(Status(StatusCode.ERROR, "circuit open"))
            # The span is still current: the event carries its trace and span ids.
            self._emit_event(EVENT_REJECTED, _REJECTED_SEVERITY, {**_call_labels(call), **event}, None)
        finally:
            if handle[1] is not None:  # the framework ends its own span
                with _RECORDING.lock:
                    span.end()

    def escalated(self, handle: Any, call: ToolCall, breaker: CircuitBreaker) -> None:
        """A human approved one call through an open breaker."""
        if handle is not None and handle[0].is_recording():
            handle[0].set_attribute(ATTR_ESCALATED, True)

    # -- transitions ----------------------------------------------------------------------------

    def _on_transition(self, change: StateChange) -> None:
        breaker = change.breaker
        key = (
            breaker.name,
            breaker.agent_name,
            change.from_state.value,
            change.to_state.value,
            breaker.source,
            breaker.origin,
        )
        with self._lock:
            self._transitions[key] = self._transitions.get(key, 0) + 1
            self._last_state[(breaker.name, breaker.agent_name, breaker.source, breaker.origin)] = change.to_state
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
        severity = _TRANSITION_SEVERITY[change.to_state]
        self._emit_event(EVENT_STATE_CHANGE, severity, {**_labels(breaker), **event}, None)

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
        self._emit_event(EVENT_STATE_CHANGE, _TRANSITION_SEVERITY[to_state], {**_labels(breaker), **event}, None)

    # -- log-based events -------------------------------------------------------------------------

    def logs_on(self) -> bool:
        """Whether log-based events have somewhere to go (cheap: two lookups)."""
        return self._logger_provider is not None or _LOGS_GLOBALS.get("_LOGGER_PROVIDER") is not None

    def event_logger(self) -> Any:
        """The logger log-based events go to, or None while no logger provider exists."""
        logger_ = self._event_logger
        if logger_ is not None:
            return logger_
        provider = self._logger_provider
        if provider is None:
            if _LOGS_GLOBALS.get("_LOGGER_PROVIDER", True) is None:
                return None
            provider = logs_api.get_logger_provider()
        self._event_logger = provider.get_logger(SCOPE_NAME, __version__, schema_url=semconv.SCHEMA_URL)
        return self._event_logger

    def event(self, name: str, attributes: dict[str, Any], warning: bool = False) -> None:
        """A log-based event of a module above this one (the loop guard), with the
        active span's trace context."""
        self._emit_event(name, (SeverityNumber.WARN, "WARN") if warning else _REJECTED_SEVERITY, attributes, None)

    def _emit_event(
        self, name: str, severity: tuple[SeverityNumber, str], attributes: dict[str, Any], context: Any
    ) -> None:
        try:
            event_logger = self.event_logger()
            if event_logger is None:
                return
            event_logger.emit(_log_record(name, severity, attributes, context))
        except Exception:  # telemetry never fails a call or a transition
            logger.debug("otel-breaker: emitting %s failed", name, exc_info=True)

    # -- observable instruments ------------------------------------------------------------------

    def live_breakers(self) -> list[CircuitBreaker]:
        """Breakers whose counts are not yet folded into a registry's totals."""
        return [b for b in all_breakers() if not b.retired]

    def counts(self) -> dict[tuple[str, str | None, str, str | None, str | None], list[int]]:
        """Lifetime counts per (tool, agent, mode, source, origin), live and pruned breakers together."""
        totals = self.registry.retired_counts()
        for breaker in self.live_breakers():
            values = totals.setdefault(counts_key(breaker), [0, 0, 0, 0, 0])
            for index, value in enumerate(breaker.lifetime_counts()):
                values[index] += value
        return totals

    def transitions(self) -> dict[tuple[str, str | None, str, str, str | None, str | None], int]:
        with self._lock:
            return dict(self._transitions)

    def _retired_series(self) -> set[tuple[str, str | None, str | None, str | None]]:
        """(tool, agent, source, origin) of breakers the registry pruned (evicted idle at
        the cap, a session ended, an agent object gone in instance scope): their series
        stay in every export, the last at exit included, as the counters' do."""
        return {(tool, agent, source, origin) for tool, agent, _mode, source, origin in self.registry.retired_counts()}

    def _observe_state(self, options: CallbackOptions) -> Iterable[Observation]:
        states: dict[tuple[str, str | None, str | None, str | None], dict[State, int]] = {}
        for breaker in self.live_breakers():
            key = (breaker.name, breaker.agent_name, breaker.source, breaker.origin)
            per_state = states.setdefault(key, dict.fromkeys(STATES, 0))
            per_state[breaker.state] += 1
        for key in self._retired_series():
            if key not in states:  # no live breaker: the state its last one was left in
                states[key] = dict.fromkeys(STATES, 0)
                states[key][self._last_state.get(key, State.CLOSED)] = 1
        for (tool, agent, source, origin), per_state in states.items():
            labels = _key_labels(tool, agent, source, origin)
            for state, value in per_state.items():
                yield Observation(value, {**labels, ATTR_STATE: state.value})

    def _observe_transitions(self, options: CallbackOptions) -> Iterable[Observation]:
        transitions = self.transitions()
        # Every breaker reports its "-> open" series from the start, at 0: rate() and
        # increase() only see growth after a series' first sample, so a first opening
        # would otherwise never count on dashboards and in alerts.
        series = {(b.name, b.agent_name, b.source, b.origin) for b in self.live_breakers()} | self._retired_series()
        for tool, agent, source, origin in series:
            for from_state in (State.CLOSED.value, State.HALF_OPEN.value):
                transitions.setdefault((tool, agent, from_state, State.OPEN.value, source, origin), 0)
        for (tool, agent, from_state, to_state, source, origin), value in transitions.items():
            labels = _key_labels(tool, agent, source, origin)
            yield Observation(value, {**labels, ATTR_FROM_STATE: from_state, ATTR_TO_STATE: to_state})

    def _observe_calls(self, options: CallbackOptions) -> Iterable[Observation]:
        per_tool: dict[tuple[str, str | None, str | None, str | None], list[int]] = {}
        for (tool, agent, _mode, source, origin), values in self.counts().items():
            totals = per_tool.setdefault((tool, agent, source, origin), [0, 0, 0])
            for index in range(3):
                totals[index] += values[index]
        for (tool, agent, source, origin), totals in per_tool.items():
            labels = _key_labels(tool, agent, source, origin)
            for outcome, value in zip(OUTCOMES, totals, strict=True):
                yield Observation(value, {**labels, ATTR_OUTCOME: outcome})

    def _observe_loops(self, options: CallbackOptions) -> Iterable[Observation]:
        for source in LOOP_SOURCES:
            for value, labels in source(False):
                yield Observation(value, labels)

    def _observe_rejected(self, options: CallbackOptions) -> Iterable[Observation]:
        for source in LOOP_SOURCES:  # calls the loop guard did not run (reason="loop")
            for value, labels in source(True):
                yield Observation(value, labels)
        for (tool, agent, mode, source, origin), values in self.counts().items():
            labels = {**_key_labels(tool, agent, source, origin), ATTR_MODE: mode}
            if values[3] or not values[4]:
                yield Observation(values[3], {**labels, ATTR_STATE: State.OPEN.value})
            if values[4]:
                yield Observation(values[4], {**labels, ATTR_STATE: State.HALF_OPEN.value})

    def settle_savings(self) -> None:
        """Apply the current token estimate to rejections since the last settle."""
        self.estimator.settle(
            (key, key[0], values[3] + values[4]) for key, values in self.counts().items() if key[2] == "enforce"
        )
        for source in SAVINGS_SOURCES:  # calls the loop guard answered: each saved a model turn
            self.estimator.settle(source())

    def _observe_tokens(self, options: CallbackOptions) -> Iterable[Observation]:
        self.settle_savings()
        for (tool, source), value in self.estimator.saved_tokens().items():
            yield Observation(value, {ATTR_TOOL: bounded(tool), ATTR_ESTIMATE_SOURCE: source})

    def _observe_cost(self, options: CallbackOptions) -> Iterable[Observation]:
        for (tool, model), value in self.estimator.saved_cost().items():
            yield Observation(value, {ATTR_TOOL: bounded(tool), ATTR_MODEL: bounded(model)})

    def _observe_store_errors(self, options: CallbackOptions) -> Iterable[Observation]:
        errors = getattr(self.registry.store, "error_count", None)
        if errors is not None:
            yield Observation(int(errors), {ATTR_STORE: getattr(self.registry.store, "name", "store")})


_CARDINALITY_WARNED: set[str] = set()

#: Counts of modules above this one, observed with the instruments here:
#: ``source(rejected)`` yields (value, attributes) for ``otel_breaker.calls.rejected``
#: (True) or ``otel_breaker.loops`` (False). The loop guard adds itself.
LOOP_SOURCES: list[Callable[[bool], Iterable[tuple[int, dict[str, Any]]]]] = []
#: Rejections of modules above this one that save tokens: ``source()`` yields
#: (key, tool, lifetime count) as :meth:`TokenEstimator.settle` takes them.
SAVINGS_SOURCES: list[Callable[[], Iterable[tuple[object, str, int]]]] = []

TELEMETRY = Telemetry()


def observing() -> bool:
    """Whether the call path should start telemetry at all."""
    return TELEMETRY.observing()


def _reinit_after_fork() -> None:
    """A lock another thread held at a fork stays held in the child: replace it."""
    TELEMETRY._lock = threading.Lock()


class _Recording:
    """The lock every record into an SDK instrument of ours, and every end of a span of
    ours (which runs the span processors), is made under.

    The SDK's histogram takes a lock of its own (its aggregation's) on every record,
    and it does not re-create it in a forked child: a thread of the parent caught
    inside ``record`` at the fork leaves it held there, and the child's first tool
    call would wait on it forever. So the process holds this lock while it forks
    (``before``): no thread of ours is then inside the SDK's record, and the SDK's
    locks we could have taken are free in the child. Parent and child release it
    after the fork; the child gets a fresh one (the SDK's own export thread is the
    SDK's to make safe)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()

    def before_fork(self) -> None:
        self.lock.acquire()

    def after_fork_in_parent(self) -> None:
        self.lock.release()

    def after_fork_in_child(self) -> None:
        self.lock = threading.Lock()


_RECORDING = _Recording()

if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_reinit_after_fork)
    os.register_at_fork(
        before=_RECORDING.before_fork,
        after_in_parent=_RECORDING.after_fork_in_parent,
        after_in_child=_RECORDING.after_fork_in_child,
    )


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
