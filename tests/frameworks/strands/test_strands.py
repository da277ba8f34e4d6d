"""What is specific to Strands Agents: async tools, direct tool calls, and the calls
that must count neither way (model mistakes, hook cancellations, interrupts)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

pytest.importorskip("strands")
sys.path.insert(0, str(Path(__file__).parent))

from scripted_model import ScriptedModel
from status_prompt import breaker_settings
from strands import Agent, ToolContext, tool
from strands.hooks import BeforeToolCallEvent

from otel_breaker.registry import default_registry

UNAVAILABLE = "is temporarily unavailable"


def agent_with(tools, steps, name="assistant"):
    return Agent(model=ScriptedModel(steps), tools=tools, system_prompt="Help.", name=name, callback_handler=None)


def stats(tool_name):
    (breaker,) = default_registry().find(tool_name)
    return breaker.stats


def test_async_tool_failures_open_the_breaker(instrument):
    breaker_settings(failure_threshold="2")
    instrument("strands")
    runs = []

    @tool
    async def fetch(x: int) -> str:
        """Fetches."""
        runs.append(x)
        raise ConnectionError("upstream down")

    agent = agent_with([fetch], [("fetch", {"x": i}) for i in range(3)] + ["done"])
    assert str(agent("go")).strip() == "done"
    assert len(runs) == 2
    assert UNAVAILABLE in agent.model.requests[-1]["tool_results"][-1]
    assert (stats("fetch").failure_count, stats("fetch").rejected_requests) == (2, 1)


def test_direct_tool_call_is_guarded_and_rejection_is_an_error_result(instrument):
    breaker_settings(failure_threshold="1")
    instrument("strands")

    @tool
    def lookup(x: int) -> str:
        """Looks up."""
        raise RuntimeError("down")

    agent = agent_with([lookup], ["done"])
    first = agent.tool.lookup(x=1)
    second = agent.tool.lookup(x=2)
    assert first["status"] == "error" and UNAVAILABLE not in first["content"][0]["text"]
    assert second["status"] == "error" and UNAVAILABLE in second["content"][0]["text"]
    assert stats("lookup").failure_count == 1


def test_bad_arguments_and_unknown_tools_count_neither_way(instrument):
    breaker_settings(failure_threshold="1")
    instrument("strands")

    @tool
    def square(x: int) -> str:
        """Squares."""
        return str(x * x)

    agent = agent_with([square], [("square", {"x": "not a number"}), ("nope", {"x": 1}), ("square", {"x": 3}), "done"])
    assert str(agent("go")).strip() == "done"
    results = agent.model.requests[-1]["tool_results"]
    assert results[-1] == "9"
    assert (stats("square").ignored_count, stats("square").failure_count, stats("square").success_count) == (1, 0, 1)
    assert default_registry().find("nope") == []


def test_hook_cancellation_and_interrupts_count_neither_way(instrument):
    breaker_settings(failure_threshold="1")
    instrument("strands")

    @tool
    def guarded(x: int) -> str:
        """Never allowed."""
        return "ran"

    @tool(context=True)
    def approve(x: int, tool_context: ToolContext) -> str:
        """Asks a person first."""
        tool_context.interrupt("approval", reason="may I?")
        return "approved"

    agent = agent_with([guarded], [("guarded", {"x": 1}), "done"])

    def cancel(event: BeforeToolCallEvent) -> None:
        event.cancel_tool = "not allowed"

    agent.add_hook(cancel, BeforeToolCallEvent)
    assert str(agent("go")).strip() == "done"
    assert default_registry().find("guarded") == []

    asking = agent_with([approve], [("approve", {"x": 1}), "done"])
    result = asking("go")
    assert result.stop_reason == "interrupt"
    assert (stats("approve").ignored_count, stats("approve").failure_count, stats("approve").success_count) == (1, 0, 0)
