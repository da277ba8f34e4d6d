"""The OpenAI Agents SDK's own Runner loop, offline (``agents.testing.ScriptedModel``),
with every function tool call guarded by a breaker."""

from __future__ import annotations

import asyncio
from collections import Counter

import pytest
from agents import Agent, RunConfig, Runner, function_tool, set_tracing_disabled
from agents.testing import ScriptedModel, assistant_message, function_call

from otel_breaker.breaker import State
from otel_breaker.config import load_settings, set_settings
from otel_breaker.registry import default_registry

set_tracing_disabled(True)

REJECTED_TEXT = "is temporarily unavailable: its circuit breaker is open"
SDK_FAILURE_TEXT = "An error occurred while running the tool"

BODY_RUNS: Counter[str] = Counter()


@pytest.fixture(autouse=True)
def threshold_two():
    BODY_RUNS.clear()
    set_settings(load_settings({"OTEL_BREAKER_FAILURE_THRESHOLD": "2"}))


@function_tool
def flaky(x: int) -> str:
    """Fails every time (a backend that is down)."""
    BODY_RUNS["flaky"] += 1
    raise RuntimeError("backend down: secret-token-123")


@function_tool
async def flaky_async(x: int) -> str:
    """Fails every time, async."""
    BODY_RUNS["flaky_async"] += 1
    raise RuntimeError("backend down")


@function_tool
def healthy(x: int) -> str:
    """Works."""
    BODY_RUNS["healthy"] += 1
    return f"ok {x}"


@function_tool
def lookup(x: int) -> str:
    """Fails for negative ids: one agent's data source is broken, the other's is fine."""
    BODY_RUNS[f"lookup{'-' if x < 0 else '+'}"] += 1
    if x < 0:
        raise RuntimeError("bad shard")
    return f"found {x}"


def scripted(tool_name: str, calls: int = 4, arg: int = 1, prefix: str = "call") -> ScriptedModel:
    steps = [[function_call(tool_name, {"x": arg}, call_id=f"{prefix}_{i}")] for i in range(1, calls + 1)]
    steps.append([assistant_message("done")])
    return ScriptedModel(steps)


def make_agent(tool, calls: int = 4, name: str = "demo_agent", arg: int = 1):
    model = scripted(tool.name, calls, arg)
    return model, Agent(name=name, instructions="use the tool", model=model, tools=[tool])


def tool_outputs(model: ScriptedModel) -> list[str]:
    """The tool results the model read, in order (from its last request)."""
    return [
        item["output"]
        for item in model.calls[-1].input
        if isinstance(item, dict) and item.get("type") == "function_call_output"
    ]


def counters(otel, tool: str) -> tuple[float, float, float]:
    """(failures, successes, rejections) of ``tool`` so far: the exported counters
    are cumulative for the process, so tests compare differences."""
    return (
        otel.metric_value("otel_breaker.calls", gen_ai_tool_name=tool, otel_breaker_outcome="failure"),
        otel.metric_value("otel_breaker.calls", gen_ai_tool_name=tool, otel_breaker_outcome="success"),
        otel.metric_value("otel_breaker.calls.rejected", gen_ai_tool_name=tool),
    )


def delta(otel, tool: str, before: tuple[float, float, float]) -> tuple[float, ...]:
    return tuple(after - first for after, first in zip(counters(otel, tool), before, strict=True))


def assert_tripped(model, result, tool: str, otel, before, *, agent_name: str = "demo_agent") -> None:
    assert result.final_output == "done"
    assert BODY_RUNS[tool] == 2, "the tool body ran after the breaker opened"
    outputs = tool_outputs(model)
    assert len(outputs) == 4
    assert all(SDK_FAILURE_TEXT in o for o in outputs[:2])
    assert all(f"Tool '{tool}' {REJECTED_TEXT}" in o for o in outputs[2:]), outputs
    assert not any("secret-token" in o for o in outputs)

    (breaker,) = default_registry().find(tool)
    assert breaker.state is State.OPEN
    assert breaker.agent_name == agent_name

    spans = sorted(otel.tool_spans(tool), key=lambda s: s.start_time)
    assert [s.name for s in spans] == [f"execute_tool {tool}"] * 4
    assert [s.attributes.get("gen_ai.tool.call.id") for s in spans] == ["call_1", "call_2", "call_3", "call_4"]
    assert {s.attributes.get("gen_ai.agent.name") for s in spans} == {agent_name}
    assert [bool(s.attributes.get("otel_breaker.rejected")) for s in spans] == [False, False, True, True]
    assert [s.attributes.get("error.type") for s in spans[:2]] == ["RuntimeError", "RuntimeError"]
    assert {s.attributes.get("otel_breaker.framework") for s in spans} == {"openai_agents"}

    assert delta(otel, tool, before) == (2, 0, 2)
    assert otel.metric_value("otel_breaker.state", gen_ai_tool_name=tool, otel_breaker_state="open") == 1


def test_run_sync_opens_breaker_and_model_reads_rejection(instrument, otel):
    instrument("openai_agents")
    before = counters(otel, "flaky")
    model, agent = make_agent(flaky)
    result = Runner.run_sync(agent, "go")
    assert_tripped(model, result, "flaky", otel, before)


async def test_run_async_tool_opens_breaker(instrument, otel):
    instrument("openai_agents")
    before = counters(otel, "flaky_async")
    model, agent = make_agent(flaky_async)
    result = await Runner.run(agent, "go")
    assert_tripped(model, result, "flaky_async", otel, before)


async def test_run_streamed_opens_breaker(instrument, otel):
    instrument("openai_agents")
    before = counters(otel, "flaky")
    model, agent = make_agent(flaky)
    result = Runner.run_streamed(agent, "go")
    async for _ in result.stream_events():
        pass
    assert_tripped(model, result, "flaky", otel, before)


def run_healthy_sync():
    model, agent = make_agent(healthy)
    result = Runner.run_sync(agent, "go")
    return result.final_output, tool_outputs(model), [type(i).__name__ for i in result.new_items]


async def run_healthy_async():
    model, agent = make_agent(healthy)
    result = await Runner.run(agent, "go")
    return result.final_output, tool_outputs(model)


def test_healthy_tool_unchanged_sync(instrument, otel):
    plain = run_healthy_sync()
    instrument("openai_agents")
    before = counters(otel, "healthy")
    guarded = run_healthy_sync()
    assert guarded == plain
    assert guarded[1] == ["ok 1"] * 4
    assert BODY_RUNS["healthy"] == 8
    assert delta(otel, "healthy", before) == (0, 4, 0)
    assert len(otel.tool_spans("healthy")) == 4


async def test_healthy_tool_unchanged_async(instrument, otel):
    plain = await run_healthy_async()
    instrument("openai_agents")
    before = counters(otel, "healthy")
    guarded = await run_healthy_async()
    assert guarded == plain
    assert delta(otel, "healthy", before) == (0, 4, 0)


def test_custom_failure_error_function_still_counts(instrument, otel):
    """A formatter that hides the exception from the model does not hide it from the breaker."""

    @function_tool(failure_error_function=lambda ctx, error: "sorry, try later")
    def polite(x: int) -> str:
        BODY_RUNS["polite"] += 1
        raise ConnectionError("refused")

    instrument("openai_agents")
    model, agent = make_agent(polite)
    assert Runner.run_sync(agent, "go").final_output == "done"
    outputs = tool_outputs(model)
    assert outputs[:2] == ["sorry, try later"] * 2
    assert all(REJECTED_TEXT in o for o in outputs[2:])
    assert BODY_RUNS["polite"] == 2
    spans = sorted(otel.tool_spans("polite"), key=lambda s: s.start_time)
    assert [s.attributes.get("error.type") for s in spans[:2]] == ["ConnectionError"] * 2


def test_exception_that_ends_the_run_is_counted_then_rejected(instrument, otel):
    """failure_error_function=None: the SDK re-raises and the run ends; once open, the run survives."""

    @function_tool(failure_error_function=None)
    def fatal(x: int) -> str:
        BODY_RUNS["fatal"] += 1
        raise RuntimeError("boom")

    instrument("openai_agents")
    _model, agent = make_agent(fatal, calls=1)
    for _ in range(2):
        agent.model = scripted("fatal", calls=1)
        with pytest.raises(Exception, match="boom"):
            Runner.run_sync(agent, "go")
    model = agent.model = scripted("fatal", calls=2)
    assert Runner.run_sync(agent, "go").final_output == "done"
    assert BODY_RUNS["fatal"] == 2
    assert all(REJECTED_TEXT in o for o in tool_outputs(model))


def test_invalid_arguments_from_the_model_do_not_count(instrument, otel):
    """The tool never ran: arguments the schema refuses say nothing about its health."""
    instrument("openai_agents")
    model = ScriptedModel(
        [[function_call("healthy", {"x": "not a number"}, call_id=f"c{i}")] for i in range(3)]
        + [[assistant_message("done")]]
    )
    agent = Agent(name="demo_agent", model=model, tools=[healthy])
    assert Runner.run_sync(agent, "go").final_output == "done"
    assert BODY_RUNS["healthy"] == 0
    (breaker,) = default_registry().find("healthy")
    assert breaker.state is State.CLOSED
    assert breaker.stats.failure_count == 0


async def test_sdk_timeout_counts_as_failure(instrument, otel):
    @function_tool(timeout=0.05)
    async def slow(x: int) -> str:
        BODY_RUNS["slow"] += 1
        await asyncio.sleep(10)
        return "late"

    instrument("openai_agents")
    model, agent = make_agent(slow, calls=3)
    assert (await Runner.run(agent, "go")).final_output == "done"
    assert BODY_RUNS["slow"] == 2
    outputs = tool_outputs(model)
    assert "timed out" in outputs[0]
    assert REJECTED_TEXT in outputs[2]


def test_group_id_is_the_session(instrument, otel, monkeypatch):
    set_settings(load_settings({"OTEL_BREAKER_FAILURE_THRESHOLD": "2", "OTEL_BREAKER_SCOPE": "session"}))
    instrument("openai_agents")
    _model, agent = make_agent(flaky, calls=2)
    Runner.run_sync(agent, "go", run_config=RunConfig(group_id="conv-1"))
    (breaker,) = default_registry().find("flaky")
    assert breaker.session_id == "conv-1"


async def test_realtime_entry_point_is_guarded(instrument, otel):
    """``agents.tool.invoke_function_tool`` (realtime sessions) goes through the same breaker."""
    from agents.tool import invoke_function_tool
    from agents.tool_context import ToolContext

    instrument("openai_agents")
    outputs = []
    for i in range(3):
        context = ToolContext(context=None, tool_name="flaky", tool_call_id=f"rt_{i}", tool_arguments='{"x": 1}')
        outputs.append(await invoke_function_tool(function_tool=flaky, context=context, arguments='{"x": 1}'))
    assert BODY_RUNS["flaky"] == 2
    assert SDK_FAILURE_TEXT in outputs[0] and REJECTED_TEXT in outputs[2]
    assert len(otel.tool_spans("flaky")) == 3


def test_bad_arguments_are_neither_failure_nor_success(instrument, otel):
    """Arguments the tool's schema refuses, five times, then valid ones: the run is the
    same with and without otel-breaker (but for the loop guard's answer to the 4th and 5th
    identical call, docs/loops.md), and the mistakes are not counted either way."""

    def run() -> tuple[str, list[str]]:
        steps = [[function_call("healthy", {"x": "not a number"}, call_id=f"bad_{i}")] for i in range(5)]
        steps += [[function_call("healthy", {"x": 3}, call_id="good")], [assistant_message("done")]]
        model = ScriptedModel(steps)
        agent = Agent(name="checker", instructions="use the tool", model=model, tools=[healthy])
        return Runner.run_sync(agent, "go", max_turns=10).final_output, tool_outputs(model)

    plain = run()
    instrument("openai_agents")
    guarded = run()
    assert guarded[0] == plain[0] == "done"
    assert guarded[1][:3] == plain[1][:3] and guarded[1][-1] == plain[1][-1] == "ok 3"
    assert all("this exact call, with the same arguments" in text for text in guarded[1][3:5])
    assert otel.metric_value("otel_breaker.calls", gen_ai_tool_name="healthy", otel_breaker_outcome="failure") == 0
    assert otel.metric_value("otel_breaker.calls", gen_ai_tool_name="healthy", otel_breaker_outcome="success") == 1
