"""Breakers driven by the tool spans of other instrumentations."""

from __future__ import annotations

import pytest
from opentelemetry.trace import Status, StatusCode

from otel_breaker import CircuitBreakerConfig, Guard, State, ToolCall, get_circuit_breaker
from otel_breaker.processor import BreakerSpanProcessor, attach

SHAPES = {
    "genai": lambda tool: {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": tool},
    "openinference": lambda tool: {"openinference.span.kind": "TOOL", "tool.name": tool},
    "openllmetry": lambda tool: {"traceloop.span.kind": "tool", "traceloop.entity.name": tool},
}


@pytest.fixture
def tracer(otel):
    assert attach(otel.tracer_provider, BreakerSpanProcessor())
    assert not attach(otel.tracer_provider)  # once per provider
    return otel.tracer_provider.get_tracer("other-instrumentation")


def foreign_tool_span(tracer, shape, tool, error=None, attributes=None):
    with tracer.start_as_current_span(f"{tool} tool", attributes={**SHAPES[shape](tool), **(attributes or {})}) as span:
        if error is not None:
            span.set_attribute("error.type", error)
            span.set_status(Status(StatusCode.ERROR))


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_failed_foreign_tool_spans_open_the_breaker_guarded_calls_respect(tracer, shape):
    get_circuit_breaker("weather", CircuitBreakerConfig(failure_threshold=3))
    for _ in range(3):
        foreign_tool_span(tracer, shape, "weather", error="HTTPError")
    breaker = get_circuit_breaker("weather")
    assert breaker.state is State.OPEN
    assert Guard().call(ToolCall("weather"), lambda: pytest.fail("must not run"))["circuit_open"] is True


def test_successful_foreign_spans_reset_the_streak(tracer):
    get_circuit_breaker("weather", CircuitBreakerConfig(failure_threshold=2))
    foreign_tool_span(tracer, "genai", "weather", error="HTTPError")
    foreign_tool_span(tracer, "openinference", "weather")
    foreign_tool_span(tracer, "openllmetry", "weather", error="HTTPError")
    assert get_circuit_breaker("weather").state is State.CLOSED
    assert get_circuit_breaker("weather").stats.success_count == 1


def test_excluded_errors_in_spans_are_ignored(tracer):
    get_circuit_breaker("transfer", CircuitBreakerConfig(failure_threshold=1))
    foreign_tool_span(tracer, "genai", "transfer", error="ApprovalDeniedError")
    foreign_tool_span(tracer, "genai", "transfer", error="asyncio.CancelledError")
    stats = get_circuit_breaker("transfer").stats
    assert stats.state is State.CLOSED and stats.ignored_count == 2


def test_result_validators_see_the_span_output(tracer):
    get_circuit_breaker(
        "search", CircuitBreakerConfig(failure_threshold=1, is_failure_result=lambda out: "ERROR" in out)
    )
    foreign_tool_span(tracer, "openinference", "search", attributes={"output.value": "ERROR: quota exceeded"})
    assert get_circuit_breaker("search").state is State.OPEN


def test_our_own_spans_are_not_counted_twice(tracer):
    def fail():
        raise RuntimeError

    with pytest.raises(RuntimeError):
        Guard().call(ToolCall("search"), fail)
    Guard().call(ToolCall("search"), lambda: 1)
    stats = get_circuit_breaker("search").stats
    assert (stats.failure_count, stats.success_count) == (1, 1)


def test_a_framework_span_around_our_guarded_call_is_not_counted_again(tracer):
    def fail():
        raise RuntimeError

    for _ in range(2):
        native = tracer.start_as_current_span("native tool span", attributes=SHAPES["genai"]("search"))
        with pytest.raises(RuntimeError), native as span:
            try:
                Guard().call(ToolCall("search"), fail)
            except RuntimeError:
                span.set_status(Status(StatusCode.ERROR))
                raise
    assert get_circuit_breaker("search").stats.failure_count == 2


def test_a_framework_span_inside_our_adapter_call_is_not_counted_again(tracer):
    from otel_breaker.instrumentation.base import FrameworkAdapter

    adapter = FrameworkAdapter()

    def tool_with_native_span():
        foreign_tool_span(tracer, "genai", "search", error="RuntimeError")
        raise RuntimeError

    with pytest.raises(RuntimeError):
        adapter.run_sync(ToolCall("search"), tool_with_native_span, (), {})
    assert get_circuit_breaker("search").stats.failure_count == 1


def test_spans_of_other_kinds_are_ignored(tracer):
    with tracer.start_as_current_span("GET /", attributes={"http.method": "GET"}):
        pass
    with tracer.start_as_current_span("tool without name", attributes={"gen_ai.operation.name": "execute_tool"}):
        pass
    assert get_circuit_breaker("search").stats.total_requests == 0


def test_foreign_spans_while_open_only_update_statistics(tracer):
    breaker = get_circuit_breaker("weather", CircuitBreakerConfig(failure_threshold=1, success_threshold=1))
    breaker.force_open()
    foreign_tool_span(tracer, "genai", "weather")  # not a probe: the breaker stays open
    assert breaker.state is State.OPEN
    assert breaker.stats.success_count == 1


def _span_with_exception(tracer, tool: str, exc: BaseException) -> None:
    with tracer.start_as_current_span(f"{tool} tool", attributes=SHAPES["genai"](tool)) as span:
        span.record_exception(exc)
        span.set_status(Status(StatusCode.ERROR))


def test_foreign_spans_are_judged_by_their_own_protocol(tracer):
    """A failed foreign tool span is judged by the same rules as an exception: its status
    attributes (HTTP, gRPC, SQLSTATE, an MCP span's JSON-RPC code), else its exception
    event's text. The caller's mistakes are neutral; an outage still counts."""
    get_circuit_breaker("fetch", CircuitBreakerConfig(failure_threshold=2))
    for status in (404, 422, 400):
        foreign_tool_span(
            tracer, "genai", "fetch", error="HTTPStatusError", attributes={"http.response.status_code": status}
        )
    foreign_tool_span(tracer, "genai", "fetch", error="RpcError", attributes={"rpc.grpc.status_code": 3})
    foreign_tool_span(tracer, "genai", "fetch", error="UndefinedTable", attributes={"db.response.status_code": "42P01"})
    foreign_tool_span(tracer, "genai", "fetch", error="-32602")
    _span_with_exception(tracer, "fetch", FileNotFoundError(2, "No such file or directory", "/tmp/nope"))
    stats = get_circuit_breaker("fetch").stats
    assert (stats.state, stats.failure_count, stats.ignored_count) == (State.CLOSED, 0, 7)
    foreign_tool_span(tracer, "genai", "fetch", error="HTTPStatusError", attributes={"http.response.status_code": 503})
    _span_with_exception(tracer, "fetch", ConnectionRefusedError(111, "Connection refused"))
    assert get_circuit_breaker("fetch").state is State.OPEN
