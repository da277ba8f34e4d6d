"""Our telemetry follows the GenAI semantic conventions (``semantic-conventions-genai``
release ``semconv.SEMCONV_VERSION``): the schema URL on every scope, the operation
name when the span starts, ``error.type`` on failures, the duration's attributes,
and no session or call ids on any metric."""

from __future__ import annotations

from opentelemetry.sdk.trace import SpanProcessor

from otel_breaker import Guard, ToolCall, semconv
from otel_breaker.classify import error_type


class Down(Exception):
    pass


def fail():
    raise Down("service down")


class StartAttributes(SpanProcessor):
    """The attributes each span had when it started (what a sampler or processor sees)."""

    def __init__(self) -> None:
        self.seen: list[dict] = []

    def on_start(self, span, parent_context=None) -> None:
        self.seen.append(dict(span.attributes or {}))


def test_every_scope_carries_the_schema_url(otel):
    Guard().call(ToolCall("search"), lambda: "ok")
    (span,) = otel.tool_spans()
    assert span.instrumentation_scope.schema_url == semconv.SCHEMA_URL
    data = otel.reader.get_metrics_data()
    scopes = [scope.scope for resource in data.resource_metrics for scope in resource.scope_metrics]
    assert [s.schema_url for s in scopes if s.name == semconv.SCOPE_NAME] == [semconv.SCHEMA_URL]
    assert semconv.SCHEMA_URL.endswith("/gen-ai/" + semconv.SEMCONV_VERSION)


def test_the_operation_name_is_set_when_the_span_starts(otel):
    processor = StartAttributes()
    otel.tracer_provider.add_span_processor(processor)
    Guard().call(ToolCall("search"), lambda: "ok")
    assert processor.seen[-1]["gen_ai.operation.name"] == "execute_tool"
    assert processor.seen[-1]["gen_ai.tool.name"] == "search"


def test_a_failure_has_error_type_on_the_span_and_the_duration(otel):
    try:
        Guard().call(ToolCall("search", agent_name="researcher"), fail)
    except Down:
        pass
    (span,) = otel.tool_spans()
    assert span.attributes["error.type"] == "Down"
    (point,) = otel.metrics()["gen_ai.execute_tool.duration"]
    assert point.attributes["error.type"] == "Down"
    assert point.attributes["gen_ai.tool.name"] == "search"
    assert point.attributes["gen_ai.tool.type"] == "function"


def test_no_metric_carries_a_session_or_call_id(otel):
    for i in range(3):
        Guard().call(ToolCall("search", call_id=f"call-{i}", session_id=f"session-{i}"), lambda: "ok")
    forbidden = {"gen_ai.tool.call.id", "gen_ai.conversation.id", "session.id", "otel_breaker.session"}
    for name, points in otel.metrics().items():
        for point in points:
            assert not forbidden & set(point.attributes), (name, point.attributes)


def test_an_mcp_protocol_error_is_typed_by_its_json_rpc_code():
    class ErrorData:
        code = -32603

    class MCPError(Exception):
        error = ErrorData()

    MCPError.__module__ = "mcp.shared.exceptions"
    assert error_type(MCPError("internal error")) == "-32603"
    assert error_type(Down("x")) == "Down"  # other exceptions: the class name
    assert semconv.ERROR_TOOL == "tool_error"
