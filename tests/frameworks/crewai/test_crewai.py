"""CrewAI's real crew loop, native function calling and ReAct text, kickoff and akickoff, with a scripted model."""

from __future__ import annotations

import asyncio
import itertools

import pytest

pytest.importorskip("crewai")

from crewai import Agent, Crew, Task
from crewai.tools import tool
from scripted_llm import ScriptedLLM

from otel_breaker.breaker import State
from otel_breaker.config import load_settings, set_settings
from otel_breaker.registry import default_registry

UNAVAILABLE = "is temporarily unavailable"
# CrewAI's ReAct path invokes a raising tool 6 times for one action of the model (2 invocations x 3 attempts).
REACT_INVOCATIONS = 6
# Exported counters are lifetime totals per (tool, agent name): unique roles keep tests apart.
_roles = itertools.count(1)

PATHS = [pytest.param(True, id="native"), pytest.param(False, id="react")]
ENTRIES = [pytest.param(False, id="kickoff"), pytest.param(True, id="akickoff")]


class Counted:
    """CrewAI tools named ``lookup`` whose body counts its runs."""

    def __init__(self) -> None:
        self.runs = 0

    def failing(self):
        @tool("lookup")
        def lookup(q: str) -> str:
            """Look something up."""
            self.runs += 1
            raise RuntimeError("backend down")

        return lookup

    def healthy(self):
        @tool("lookup")
        def lookup(q: str) -> str:
            """Look something up."""
            self.runs += 1
            return f"result for {q}"

        return lookup


def make_crew(tool_obj, native: bool, calls: int = 4, role: str | None = None, bad_arguments: int = 0, **crew_options):
    llm = ScriptedLLM(model="scripted", native=native, calls=calls, bad_arguments=bad_arguments)
    agent = Agent(
        role=role or f"researcher {next(_roles)}",
        goal="answer questions",
        backstory="careful",
        llm=llm,
        tools=[tool_obj],
        max_iter=10,
        verbose=False,
        allow_delegation=False,
    )
    task = Task(description="Use the lookup tool, then answer.", expected_output="an answer", agent=agent)
    return Crew(agents=[agent], tasks=[task], verbose=False, **crew_options), agent, task, llm


def kickoff(crew: Crew, use_async: bool):
    return asyncio.run(crew.akickoff()) if use_async else crew.kickoff()


@pytest.fixture
def threshold_two():
    set_settings(load_settings({"OTEL_BREAKER_FAILURE_THRESHOLD": "2"}))


@pytest.mark.parametrize("use_async", ENTRIES)
@pytest.mark.parametrize("native", PATHS)
def test_failing_tool_opens_breaker_and_model_reads_rejection(otel, instrument, threshold_two, native, use_async):
    instrument("crewai")
    tools = Counted()
    crew, agent, task, llm = make_crew(tools.failing(), native)

    out = kickoff(crew, use_async)

    assert out.raw.strip() == "done after 4 tool results", "the loop goes on after failures and rejections"
    per_action = 1 if native else REACT_INVOCATIONS
    assert tools.runs == 2 * per_action, "no body run once the breaker is open"
    assert len(llm.seen) == 4
    assert [UNAVAILABLE in seen for seen in llm.seen] == [False, False, True, True]
    assert "backend down" not in " ".join(llm.seen[2:])
    assert [(r.tool_name, r.failure.code) for r in task.output.tool_failures][2:] == [("lookup", "circuit_open")] * 2

    # One logical call is counted once, however often CrewAI re-invoked the tool.
    (breaker,) = default_registry().find("lookup")
    assert breaker.state is State.OPEN
    assert breaker.stats.failure_count == 2 and breaker.stats.rejected_requests == 2

    spans = otel.tool_spans("lookup")
    assert len(spans) == 4
    assert [s.attributes.get("otel_breaker.rejected") for s in spans] == [False, False, True, True]
    assert [s.attributes.get("error.type") for s in spans[:2]] == ["RuntimeError", "RuntimeError"]
    assert {s.attributes.get("gen_ai.agent.name") for s in spans} == {agent.role}
    if native:
        assert [s.attributes.get("gen_ai.tool.call.id") for s in spans] == ["call_1", "call_2", "call_3", "call_4"]

    labels = {"gen_ai__tool__name": "lookup", "gen_ai__agent__name": agent.role}
    assert otel.metric_value("otel_breaker.calls", otel_breaker__outcome="failure", **labels) == 2
    assert otel.metric_value("otel_breaker.calls.rejected", **labels) == 2
    assert otel.metric_value("otel_breaker.state", otel_breaker__state="open", **labels) == 1


@pytest.mark.parametrize("use_async", ENTRIES)
@pytest.mark.parametrize("native", PATHS)
def test_healthy_tool_result_unchanged(otel, instrument, native, use_async):
    bare = Counted()
    crew, _, plain_task, plain_llm = make_crew(bare.healthy(), native, role="analyst")
    plain_out = kickoff(crew, use_async)

    instrument("crewai")
    guarded = Counted()
    crew, agent, task, llm = make_crew(guarded.healthy(), native, role="analyst")
    guarded_out = kickoff(crew, use_async)

    assert guarded_out.raw == plain_out.raw
    assert llm.seen == plain_llm.seen
    assert all("result for x" in seen for seen in llm.seen) and len(llm.seen) == 4
    assert guarded.runs == bare.runs == 4
    assert task.output.tool_failures == plain_task.output.tool_failures == []
    spans = otel.tool_spans("lookup")
    assert len(spans) == 4 and not any(s.attributes.get("otel_breaker.rejected") for s in spans)
    assert all(s.attributes.get("gen_ai.agent.name") == agent.role for s in spans)


@pytest.mark.parametrize("use_async", ENTRIES)
@pytest.mark.parametrize("native", PATHS)
def test_arguments_the_schema_rejects_are_the_models_mistake(otel, instrument, threshold_two, native, use_async):
    """Three calls with arguments the tool's schema rejects, then a good one: with and without
    otel-breaker the model reads the same validation errors and then the tool's answer."""
    bare = Counted()
    crew, _, _, plain_llm = make_crew(bare.healthy(), native, role="checker", bad_arguments=3)
    plain_out = kickoff(crew, use_async)

    instrument("crewai")
    guarded = Counted()
    crew, _, _, llm = make_crew(guarded.healthy(), native, role="checker", bad_arguments=3)
    guarded_out = kickoff(crew, use_async)

    assert guarded_out.raw == plain_out.raw
    assert llm.seen == plain_llm.seen
    assert "result for x4" in llm.seen[-1] and UNAVAILABLE not in " ".join(llm.seen)
    assert guarded.runs == bare.runs == 1
    (breaker,) = default_registry().find("lookup")
    assert breaker.state is State.CLOSED
    assert (breaker.stats.failure_count, breaker.stats.success_count) == (0, 1)


@pytest.mark.parametrize("native", PATHS)
def test_breakers_are_per_agent(otel, instrument, threshold_two, native):
    instrument("crewai")
    broken_tools, fine_tools = Counted(), Counted()
    broken_crew, broken, _, _ = make_crew(broken_tools.failing(), native)
    fine_crew, fine, _, fine_llm = make_crew(fine_tools.healthy(), native)

    kickoff(broken_crew, False)
    out = kickoff(fine_crew, False)

    assert fine_tools.runs == 4
    assert not any(UNAVAILABLE in seen for seen in fine_llm.seen)
    assert out.raw.strip() == "done after 4 tool results"
    states = {b.agent_name: b.state for b in default_registry().find("lookup")}
    assert states == {broken.role: State.OPEN, fine.role: State.CLOSED}

    spans = otel.tool_spans("lookup")
    assert {s.attributes.get("gen_ai.agent.name") for s in spans} == {broken.role, fine.role}
    for agent_name in {broken.role, fine.role}:
        assert otel.metric_value("otel_breaker.calls", gen_ai_tool_name="lookup", gen_ai_agent_name=agent_name) > 0


@pytest.mark.parametrize("native", PATHS)
def test_raise_policy_rejection_does_not_end_the_crew(instrument, threshold_two, native):
    """Under tool_failure_policy="raise" a failing tool ends the crew (CrewAI's choice); once the
    breaker is open the rejection is plain text, so the crew runs on without touching the tool."""
    instrument("crewai")
    tools = Counted()
    crew, agent, _, _ = make_crew(tools.failing(), native, tool_failure_policy="raise")
    for _ in range(2):
        agent.llm = ScriptedLLM(model="scripted", native=native)
        with pytest.raises(Exception, match="backend down"):
            kickoff(crew, False)
    runs = tools.runs
    assert default_registry().find("lookup")[0].state is State.OPEN

    llm = ScriptedLLM(model="scripted", native=native, calls=2)
    agent.llm = llm
    out = kickoff(crew, False)
    assert tools.runs == runs
    assert len(llm.seen) == 2 and all(UNAVAILABLE in seen for seen in llm.seen)
    assert out.raw.strip() == "done after 2 tool results"
