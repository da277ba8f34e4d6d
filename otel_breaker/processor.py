"""Breakers driven by span outcomes: a SpanProcessor for tools we did not wrap.

Other instrumentations already trace tool calls: OpenInference, OpenLLMetry,
and the native GenAI spans of pydantic-ai and the OpenAI Agents SDK. When such
a tool span ends, :class:`BreakerSpanProcessor` classifies it and records the
outcome into the breaker for that tool, so every guarded call of the same tool
respects what those spans saw. The same processor feeds the token estimator
from inference spans (``gen_ai.usage.*``).

Our own ``execute_tool`` spans carry ``otel_breaker.guarded=true`` and are never
counted twice; neither is a foreign tool span directly around or inside one of
ours for the same tool (a framework's native span of a call we guarded).
"""

from __future__ import annotations

import logging
import os
import threading
import weakref
from collections import OrderedDict
from typing import Any

from opentelemetry.context import Context
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor
from opentelemetry.trace import StatusCode

from otel_breaker import outcome_rules
from otel_breaker.call_path import NO_OUTPUT, CallPath
from otel_breaker.classify import FAILURE, IGNORED, SUCCESS, is_excluded_name
from otel_breaker.registry import BreakerRegistry, default_registry
from otel_breaker.semconv import ATTR_AGENT, ATTR_GUARDED, ATTR_TOOL
from otel_breaker.telemetry import TELEMETRY
from otel_breaker.tokens import TokenEstimator
from otel_breaker.toolcall import ToolCall, active_call

logger = logging.getLogger("otel_breaker")

_INFERENCE_OPERATIONS = frozenset({"chat", "text_completion", "generate_content", "completion"})
_OUTPUT_ATTRIBUTES = ("gen_ai.tool.call.result", "output.value", "traceloop.entity.output")
_REMEMBERED = 4096


def tool_name_of(attributes: Any) -> str | None:
    """The tool a span describes, in any of the three conventions, else None."""
    if attributes.get("gen_ai.operation.name") == "execute_tool":
        name = attributes.get("gen_ai.tool.name")
        return str(name) if name else None
    if attributes.get("openinference.span.kind") == "TOOL":
        name = attributes.get("tool.name")
        return str(name) if name else None
    if attributes.get("traceloop.span.kind") == "tool":
        name = attributes.get("traceloop.entity.name")
        return str(name) if name else None
    return None


def usage_of(attributes: Any) -> tuple[int, int, str | None] | None:
    """(input tokens, output tokens, model) of an inference span, else None."""
    operation = attributes.get("gen_ai.operation.name")
    kind = attributes.get("openinference.span.kind")
    if operation in _INFERENCE_OPERATIONS or kind == "LLM" or "gen_ai.usage.input_tokens" in attributes:
        tokens_in = attributes.get("gen_ai.usage.input_tokens", attributes.get("llm.token_count.prompt"))
        tokens_out = attributes.get("gen_ai.usage.output_tokens", attributes.get("llm.token_count.completion"))
        if tokens_in is None and tokens_out is None:
            return None
        model = attributes.get("gen_ai.response.model") or attributes.get("gen_ai.request.model")
        model = model or attributes.get("llm.model_name")
        return int(tokens_in or 0), int(tokens_out or 0), (str(model) if model else None)
    return None


#: gRPC status codes by number (``rpc.grpc.status_code`` on a span).
_GRPC_CODES = (
    "OK",
    "CANCELLED",
    "UNKNOWN",
    "INVALID_ARGUMENT",
    "DEADLINE_EXCEEDED",
    "NOT_FOUND",
    "ALREADY_EXISTS",
    "PERMISSION_DENIED",
    "RESOURCE_EXHAUSTED",
    "FAILED_PRECONDITION",
    "ABORTED",
    "OUT_OF_RANGE",
    "UNIMPLEMENTED",
    "INTERNAL",
    "UNAVAILABLE",
    "DATA_LOSS",
    "UNAUTHENTICATED",
)


def _span_reading(span: ReadableSpan, attributes: Any) -> outcome_rules.Reading | None:
    """What a failed foreign tool span says of its error, by the same rules as an exception:
    the semantic conventions' status attributes first, then the exception event's text."""
    reading = outcome_rules.read_status(attributes.get("http.response.status_code"))
    if reading is not None:
        return reading
    grpc_code = attributes.get("rpc.grpc.status_code")
    if isinstance(grpc_code, int) and 0 < grpc_code < len(_GRPC_CODES):
        return outcome_rules.read_grpc(_GRPC_CODES[grpc_code])
    reading = outcome_rules.read_sqlstate(attributes.get("db.response.status_code"))
    if reading is not None:
        return reading
    error_type = attributes.get("error.type")
    if isinstance(error_type, str) and error_type.lstrip("-").isdigit() and len(error_type) <= 6:
        reading = outcome_rules.read_jsonrpc(int(error_type))  # MCP spans: error.type is the JSON-RPC code
        if reading is not None:
            return reading
    for event in span.events:
        if event.name == "exception" and event.attributes:
            kind = event.attributes.get("exception.type") or ""
            message = event.attributes.get("exception.message") or ""
            return outcome_rules.read_text(f"{kind}: {message}"[: outcome_rules.MAX_TEXT_CHARS])
    return None


def _neutral_error(span: ReadableSpan, attributes: Any) -> bool:
    """Whether a failed foreign tool span is neutral: control flow, or an error its own
    protocol calls the caller's mistake. Never raises."""
    try:
        if is_excluded_name(_exception_type(span)):
            return True
        reading = _span_reading(span, attributes)
    except Exception:
        return False
    return reading is not None and reading.kind != outcome_rules.FAILURE


def _exception_type(span: ReadableSpan) -> str | None:
    error_type = span.attributes.get("error.type") if span.attributes else None
    if error_type:
        return str(error_type)
    for event in span.events:
        if event.name == "exception" and event.attributes:
            kind = event.attributes.get("exception.type")
            if kind:
                return str(kind)
    return None


class _LRUSet:
    def __init__(self, size: int) -> None:
        self._items: OrderedDict[Any, None] = OrderedDict()
        self._size = size
        self._lock = threading.Lock()
        _LRU_SETS.add(self)

    def add(self, item: Any) -> None:
        with self._lock:
            self._items[item] = None
            self._items.move_to_end(item)
            if len(self._items) > self._size:
                self._items.popitem(last=False)

    def __contains__(self, item: Any) -> bool:
        with self._lock:
            return item in self._items


class BreakerSpanProcessor(SpanProcessor):
    """Records finished tool spans of other instrumentations into breakers."""

    def __init__(self, registry: BreakerRegistry | None = None, estimator: TokenEstimator | None = None) -> None:
        self._registry = registry
        self._estimator = estimator
        # (trace id, span id) of our guarded spans and of their parents, with tool
        self._guarded: _LRUSet = _LRUSet(_REMEMBERED)

    @property
    def registry(self) -> BreakerRegistry:
        return self._registry if self._registry is not None else default_registry()

    @property
    def estimator(self) -> TokenEstimator:
        return self._estimator if self._estimator is not None else TELEMETRY.estimator

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        """Nothing to do when spans start."""

    def on_end(self, span: ReadableSpan) -> None:
        """Note a tool or inference span for the token estimate, and count a foreign tool
        span's outcome. It runs for every span the SDK ends, ours included, so it reads
        what it needs in one frame, and our own tool spans (marked ``guarded``) are noted
        without looking for usage or a foreign tool name. Never raises."""
        try:
            attributes = span.attributes or {}
            context = span.context
            if context is None:
                return
            estimator = self._estimator if self._estimator is not None else TELEMETRY.metrics.estimator
            if attributes.get(ATTR_GUARDED):
                tool = attributes.get(ATTR_TOOL)
                if not isinstance(tool, str):
                    return
                estimator.note_tool(context.trace_id, span.start_time or 0, tool)
                self._guarded.add((context.trace_id, context.span_id, tool))
                if span.parent is not None:
                    self._guarded.add((context.trace_id, span.parent.span_id, tool))
                return
            usage = usage_of(attributes)
            if usage is not None:
                estimator.note_inference(context.trace_id, span.end_time or 0, *usage)
                return
            tool = tool_name_of(attributes)
            if tool is None:
                return
            estimator.note_tool(context.trace_id, span.start_time or 0, tool)
            if (context.trace_id, context.span_id, tool) in self._guarded:
                return  # a foreign span around one of our guarded calls of the same tool
            if span.parent is not None and (context.trace_id, span.parent.span_id, tool) in self._guarded:
                return  # a foreign span inside one of ours (our span ends after it, see below)
            if self._inside_guarded_call(tool):
                return
            self._record(tool, span, attributes)
        except Exception:
            logger.debug("otel-breaker: span processor failed on %r", span.name, exc_info=True)

    @staticmethod
    def _inside_guarded_call(tool: str) -> bool:
        """A foreign span ending inside one of our calls of the same tool: our
        guarded span is still open, so the parent check above cannot see it yet."""
        active = active_call()
        return active is not None and active.tool == tool

    def _record(self, tool: str, span: ReadableSpan, attributes: Any) -> None:
        status = span.status.status_code if span.status is not None else StatusCode.UNSET
        agent_name = attributes.get(ATTR_AGENT)
        call = ToolCall(tool, framework="span", agent_name=str(agent_name) if agent_name else None)
        if status is StatusCode.ERROR:
            outcome = IGNORED if _neutral_error(span, attributes) else FAILURE
            output: Any = NO_OUTPUT
        else:
            outcome = SUCCESS
            output = next((attributes[a] for a in _OUTPUT_ATTRIBUTES if a in attributes), None)
        # The call already happened: through the call path's one way in for such calls,
        # admission and outcome counted together (so the breaker can become idle and be
        # evicted like any other), a success judged by the breaker's result validator.
        CallPath(self.registry).observe(call, outcome, output)

    def shutdown(self) -> None:
        """Nothing to release."""

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return True


_attached_lock = threading.Lock()
#: Every processor's set of guarded spans, for the at-fork handler below.
_LRU_SETS: weakref.WeakSet[_LRUSet] = weakref.WeakSet()


def _reinit_after_fork() -> None:
    """A lock another thread held at a fork stays held in the child: replace them."""
    global _attached_lock
    _attached_lock = threading.Lock()
    for lru in list(_LRU_SETS):
        lru._lock = threading.Lock()


if hasattr(os, "register_at_fork"):  # not on Windows, which has no fork
    os.register_at_fork(after_in_child=_reinit_after_fork)


def attach(provider: Any, processor: BreakerSpanProcessor | None = None) -> bool:
    """Add a BreakerSpanProcessor to an SDK tracer provider once. Returns True if added."""
    with _attached_lock:
        if getattr(provider, "_otel_breaker_processor", None) is not None:
            return False
        processor = processor or BreakerSpanProcessor()
        provider.add_span_processor(processor)
        provider._otel_breaker_processor = processor
        return True
