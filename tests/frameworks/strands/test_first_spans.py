"""The first run's spans all arrive: the SDK set up by the switch is installed when
Strands is imported, before its first span, and each tool call has one span.

An unmodified script asks three questions (one tool call each) and exports over
OTLP to a real receiver on 127.0.0.1. The reference is the same script under
``opentelemetry-instrument`` with otel-breaker disabled: the SDK is then set up
before anything runs, so it shows every span Strands makes.
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
    assert reference["invoke_agent"] == QUESTIONS and reference["execute_tool"] == QUESTIONS
    assert reference["chat"] == 2 * QUESTIONS  # a tool call, then the answer
    receiver.spans.clear()
    guarded = exported_span_names(SCRIPT, receiver, protocol, QUESTIONS, OTEL_BREAKER_ENABLED="true")
    # The same spans: Strands traces each tool call itself, so ours is its span, annotated.
    assert guarded == reference
    tools = [s for s in receiver.spans if s.name.startswith("execute_tool")]
    assert [s.attributes.get("otel_breaker.guarded") for s in tools] == [True] * QUESTIONS
    assert {s.attributes.get("gen_ai.agent.name") for s in tools} == {"forecaster"}
    assert {s.attributes.get("otel_breaker.state") for s in tools} == {"closed"}
