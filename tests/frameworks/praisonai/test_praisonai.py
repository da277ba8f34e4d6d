"""praisonaiagents' real agent loop (sync and async, streaming and not) against a local model."""

from __future__ import annotations

import asyncio
import itertools
import json

import pytest

pytest.importorskip("praisonaiagents")

from praisonaiagents import Agent
from praisonaiagents.config.feature_configs import ToolConfig
from praisonaiagents.errors import ToolExecutionError
from praisonaiagents.tools.retry import RetryPolicy

from otel_breaker import CircuitBreakerConfig, ToolCall, get_circuit_breaker
from otel_breaker.breaker import State
from otel_breaker.config import load_settings, set_settings
from otel_breaker.guards import IGNORED_RESULT
from otel_breaker.instrumentation.praisonai import PraisonAIAdapter
from otel_breaker.registry import default_registry

UNAVAILABLE = "is temporarily unavailable"
# Exported counters are lifetime totals per (tool, agent name): unique agent names keep tests apart.
_agent_numbers = itertools.count(1)


class Counted:
    """Tool bodies that count their runs."""

    def __init__(self) -> None:
        self.runs = 0

    def failing(self):
        def lookup(q: str) -> str:
            """Look something up.

            Args:
                q: the query
            """
            self.runs += 1
            raise RuntimeError("backend down")

        return lookup

    def healthy(self):
        def lookup(q: str) -> str:
            """Look something up.

            Args:
                q: the query
            """
            self.runs += 1
            return f"result for {q}"

        return lookup


def make_agent(tool, name: str | None = None, attempts: int = 1) -> Agent:
    # One attempt per call keeps praisonaiagents' own retry back-off out of the tests.
    policy = RetryPolicy(max_attempts=attempts, initial_delay_ms=1, max_delay_ms=2)
    return Agent(
        name=name or f"researcher-{next(_agent_numbers)}",
        instructions="Use the lookup tool.",
        tools=[tool],
        model="gpt-4o-mini",
        tool_config=ToolConfig(retry_policy=policy),
    )


def chat(agent: Agent, mode: str, stream: bool):
    if mode == "sync":
        return agent.chat("look it up", stream=stream)
    return asyncio.run(agent.achat("look it up", stream=stream))


@pytest.fixture
def threshold_two():
    set_settings(load_settings({"OTEL_BREAKER_FAILURE_THRESHOLD": "2"}))


def results(seen: list[str]) -> list[str]:
    """The tool results the model read, without the loop-guard note praisonaiagents appends."""
    return [json.loads(text).split("\n")[0] for text in seen]


def rejected_spans(spans):
    return [s for s in spans if s.attributes.get("otel_breaker.rejected")]


@pytest.mark.parametrize("stream", [False, True])
def test_sync_failing_tool_opens_breaker_and_model_reads_rejection(model, otel, instrument, threshold_two, stream):
    instrument("praisonai")
    tools = Counted()
    agent = make_agent(tools.failing())

    # Below the threshold a raising tool still ends chat() with praisonaiagents' own error, as uninstrumented.
    for _ in range(2):
        with pytest.raises(ToolExecutionError):
            chat(agent, "sync", stream)
    assert tools.runs == 2
    breaker = default_registry().find("lookup")[0]
    assert breaker.state is State.OPEN

    model.reset(calls=3)
    out = chat(agent, "sync", stream)
    assert tools.runs == 2, "an open breaker must not run the tool body"
    assert len(model.seen) == 3
    assert all(UNAVAILABLE in seen for seen in model.seen)
    assert all(json.loads(seen).keys() == {"error"} for seen in model.seen), "rejection must be a plain error dict"
    assert "backend down" not in " ".join(model.seen)
    assert str(out).startswith("done:")

    spans = otel.tool_spans("lookup")
    assert len(spans) == 5
    assert len(rejected_spans(spans)) == 3
    assert {s.attributes.get("gen_ai.agent.name") for s in spans} == {agent.name}
    assert [s.attributes.get("gen_ai.tool.call.id") for s in rejected_spans(spans)] == ["call_1", "call_2", "call_3"]
    failed = [s for s in spans if not s.attributes.get("otel_breaker.rejected")]
    assert all(s.attributes.get("error.type") for s in failed)

    assert (
        otel.metric_value(
            "otel_breaker.calls",
            gen_ai__tool__name="lookup",
            gen_ai__agent__name=agent.name,
            otel_breaker__outcome="failure",
        )
        == 2
    )
    assert (
        otel.metric_value("otel_breaker.calls.rejected", gen_ai__tool__name="lookup", gen_ai__agent__name=agent.name)
        == 3
    )
    assert (
        otel.metric_value(
            "otel_breaker.state",
            gen_ai__tool__name="lookup",
            gen_ai__agent__name=agent.name,
            otel_breaker__state="open",
        )
        == 1
    )


@pytest.mark.parametrize("stream", [False, True])
def test_async_failing_tool_swallowed_error_counts_and_opens(model, otel, instrument, threshold_two, stream):
    instrument("praisonai")
    model.reset(calls=4)
    tools = Counted()
    agent = make_agent(tools.failing())

    out = chat(agent, "async", stream)

    assert str(out).startswith("done:"), "the async loop goes on after failures and rejections"
    assert tools.runs == 2
    assert len(model.seen) == 4
    assert "backend down" in model.seen[0] and "backend down" in model.seen[1]
    assert all(UNAVAILABLE in seen for seen in model.seen[2:])
    spans = otel.tool_spans("lookup")
    assert len(spans) == 4
    assert [s.attributes.get("otel_breaker.rejected") for s in spans] == [False, False, True, True]
    assert [s.attributes.get("error.type") for s in spans[:2]] == ["tool_error", "tool_error"]
    assert [s.attributes.get("gen_ai.tool.call.id") for s in spans] == ["call_1", "call_2", "call_3", "call_4"]
    assert (
        otel.metric_value("otel_breaker.calls.rejected", gen_ai__tool__name="lookup", gen_ai__agent__name=agent.name)
        == 2
    )
    assert (
        otel.metric_value(
            "otel_breaker.state",
            gen_ai__tool__name="lookup",
            gen_ai__agent__name=agent.name,
            otel_breaker__state="open",
        )
        == 1
    )


@pytest.mark.parametrize("mode", ["sync", "async"])
@pytest.mark.parametrize("stream", [False, True])
def test_healthy_tool_result_unchanged(model, otel, instrument, mode, stream):
    bare = Counted()
    plain_out = chat(make_agent(bare.healthy()), mode, stream)
    plain_seen = list(model.seen)

    model.reset()
    instrument("praisonai")
    guarded = Counted()
    agent = make_agent(guarded.healthy())
    guarded_out = chat(agent, mode, stream)

    assert guarded_out == plain_out
    assert model.seen == plain_seen
    assert results(plain_seen) == ["result for x1", "result for x2", "result for x3"]
    assert guarded.runs == bare.runs == 3
    spans = otel.tool_spans("lookup")
    assert len(spans) == 3 and not rejected_spans(spans)
    assert (
        otel.metric_value(
            "otel_breaker.calls",
            gen_ai__tool__name="lookup",
            gen_ai__agent__name=agent.name,
            otel_breaker__outcome="success",
        )
        == 3
    )


def test_sync_failure_behaves_as_uninstrumented(model, instrument, threshold_two):
    bare = Counted()
    with pytest.raises(ToolExecutionError) as plain:
        chat(make_agent(bare.failing()), "sync", False)
    instrument("praisonai")
    guarded = Counted()
    with pytest.raises(ToolExecutionError) as wrapped:
        chat(make_agent(guarded.failing()), "sync", False)
    assert type(wrapped.value) is type(plain.value)
    assert guarded.runs == bare.runs == 1


async def test_breakers_are_per_agent(model, otel, instrument, threshold_two):
    instrument("praisonai")
    model.reset(calls=3)
    broken_tools, fine_tools = Counted(), Counted()
    broken = make_agent(broken_tools.failing(), name="broken")
    fine = make_agent(fine_tools.healthy(), name="fine")

    await broken.achat("look it up")
    model.reset(calls=3)
    out = await fine.achat("look it up")

    assert broken_tools.runs == 2
    assert fine_tools.runs == 3
    assert results(model.seen) == ["result for x1", "result for x2", "result for x3"]
    assert str(out).startswith("done:")
    states = {b.agent_name: b.state for b in default_registry().find("lookup")}
    assert states == {"broken": State.OPEN, "fine": State.CLOSED}

    spans = otel.tool_spans("lookup")
    assert {s.attributes.get("gen_ai.agent.name") for s in spans} == {"broken", "fine"}
    for agent_name in {"broken", "fine"}:
        assert otel.metric_value("otel_breaker.calls", gen_ai_tool_name="lookup", gen_ai_agent_name=agent_name) > 0


def test_praison_own_breaker_counts_retries_ours_counts_calls(model, otel, instrument, threshold_two):
    """With praisonaiagents retrying 3 times, its breaker (5 failed attempts) opens during
    our second logical call; ours opens at 2 calls and answers from then on."""
    instrument("praisonai")
    tools = Counted()
    agent = make_agent(tools.failing(), attempts=3)
    for _ in range(2):
        with pytest.raises(ToolExecutionError):
            chat(agent, "sync", False)
    assert tools.runs == 5  # 3 attempts, then 2 before praisonaiagents' own breaker refused the 3rd
    assert default_registry().find("lookup")[0].state is State.OPEN

    model.reset(calls=2)
    out = chat(agent, "sync", False)
    assert tools.runs == 5
    assert all(UNAVAILABLE in seen for seen in model.seen) and len(model.seen) == 2
    assert str(out).startswith("done:")
    spans = otel.tool_spans("lookup")
    assert [bool(s.attributes.get("otel_breaker.rejected")) for s in spans] == [False, False, True, True]


async def test_ours_opens_before_praisons_own_with_lower_threshold(model, instrument, threshold_two):
    from praisonaiagents.tools.circuit_breaker import CircuitState, _get_global_registry

    instrument("praisonai")
    model.reset(calls=4)
    tools = Counted()
    agent = make_agent(tools.failing())
    out = await agent.achat("look it up")
    assert str(out).startswith("done:")
    assert tools.runs == 2
    own = _get_global_registry().get_or_create(f"tool_{id(agent)}_lookup")
    assert own.state is CircuitState.CLOSED, "the framework's breaker never reached its threshold"
    assert all(UNAVAILABLE in seen for seen in model.seen[2:])


def test_result_error_classification():
    adapter = PraisonAIAdapter()
    assert adapter.result_error(None, {"error": "Error executing lookup: boom"}) == "tool_error"
    assert adapter.result_error(None, {"error": "Tool timed out after 5s", "timeout": True}) == "timeout"
    assert adapter.result_error(None, {"error": "open", "circuit_open": True}) == "circuit_open"
    # denials, policy blocks and the model's own mistakes count neither way
    assert adapter.result_error(None, {"error": "no", "approval_denied": True}) == IGNORED_RESULT
    assert adapter.result_error(None, {"error": "[loop-guard] stop", "loop_blocked": True}) == IGNORED_RESULT
    assert adapter.result_error(None, {"error": "Function x not found", "available_tools": ["a"]}) == IGNORED_RESULT
    assert adapter.result_error(None, {"error": ""}) is None
    assert adapter.result_error(None, "fine") is None


def test_a_denial_never_closes_a_half_open_breaker():
    adapter = PraisonAIAdapter()
    breaker = get_circuit_breaker("lookup", CircuitBreakerConfig(failure_threshold=1, recovery_timeout=0.0))
    breaker.force_open(duration=0.0)
    call = ToolCall("lookup", framework="praisonai")
    denied = adapter.run_sync(call, lambda: {"error": "no", "approval_denied": True}, (), {})
    assert denied == {"error": "no", "approval_denied": True}
    assert breaker.state is State.HALF_OPEN
    assert breaker.stats.ignored_count == 1
