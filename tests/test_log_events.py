"""Log-based events (OpenTelemetry Logs API): state changes and rejections, with
and without a span around them, checked with the SDK's in-memory log exporter."""

from __future__ import annotations

import subprocess
import sys

import pytest
from opentelemetry._logs import SeverityNumber
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import InMemoryLogRecordExporter, SimpleLogRecordProcessor

from otel_breaker import CircuitBreakerConfig, Guard, ToolCall, get_circuit_breaker, semconv, telemetry
from otel_breaker.config import load_settings, set_settings


class Down(Exception):
    pass


def fail():
    raise Down("secret detail")


def call(tool="search", fn=lambda: "ok", **fields):
    return Guard().call(ToolCall(tool, **fields), fn)


@pytest.fixture
def logs(otel):
    exporter = InMemoryLogRecordExporter()
    provider = LoggerProvider()
    provider.add_log_record_processor(SimpleLogRecordProcessor(exporter))
    telemetry.configure(logger_provider=provider)
    yield exporter
    provider.shutdown()


def events(exporter, name):
    return [data.log_record for data in exporter.get_finished_logs() if data.log_record.event_name == name]


def test_an_opening_inside_a_call_is_a_warning_event_in_the_calls_trace(otel, logs):
    get_circuit_breaker("search", CircuitBreakerConfig(failure_threshold=1))
    with pytest.raises(Down):
        call(fn=fail)
    (span,) = otel.tool_spans()
    (event,) = events(logs, "otel_breaker.state_change")
    assert event.severity_number is SeverityNumber.WARN
    assert event.severity_text == "WARN"
    assert dict(event.attributes) == {
        "gen_ai.tool.name": "search",
        "otel_breaker.from_state": "closed",
        "otel_breaker.to_state": "open",
        "otel_breaker.reason": "consecutive_failures=1",
    }
    assert event.trace_id == span.context.trace_id
    assert event.span_id == span.context.span_id


def test_a_rejection_is_an_info_event_in_the_rejected_calls_trace(otel, logs):
    get_circuit_breaker("search", CircuitBreakerConfig(failure_threshold=1, recovery_timeout=30))
    with pytest.raises(Down):
        call(fn=fail)
    assert call(call_id="call-7", fn=lambda: pytest.fail("must not run"))["circuit_open"] is True
    rejected_span = otel.tool_spans()[-1]
    (event,) = events(logs, "otel_breaker.rejected")
    assert event.severity_number is SeverityNumber.INFO
    assert event.attributes["gen_ai.tool.name"] == "search"
    assert event.attributes["gen_ai.tool.call.id"] == "call-7"
    assert event.attributes["otel_breaker.state"] == "open"
    assert event.attributes["otel_breaker.retry_after_s"] == 30
    assert event.span_id == rejected_span.context.span_id


def test_state_changes_without_a_span_are_events_too(otel, logs, clock):
    breaker = get_circuit_breaker("search", CircuitBreakerConfig(failure_threshold=1, recovery_timeout=5))
    breaker.clock = clock
    breaker.force_open()  # e.g. from the command line: no tool call, no span
    breaker.force_close()
    with pytest.raises(Down):
        call(fn=fail)
    clock.advance(5)
    assert breaker.state.value == "half_open"  # the cooldown ends on a read, outside any call
    changes = [
        (e.attributes["otel_breaker.to_state"], e.severity_number, e.span_id != 0)
        for e in events(logs, "otel_breaker.state_change")
    ]
    assert changes == [
        ("open", SeverityNumber.WARN, False),
        ("closed", SeverityNumber.INFO, False),
        ("open", SeverityNumber.WARN, True),
        ("half_open", SeverityNumber.INFO, False),
    ]


def test_events_without_tracing_still_reach_the_logger(logs):
    telemetry.TELEMETRY.reset()
    exporter = InMemoryLogRecordExporter()
    provider = LoggerProvider()
    provider.add_log_record_processor(SimpleLogRecordProcessor(exporter))
    telemetry.configure(logger_provider=provider)
    get_circuit_breaker("search", CircuitBreakerConfig(failure_threshold=1))
    with pytest.raises(Down):
        call(fn=fail)
    call()
    assert [e.attributes["otel_breaker.to_state"] for e in events(exporter, "otel_breaker.state_change")] == ["open"]
    (rejected,) = events(exporter, "otel_breaker.rejected")
    assert rejected.span_id == 0


@pytest.mark.parametrize("how", ["configure", "environment"])
def test_span_events_can_be_switched_off_while_log_events_stay(otel, logs, how):
    if how == "configure":
        telemetry.configure(span_events=False)
    else:
        set_settings(load_settings({"OTEL_BREAKER_SPAN_EVENTS": "false"}))
        telemetry.TELEMETRY.reread_settings()
    get_circuit_breaker("search", CircuitBreakerConfig(failure_threshold=1))
    with pytest.raises(Down):
        call(fn=fail)
    call()
    for span in otel.tool_spans():
        assert not [e for e in span.events if e.name.startswith("otel_breaker.")], span.name
    assert events(logs, "otel_breaker.state_change") and events(logs, "otel_breaker.rejected")


def test_span_events_are_on_by_default(otel, logs):
    get_circuit_breaker("search", CircuitBreakerConfig(failure_threshold=1))
    with pytest.raises(Down):
        call(fn=fail)
    (span,) = otel.tool_spans()
    assert [e.name for e in span.events if e.name == semconv.EVENT_STATE_CHANGE] == ["otel_breaker.state_change"]


def test_a_failing_log_exporter_never_fails_a_call(otel):
    from opentelemetry.sdk._logs.export import LogRecordExporter

    class Broken(LogRecordExporter):
        def export(self, batch):
            raise ConnectionError("collector down")

        def shutdown(self):
            pass

        def force_flush(self, timeout_millis=30000):
            return True

    provider = LoggerProvider()
    provider.add_log_record_processor(SimpleLogRecordProcessor(Broken()))
    telemetry.configure(logger_provider=provider)
    get_circuit_breaker("search", CircuitBreakerConfig(failure_threshold=1))
    with pytest.raises(Down):
        call(fn=fail)
    assert call()["circuit_open"] is True


def test_the_global_logger_provider_is_used_and_nothing_without_one():
    script = (
        "from otel_breaker import get_circuit_breaker, telemetry\n"
        "b = get_circuit_breaker('t')\n"
        "b.force_open()\n"
        "assert telemetry.TELEMETRY.event_logger() is None\n"
        "from opentelemetry._logs import set_logger_provider\n"
        "from opentelemetry.sdk._logs import LoggerProvider\n"
        "from opentelemetry.sdk._logs.export import InMemoryLogRecordExporter, SimpleLogRecordProcessor\n"
        "exporter = InMemoryLogRecordExporter()\n"
        "provider = LoggerProvider(); provider.add_log_record_processor(SimpleLogRecordProcessor(exporter))\n"
        "set_logger_provider(provider)\n"
        "b.force_close()\n"
        "print([(d.log_record.event_name, d.log_record.attributes['otel_breaker.to_state'])"
        " for d in exporter.get_finished_logs()])\n"
    )
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[('otel_breaker.state_change', 'closed')]"


def test_the_private_provider_slots_still_exist_in_the_opentelemetry_api():
    # The one read of private OpenTelemetry state (telemetry.providers.global_provider_slots):
    # should the API rename its globals, this fails here rather than telemetry going quiet.
    script = (
        "from opentelemetry import trace, metrics, _logs\n"
        "from otel_breaker.telemetry import providers as t\n"
        "slots = (t.TRACE_GLOBALS, t.METRICS_GLOBALS, t.LOGS_GLOBALS)\n"
        "names = ('_TRACER_PROVIDER', '_METER_PROVIDER', '_LOGGER_PROVIDER')\n"
        "assert [s[n] for s, n in zip(slots, names)] == [None, None, None], 'slots not found or not None'\n"
        "from opentelemetry.sdk.trace import TracerProvider\n"
        "from opentelemetry.sdk.metrics import MeterProvider\n"
        "from opentelemetry.sdk._logs import LoggerProvider\n"
        "trace.set_tracer_provider(TracerProvider())\n"
        "metrics.set_meter_provider(MeterProvider())\n"
        "_logs.set_logger_provider(LoggerProvider())\n"
        "assert all(s[n] is not None for s, n in zip(slots, names)), 'setting a provider no longer fills the slot'\n"
        "print('ok')\n"
    )
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ok"


def test_a_change_followed_from_a_shared_store_is_an_event_but_not_a_second_transition(otel, logs):
    from otel_breaker.breaker import State

    breaker = get_circuit_breaker("search")
    telemetry.TELEMETRY.followed(breaker, State.CLOSED, State.OPEN)
    telemetry.TELEMETRY.followed(breaker, State.OPEN, State.OPEN)  # nothing changed: nothing said
    (event,) = events(logs, "otel_breaker.state_change")
    assert event.severity_number is SeverityNumber.WARN
    assert event.attributes["otel_breaker.reason"] == "shared_store"
    assert otel.value("otel_breaker.transitions", otel_breaker_to_state="open") == 0
