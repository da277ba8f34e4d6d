"""What is specific to Google ADK: async tools, its own tool spans, and the calls that
must count neither way (bad arguments, unknown tools, confirmations)."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import pytest

pytest.importorskip("google.adk")
sys.path.insert(0, str(Path(__file__).parent))

from contract import route_framework_spans
from google.adk.agents import LlmAgent
from google.adk.tools import FunctionTool, ToolContext
from scripted_model import ScriptedLlm, error_response, run
from status_prompt import breaker_settings

from otel_breaker.registry import default_registry

UNAVAILABLE = "is temporarily unavailable"


def agent_with(tools, steps, name="assistant"):
    model = ScriptedLlm(steps=steps, requests=[])
    return LlmAgent(name=name, model=model, instruction="Help.", tools=tools, on_tool_error_callback=error_response)


def stats(tool_name):
    (breaker,) = default_registry().find(tool_name)
    return breaker.stats


def test_async_tool_failures_open_the_breaker(instrument):
    breaker_settings(failure_threshold="2")
    instrument("google_adk")
    runs = []

    async def fetch(x: int) -> str:
        """Fetches."""
        runs.append(x)
        raise ConnectionError("upstream down")

    agent = agent_with([fetch], [("fetch", {"x": i}) for i in range(3)] + ["done"])
    assert asyncio.run(run(agent)) == "done"
    assert len(runs) == 2
    assert UNAVAILABLE in agent.model.requests[-1]["tool_results"][-1]
    assert (stats("fetch").failure_count, stats("fetch").rejected_requests) == (2, 1)


def test_bad_arguments_and_unknown_tools_count_neither_way(instrument):
    breaker_settings(failure_threshold="1")
    instrument("google_adk")

    def square(x: int) -> str:
        """Squares."""
        return str(x * x)

    steps = [("square", {}), ("square", {"y": 2}), ("nope", {"x": 1}), ("square", {"x": 3}), "done"]
    agent = agent_with([square], steps)
    assert asyncio.run(run(agent)) == "done"
    assert agent.model.requests[-1]["tool_results"][-1] == '{"result": "9"}'
    assert (stats("square").ignored_count, stats("square").failure_count, stats("square").success_count) == (2, 0, 1)
    assert default_registry().find("nope") == []


def test_confirmations_count_neither_way(instrument):
    breaker_settings(failure_threshold="1")
    instrument("google_adk")

    def transfer(x: int) -> str:
        """Moves money."""
        return "moved"

    def delete(x: int, tool_context: ToolContext) -> dict:
        """Asks a person itself."""
        tool_context.request_confirmation(hint="delete?")
        return {"error": "waiting for approval"}

    asyncio.run(run(agent_with([FunctionTool(transfer, require_confirmation=True)], [("transfer", {"x": 1}), "ok"])))
    assert default_registry().find("transfer") == []  # held by ADK's gate before the tool runner
    asyncio.run(run(agent_with([delete], [("delete", {"x": 1}), "ok"])))
    assert (stats("delete").ignored_count, stats("delete").failure_count, stats("delete").success_count) == (1, 0, 0)


def test_span_processor_counts_adk_spans_only_when_we_did_not_guard_the_call(instrument, otel):
    """ADK traces each tool call itself. Without the adapter the span processor counts
    those spans (so the contract's counted-once check can fail); with it, it does not."""
    breaker_settings(failure_threshold="5")

    def weather(x: int) -> str:
        """Weather."""
        raise RuntimeError("down")

    with route_framework_spans(otel) as spans:
        asyncio.run(run(agent_with([weather], [("weather", {"x": 1}), "done"])))
        native = [s for s in spans.get_finished_spans() if s.attributes.get("gen_ai.tool.name") == "weather"]
        assert len(native) == 1
        assert stats("weather").failure_count == 1  # counted from ADK's span alone
        default_registry().clear(keep_counts=False)
        instrument("google_adk")
        asyncio.run(run(agent_with([weather], [("weather", {"x": 1}), ("weather", {"x": 2}), "done"])))
        assert stats("weather").failure_count == 2
        assert len(otel.tool_spans("weather")) == 2
