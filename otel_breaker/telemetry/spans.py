"""Tool spans: ``execute_tool {tool}`` per guarded call, or the framework's own annotated.

Spans follow the GenAI semantic conventions. Where the framework has already
opened its own ``execute_tool`` span for the call, ours is not started: the
framework's carries our attributes instead (one tool span per call). Per-call
work is one span at most: its name and fixed attributes are built once per
breaker and shape of call.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, NamedTuple

from opentelemetry import context as context_api
from opentelemetry import trace as trace_api
from opentelemetry._logs import SeverityNumber
from opentelemetry.trace import SpanKind, Status, StatusCode

from otel_breaker.breaker import SHADOW, CircuitBreaker, State
from otel_breaker.config import get_settings
from otel_breaker.loglines import logger
from otel_breaker.sanitize import bounded, exception_message, exception_stacktrace
from otel_breaker.semconv import (
    ATTR_ERROR_TYPE,
    ATTR_ESCALATED,
    ATTR_EXCEPTION_TYPE,
    ATTR_FRAMEWORK,
    ATTR_GUARDED,
    ATTR_OPERATION,
    ATTR_OUTCOME,
    ATTR_OUTCOME_REASON,
    ATTR_OUTCOME_RULE,
    ATTR_REJECTED,
    ATTR_RETRY_AFTER,
    ATTR_STATE,
    ATTR_TOOL,
    ATTR_TOOL_ARGUMENTS,
    ATTR_TOOL_CALL_ID,
    ATTR_TOOL_TYPE,
    ATTR_WOULD_REJECT,
    ERROR_CIRCUIT_OPEN,
    EVENT_EXCEPTION,
    EVENT_REJECTED,
    EVENT_RETRY_BUDGET_EXHAUSTED,
    OPERATION,
    span_name,
)
from otel_breaker.telemetry.events import REJECTED_SEVERITY
from otel_breaker.telemetry.labels import call_labels, key_labels
from otel_breaker.telemetry.providers import RECORDING, TRACE_GLOBALS

if TYPE_CHECKING:
    from otel_breaker.rejection import Rejection
    from otel_breaker.telemetry.events import Events
    from otel_breaker.telemetry.metrics import Metrics
    from otel_breaker.telemetry.providers import Providers
    from otel_breaker.toolcall import ToolCall


class CachedSpanAttributes(NamedTuple):
    """A tool span's name and fixed attributes for one shape of call (``key``: tool,
    framework, tool type, agent name, source, origin), built once and kept in the
    breaker's ``span_cache`` while ``settings`` (the settings object the upstream label
    was read from) is the current one. :meth:`Spans.start` fills and reads it."""

    key: tuple[str, str, str, str | None, str | None, str | None]
    settings: object
    name: str
    attributes: dict[str, Any]


def _span_shape(call: ToolCall, key: tuple, settings: Any) -> CachedSpanAttributes:
    """The name and fixed attributes of ``call``'s tool span: its series labels and more."""
    attributes: dict[str, Any] = {
        ATTR_OPERATION: OPERATION,
        **key_labels(call.tool, call.agent_name, call.source, call.origin),
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


#: ``otel_breaker.outcome`` of each outcome (``classify.SUCCESS``, ``FAILURE``, ``IGNORED``).
_OUTCOME_TEXT = ("success", "failure", "ignored")

# ``State.X.value`` is an enum property (slow on a per-call path): the texts, read once.
_STATE_TEXT: dict[State, str] = {state: state.value for state in State}
_CLOSED_TEXT, _OPEN_TEXT, _HALF_OPEN_TEXT = State.CLOSED.value, State.OPEN.value, State.HALF_OPEN.value


def _admitted_state(permit: Any) -> str:
    if isinstance(permit, tuple):
        return _HALF_OPEN_TEXT
    if permit == SHADOW:
        return _OPEN_TEXT
    return _CLOSED_TEXT


class Spans:
    """The per-call hooks the call path calls: each call's tool span, its duration point
    (through ``metrics``) and its events (through ``events``)."""

    def __init__(self, providers: Providers, events: Events, metrics: Metrics) -> None:
        self._providers = providers
        self._events = events
        self._metrics = metrics
        #: Tool arguments and exception text on spans (``OTEL_BREAKER_CAPTURE_CONTENT``).
        self.capture_content = False

    def start(
        self,
        call: ToolCall,
        breaker: CircuitBreaker,
        start_time: int | None = None,
        extra: dict[str, Any] | None = None,
        linked: Any = None,
    ) -> Any:
        """Start the tool span (made current). None when tracing is off or suppressed.

        ``start_time`` (ns since the epoch) is for a call whose span is made after it ran;
        ``extra``: more attributes (the tool's side-effect class, a retry's number);
        ``linked``: another call's span handle to link to (a retry's first attempt)."""
        metrics = self._metrics
        if not metrics.ready:
            metrics.ensure_meter()
        providers = self._providers
        tracer = providers.current_tracer
        if tracer is None:
            if providers.tracer_provider is None and TRACE_GLOBALS.get("_TRACER_PROVIDER", True) is None:
                return None  # metrics only: no tracer anywhere
            tracer = providers.tracer()
        # The span's parent, and the context it is made current in: read once. An empty
        # context holds no suppression key, so only a non-empty one is asked about.
        parent = context_api.get_current()
        if parent and not providers.instrumentation_enabled():
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
            if extra and native.is_recording():
                native.set_attributes(extra)
            return (native, None, state)
        attributes = {**shape.attributes, ATTR_STATE: state, ATTR_REJECTED: False}
        if extra:
            attributes.update(extra)
        if call.call_id is not None:
            attributes[ATTR_TOOL_CALL_ID] = bounded(call.call_id)
        if self.capture_content and call.arguments is not None:
            attributes[ATTR_TOOL_ARGUMENTS] = bounded(call.arguments)
        links = None
        if linked is not None:
            links = [trace_api.Link(linked[0].get_span_context())]
        span = tracer.start_span(
            shape.name, parent, kind=SpanKind.INTERNAL, attributes=attributes, links=links, start_time=start_time
        )
        token = context_api.attach(trace_api.set_span_in_context(span, parent))
        return (span, token, state)

    def detach(self, handle: Any) -> None:
        """Leave the context ``start`` made the span current in (the call has returned)."""
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
        verdict: Any = None,
    ) -> None:
        """Record the duration and end the span of a call that ran. ``verdict`` (a
        :class:`~otel_breaker.classify.Verdict`) of a call that did not succeed puts its
        outcome, reason and rule on the span."""
        duration = self._metrics.duration
        if duration is not None:
            self._metrics.record_duration(duration, call, breaker, elapsed, err)
        if handle is None:
            return
        span = handle[0]
        try:
            admitted = _CLOSED_TEXT if permit.__class__ is int and permit != SHADOW else _admitted_state(permit)
            judged = verdict is not None and verdict.rule is not None
            if (admitted != handle[2] or err is not None or judged) and span.is_recording():
                attributes = {ATTR_STATE: admitted}
                if permit == SHADOW:
                    attributes[ATTR_WOULD_REJECT] = True
                if err is not None:
                    attributes[ATTR_ERROR_TYPE] = err
                if judged:
                    attributes[ATTR_OUTCOME] = _OUTCOME_TEXT[verdict.outcome]
                    attributes[ATTR_OUTCOME_RULE] = bounded(verdict.rule)
                    if verdict.reason is not None:
                        attributes[ATTR_OUTCOME_REASON] = verdict.reason
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
                with RECORDING.lock:
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
            self._events.emit(EVENT_REJECTED, REJECTED_SEVERITY, {**call_labels(call), **event})
            return
        span = handle[0]
        try:
            if span.is_recording():
                span.set_attributes(
                    {ATTR_STATE: info.state.value, ATTR_REJECTED: True, ATTR_ERROR_TYPE: ERROR_CIRCUIT_OPEN}
                )
                if self._events.span_events:
                    span.add_event(EVENT_REJECTED, event)
                span.set_status(Status(StatusCode.ERROR, "circuit open"))
            # The span is still current: the event carries its trace and span ids.
            self._events.emit(EVENT_REJECTED, REJECTED_SEVERITY, {**call_labels(call), **event})
        finally:
            if handle[1] is not None:  # the framework ends its own span
                with RECORDING.lock:
                    span.end()

    def annotate(self, handle: Any, attributes: dict[str, Any]) -> None:
        """Put ``attributes`` on a call's span (one learned while it ran)."""
        if handle is not None and handle[0].is_recording():
            handle[0].set_attributes(attributes)

    def retry_budget_exhausted(self, call: ToolCall, breaker: CircuitBreaker) -> None:
        """A transient failure was not retried: the retry budget of ``breaker`` is spent.
        One log-based event (correlated with the current span), and the count."""
        self._metrics.count_retry(breaker, "budget_exhausted")
        self._events.emit(
            EVENT_RETRY_BUDGET_EXHAUSTED,
            (SeverityNumber.WARN, "WARN"),
            {**key_labels(breaker.name, breaker.agent_name, breaker.source, breaker.origin), **call_labels(call)},
        )

    def escalated(self, handle: Any, call: ToolCall, breaker: CircuitBreaker) -> None:
        """A human approved one call through an open breaker."""
        if handle is not None and handle[0].is_recording():
            handle[0].set_attribute(ATTR_ESCALATED, True)
