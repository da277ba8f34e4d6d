"""The first run's spans all arrive with the switch on: the SDK is installed when
LangChain is imported, and each tool call has one span from the very first.

An unmodified LangGraph script asks three questions (one tool call each) and
exports over OTLP to a real receiver on 127.0.0.1. The reference is the same
script under ``opentelemetry-instrument`` with otel-breaker disabled (the SDK
set up before anything runs): LangGraph itself emits no OpenTelemetry spans, so
the guarded run has the same spans plus ours, one ``execute_tool`` per call.
"""

from __future__ import annotations

import pathlib

import pytest
from zero_code import exported_span_names, launcher

SCRIPT = pathlib.Path(__file__).with_name("questions_script.py")
QUESTIONS = 3


@pytest.mark.parametrize("protocol", ["grpc", "http/protobuf"])
def test_the_first_run_exports_every_span_with_the_switch_on_and_off(receiver, protocol):
    reference = exported_span_names(
        SCRIPT, receiver, protocol, QUESTIONS, launch=launcher(), OTEL_PYTHON_DISABLED_INSTRUMENTATIONS="otel_breaker"
    )
    receiver.spans.clear()
    guarded = exported_span_names(SCRIPT, receiver, protocol, QUESTIONS, OTEL_BREAKER_ENABLED="true")
    assert guarded == {**reference, "execute_tool": reference.get("execute_tool", 0) + QUESTIONS}
    tools = [s for s in receiver.spans if s.name == "execute_tool weather"]
    assert len(tools) == QUESTIONS
    assert all(s.scope == "otel_breaker" and s.attributes.get("otel_breaker.guarded") for s in tools)
    assert [s.attributes.get("gen_ai.tool.call.id") for s in tools] == ["c0", "c1", "c2"]
