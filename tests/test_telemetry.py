"""Spans, span events and metrics, checked with a real SDK and in-memory exporters."""

from __future__ import annotations

import contextlib
import logging

import pytest
from opentelemetry import trace
from opentelemetry.context import _SUPPRESS_INSTRUMENTATION_KEY, attach, detach, set_value
from opentelemetry.trace import SpanKind, StatusCode

from otel_breaker import CircuitBreakerConfig, Guard, State, ToolCall, get_circuit_breaker, telemetry
from otel_breaker.config import load_settings
from otel_breaker.registry import BreakerRegistry
from otel_breaker.semconv import DURATION_BUCKETS


class Down(Exception):
    pass


def fail():
    raise Down("secret detail")


def call(tool="search", fn=lambda: "ok", **fields):
    return Guard().call(ToolCall(tool, **fields), fn)


def test_a_successful_call_is_an_execute_tool_span(otel):
    tracer = otel.tracer_provider.get_tracer("app")
    with tracer.start_as_current_span("agent step") as parent:
        assert call(call_id="call-1", agent_name="researcher", framework="langchain") == "ok"
    (span,) = otel.tool_spans()
    assert span.name == "execute_tool search"
    assert span.kind is SpanKind.INTERNAL
    assert span.parent.span_id == parent.get_span_context().span_id
    attrs = span.attributes
    assert attrs["gen_ai.operation.name"] == "execute_tool"
    assert attrs["gen_ai.tool.name"] == "search"
    assert attrs["gen_ai.tool.call.id"] == "call-1"
    assert attrs["gen_ai.tool.type"] == "function"
    assert attrs["gen_ai.agent.name"] == "researcher"
    assert attrs["otel_breaker.state"] == "closed"
    assert attrs["otel_breaker.rejected"] is False
    assert span.status.status_code is StatusCode.UNSET


def test_a_failed_call_has_error_type_and_an_exception_event_without_content(otel):
    with pytest.raises(Down):
        call(fn=fail)
    (span,) = otel.tool_spans()
    assert span.status.status_code is StatusCode.ERROR
    assert span.status.description is None
    assert span.attributes["error.type"] == "Down"
    (event,) = [e for e in span.events if e.name == "exception"]
    assert event.attributes["exception.type"] == "Down"
    assert "exception.message" not in event.attributes and "exception.stacktrace" not in event.attributes
    assert "secret detail" not in str(span.to_json())


def test_content_capture_opt_in_records_messages_and_arguments():
    from otel_support import Otel

    otel = Otel(capture_content=True)
    with pytest.raises(Down):
        call(fn=fail, arguments='{"q": "weather"}')
    (span,) = otel.tool_spans()
    event = next(e for e in span.events if e.name == "exception")
    assert event.attributes["exception.message"] == "secret detail"
    assert "exception.stacktrace" in event.attributes
    assert span.attributes["gen_ai.tool.call.arguments"] == '{"q": "weather"}'
    assert span.status.description == "secret detail"


def test_invalid_results_and_timeouts_have_their_error_types(otel, clock):
    get_circuit_breaker("val", CircuitBreakerConfig(is_failure_result=lambda r: "error" in r, failure_threshold=9))
    call("val", fn=lambda: {"error": "quota"})
    assert otel.tool_spans("val")[0].attributes["error.type"] == "invalid_result"


def test_a_rejected_call_gets_a_short_span_of_its_own(otel):
    get_circuit_breaker("search", CircuitBreakerConfig(failure_threshold=1, recovery_timeout=30))
    with pytest.raises(Down):
        call(fn=fail)
    assert call(fn=lambda: pytest.fail("must not run"))["circuit_open"] is True
    rejected = otel.tool_spans()[-1]
    assert rejected.attributes["otel_breaker.rejected"] is True
    assert rejected.attributes["error.type"] == "circuit_open"
    assert rejected.attributes["otel_breaker.state"] == "open"
    assert rejected.status.status_code is StatusCode.ERROR
    (event,) = [e for e in rejected.events if e.name == "otel_breaker.rejected"]
    assert event.attributes["otel_breaker.state"] == "open"
    assert event.attributes["otel_breaker.retry_after_s"] == 30


def test_state_change_events_sit_on_the_span_of_the_call_that_caused_them(otel, clock):
    breaker = get_circuit_breaker("search", CircuitBreakerConfig(failure_threshold=2, recovery_timeout=5))
    breaker.clock = clock  # the registry's breaker, driven by the test's clock
    for _ in range(2):
        with pytest.raises(Down):
            call(fn=fail)
    clock.advance(5)
    call()
    call()
    spans = otel.tool_spans()
    changes = [
        [
            (
                e.attributes["otel_breaker.from_state"],
                e.attributes["otel_breaker.to_state"],
                e.attributes["otel_breaker.reason"],
            )
            for e in s.events
            if e.name == "otel_breaker.state_change"
        ]
        for s in spans
    ]
    assert changes == [
        [],
        [("closed", "open", "consecutive_failures=2")],
        [("open", "half_open", "cooldown_elapsed")],
        [("half_open", "closed", "probe_succeeded")],
    ]
    assert [s.attributes["otel_breaker.state"] for s in spans] == ["closed", "closed", "half_open", "half_open"]


def test_suppressed_instrumentation_makes_no_span_but_still_guards(otel):
    token = attach(set_value(_SUPPRESS_INSTRUMENTATION_KEY, True))
    try:
        assert call() == "ok"
    finally:
        detach(token)
    assert otel.tool_spans() == []
    assert get_circuit_breaker("search").stats.success_count == 1


def test_the_public_suppression_context_is_honoured(otel):
    from opentelemetry.instrumentation.utils import suppress_instrumentation

    with suppress_instrumentation():
        assert call() == "ok"
    assert otel.tool_spans() == []
    assert call() == "ok"
    assert len(otel.tool_spans()) == 1


def test_attribute_values_are_bounded(otel):
    long_name = "t" * 5000
    Guard().call(ToolCall(long_name, call_id="c" * 5000), lambda: 1)
    (span,) = otel.finished_spans()
    assert len(span.attributes["gen_ai.tool.name"]) == 256
    assert len(span.attributes["gen_ai.tool.call.id"]) == 256


def test_every_instrument_has_its_name_unit_and_description(otel):
    get_circuit_breaker("search", CircuitBreakerConfig(failure_threshold=1))
    with pytest.raises(Down):
        call(fn=fail)
    call()
    metrics = otel.metric_objects()
    expected_units = {
        "otel_breaker.state": "{breaker}",
        "otel_breaker.transitions": "{transition}",
        "otel_breaker.calls": "{call}",
        "otel_breaker.calls.rejected": "{call}",
        "otel_breaker.tokens.saved": "{token}",
        "gen_ai.execute_tool.duration": "s",
    }
    for name, unit in expected_units.items():
        assert name in metrics, name
        assert metrics[name].unit == unit
        assert metrics[name].description
    histogram = metrics["gen_ai.execute_tool.duration"].data.data_points
    assert tuple(histogram[0].explicit_bounds) == DURATION_BUCKETS


def test_counts_by_outcome_state_and_transition(otel):
    get_circuit_breaker("search", CircuitBreakerConfig(failure_threshold=2))
    call()
    for _ in range(2):
        with pytest.raises(Down):
            call(fn=fail)
    call()
    call()
    assert otel.value("otel_breaker.calls", gen_ai_tool_name="search", otel_breaker_outcome="success") == 1
    assert otel.value("otel_breaker.calls", gen_ai_tool_name="search", otel_breaker_outcome="failure") == 2
    assert otel.value("otel_breaker.calls.rejected", gen_ai_tool_name="search", otel_breaker_state="open") == 2
    assert otel.value("otel_breaker.calls.rejected", otel_breaker_mode="enforce") == 2
    assert otel.value("otel_breaker.transitions", otel_breaker_from_state="closed", otel_breaker_to_state="open") == 1
    assert otel.value("gen_ai.execute_tool.duration", gen_ai_tool_name="search", error_type="Down") == 2


def test_the_state_gauge_is_one_hot_after_every_transition(otel, clock):
    breaker = get_circuit_breaker("search", CircuitBreakerConfig(failure_threshold=1, recovery_timeout=5))
    breaker.clock = clock

    def gauge():
        return {
            s: otel.value("otel_breaker.state", gen_ai_tool_name="search", otel_breaker_state=s)
            for s in ("closed", "open", "half_open")
        }

    call()
    assert gauge() == {"closed": 1, "open": 0, "half_open": 0}
    with pytest.raises(Down):
        call(fn=fail)
    assert gauge() == {"closed": 0, "open": 1, "half_open": 0}
    clock.advance(5)
    assert gauge() == {"closed": 0, "open": 0, "half_open": 1}
    call()
    call()
    assert gauge() == {"closed": 1, "open": 0, "half_open": 0}


def test_same_named_tools_of_two_sources_are_two_metric_series(otel):
    guard = Guard()
    guard.call(ToolCall("search", source="docs@1"), lambda: 1)
    for _ in range(5):  # the default failure threshold
        with pytest.raises(Down):
            guard.call(ToolCall("search", source="web@2"), fail)
    points = [p for p in otel.metrics()["otel_breaker.calls"] if p.attributes.get("gen_ai.tool.name") == "search"]
    assert {p.attributes.get("otel_breaker.tool.source") for p in points} == {"docs@1", "web@2"}
    # Each source is an upstream too: its tools' series say which, and its own breaker has a series.
    assert {p.attributes.get("otel_breaker.upstream") for p in points} == {"docs@1", "web@2"}
    assert otel.value("otel_breaker.calls", gen_ai_tool_name="upstream:web@2", otel_breaker_outcome="ignored") == 5
    assert otel.value("otel_breaker.calls", otel_breaker_tool_source="docs@1", otel_breaker_outcome="success") == 1
    assert otel.value("otel_breaker.calls", otel_breaker_tool_source="docs@1", otel_breaker_outcome="failure") == 0
    assert otel.value("otel_breaker.calls", otel_breaker_tool_source="web@2", otel_breaker_outcome="failure") == 5
    state = {"otel_breaker_state": "open"}
    assert otel.value("otel_breaker.state", otel_breaker_tool_source="web@2", **state) == 1
    assert otel.value("otel_breaker.state", otel_breaker_tool_source="docs@1", **state) == 0
    opened = {"otel_breaker_to_state": "open", "otel_breaker_from_state": "closed"}
    assert otel.value("otel_breaker.transitions", otel_breaker_tool_source="web@2", **opened) == 1
    # A tool without a source has no source attribute at all.
    guard.call(ToolCall("lookup"), lambda: 1)
    lookup = [p for p in otel.metrics()["otel_breaker.calls"] if p.attributes["gen_ai.tool.name"] == "lookup"]
    assert lookup and all("otel_breaker.tool.source" not in p.attributes for p in lookup)


def test_the_duration_histogram_can_be_switched_off():
    from otel_support import Otel

    otel = Otel(duration_metric=False)
    call()
    assert "gen_ai.execute_tool.duration" not in otel.metrics()
    assert otel.value("otel_breaker.calls", otel_breaker_outcome="success") == 1


def test_counters_never_go_backwards_when_breakers_are_pruned(otel):
    class Agent:
        pass

    agent = Agent()
    Guard().call(ToolCall("search", agent=agent, agent_name="a"), lambda: 1)
    assert otel.value("otel_breaker.calls", gen_ai_agent_name="a") == 1
    del agent
    import gc

    gc.collect()
    assert otel.value("otel_breaker.calls", gen_ai_agent_name="a") == 1


def test_tools_beyond_the_cap_are_counted_per_tool_and_none_is_lost(otel):
    registry = BreakerRegistry(settings=load_settings({}), max_breakers=3)
    telemetry.configure(registry=registry)
    guard = Guard(registry)
    for index in range(20):
        guard.call(ToolCall(f"tool-{index}"), lambda: 1)
    points = otel.metrics()["otel_breaker.calls"]
    tools = {p.attributes["gen_ai.tool.name"] for p in points}
    assert {"tool-17", "tool-18", "tool-19"} <= tools  # the live breakers: the newest tools
    assert "_overflow" not in tools
    assert sum(p.value for p in points if p.attributes["otel_breaker.outcome"] == "success") == 20


def test_more_series_than_the_sdk_keeps_are_warned_about_once(otel, caplog):
    guard = Guard()
    for index in range(700):  # 700 tools x 3 outcomes > 2000 series
        guard.call(ToolCall(f"tool-{index}"), lambda: 1)
    with caplog.at_level(logging.WARNING, logger="otel_breaker"):
        otel.metrics()
        otel.metrics()
    assert caplog.text.count("otel_breaker.calls has 2100 series") == 1
    assert "aggregation_cardinality_limit" in caplog.text


def test_tokens_saved_with_the_configured_estimate(otel):
    get_circuit_breaker("search", CircuitBreakerConfig(failure_threshold=1)).force_open()
    for _ in range(3):
        call()
    assert (
        otel.value("otel_breaker.tokens.saved", gen_ai_tool_name="search", otel_breaker_estimate_source="configured")
        == 3 * 1500
    )


def test_tokens_saved_carries_the_agent_name_like_every_other_metric(otel):
    """Two agents' breakers of one tool: each saving is counted for its agent, as its rejections are."""

    def dead() -> None:
        raise ConnectionError("search backend down")

    for agent, calls in (("researcher", 2), ("writer", 3)):
        for _ in range(5):  # the default threshold: the agent's breaker opens
            with contextlib.suppress(ConnectionError):
                call(agent_name=agent, fn=dead)
        for _ in range(calls):
            call(agent_name=agent)
    for agent, calls in (("researcher", 2), ("writer", 3)):
        rejected = otel.value("otel_breaker.calls.rejected", gen_ai_tool_name="search", gen_ai_agent_name=agent)
        saved = otel.value("otel_breaker.tokens.saved", gen_ai_tool_name="search", gen_ai_agent_name=agent)
        assert (rejected, saved) == (calls, calls * 1500)
    series = {tuple(sorted(p.attributes)) for p in otel.metrics()["otel_breaker.tokens.saved"]}
    assert series == {("gen_ai.agent.name", "gen_ai.tool.name", "otel_breaker.estimate.source")}


def test_tokens_saved_learned_from_usage_of_the_model_call_that_issued_the_tool(otel):
    from otel_breaker.processor import BreakerSpanProcessor

    otel.tracer_provider.add_span_processor(BreakerSpanProcessor())
    tracer = otel.tracer_provider.get_tracer("app")
    get_circuit_breaker("search", CircuitBreakerConfig(failure_threshold=1))
    with tracer.start_as_current_span("invoke_agent"):
        with tracer.start_as_current_span(
            "chat gpt",
            attributes={
                "gen_ai.operation.name": "chat",
                "gen_ai.usage.input_tokens": 1200,
                "gen_ai.usage.output_tokens": 300,
                "gen_ai.response.model": "gpt-test",
            },
        ):
            pass
        with pytest.raises(Down):
            call(fn=fail)
        call()  # rejected: saves one round-trip
        call()
    assert (
        otel.value("otel_breaker.tokens.saved", gen_ai_tool_name="search", otel_breaker_estimate_source="observed")
        == 2 * 1500
    )
    assert otel.value("otel_breaker.tokens.saved", otel_breaker_estimate_source="configured") == 0


def test_cost_saved_from_a_price_table(otel):
    from otel_breaker.processor import BreakerSpanProcessor
    from otel_breaker.tokens import parse_prices

    telemetry.TELEMETRY.estimator.prices = parse_prices("gpt-test=0.000002:0.000008")
    otel.tracer_provider.add_span_processor(BreakerSpanProcessor())
    tracer = otel.tracer_provider.get_tracer("app")
    get_circuit_breaker("search", CircuitBreakerConfig(failure_threshold=1))
    usage = {
        "gen_ai.operation.name": "chat",
        "gen_ai.usage.input_tokens": 1000,
        "gen_ai.usage.output_tokens": 100,
        "gen_ai.request.model": "gpt-test",
    }
    with tracer.start_as_current_span("invoke_agent"):
        with tracer.start_as_current_span("chat", attributes=usage):
            pass
        with pytest.raises(Down):
            call(fn=fail)
        with tracer.start_as_current_span("chat", attributes=usage):
            pass
        call()
    metric = otel.metric_objects()["otel_breaker.cost.saved"]
    assert metric.unit == "{USD}"
    assert otel.value("otel_breaker.cost.saved", gen_ai_tool_name="search") == pytest.approx(0.0028)


def test_a_failing_exporter_never_fails_a_tool_call(otel):
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter

    class Broken(SpanExporter):
        def export(self, spans):
            raise ConnectionError("collector down")

    otel.tracer_provider.add_span_processor(SimpleSpanProcessor(Broken()))
    assert [call(fn=lambda i=i: i) for i in range(50)] == list(range(50))


def test_without_any_sdk_calls_work_and_make_nothing(tmp_path):
    import subprocess
    import sys

    script = (
        "from otel_breaker import guard, get_circuit_breaker, telemetry\n"
        "@guard('t')\n"
        "def t(x): return x\n"
        "assert [t(i) for i in range(100)] == list(range(100))\n"
        "assert telemetry.TELEMETRY.providers.current_tracer is None and not telemetry.TELEMETRY.metrics.ready\n"
        "assert get_circuit_breaker('t').stats.success_count == 100\n"
        "print('ok')\n"
    )
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ok"


def test_global_providers_are_picked_up_when_set_later(tmp_path):
    import subprocess
    import sys

    script = (
        "from otel_breaker import guard, telemetry\n"
        "@guard('t')\n"
        "def t(x): return x\n"
        "t(1)\n"
        "from opentelemetry import trace\n"
        "from opentelemetry.sdk.trace import TracerProvider\n"
        "from opentelemetry.sdk.trace.export import SimpleSpanProcessor\n"
        "from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter\n"
        "exporter = InMemorySpanExporter()\n"
        "provider = TracerProvider(); provider.add_span_processor(SimpleSpanProcessor(exporter))\n"
        "trace.set_tracer_provider(provider)\n"
        "t(2)\n"
        "print([s.name for s in exporter.get_finished_spans()])\n"
    )
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "['execute_tool t']"


def test_state_reads_use_the_breaker_state(otel):
    breaker = get_circuit_breaker("search")
    breaker.force_open()
    assert otel.value("otel_breaker.state", otel_breaker_state="open") == 1
    assert breaker.state is State.OPEN
    assert trace.get_current_span() is trace.INVALID_SPAN


def test_the_estimate_follows_the_prompt_as_the_transcript_grows():
    from otel_breaker.tokens import TokenEstimator

    estimator = TokenEstimator(tokens_per_call=1500)
    estimator.observe("search", 1000, 100)
    estimator.observe("search", 3000, 200)  # a later turn re-sends a longer transcript
    tokens, source = estimator.estimate("search")
    assert source == "observed" and tokens == 3000 + 130  # the latest prompt; output smoothed (weight 0.3)
