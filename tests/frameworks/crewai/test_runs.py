"""The run in CrewAI beyond the contract: an agent kicked off inside a crew (from a tool) joins
the crew's run, and an agent's own kickoff is a run, on the real native tool-calling path."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

pytest.importorskip("crewai")
sys.path.insert(0, str(Path(__file__).parent))

from contract import call
from crewai import Agent
from crewai.tools import tool as crewai_tool
from driver import CrewAIDriver, crew_tool
from run_contract import assert_each_run_budgeted, assert_inner_agent_joined, open_echo_for

DRIVER = CrewAIDriver()


def test_an_agent_kicked_off_inside_a_crew_joins_its_run(instrument):
    echo = open_echo_for(DRIVER, instrument, "outer", "inner")
    inner = DRIVER.build([echo], [call("echo", 4), call("echo", 5), "helped"], name="inner")

    @crewai_tool("helper")
    def helper(x: int) -> str:
        """Asks the inner agent."""
        return str(inner.kickoff(f"look up {x}").raw)

    outer = DRIVER.build([echo], [call("echo", 2), call("echo", 3), call("helper", 1), "done"], name="outer")
    outer.tools = [crew_tool(echo), helper]
    assert DRIVER.run(outer) == "done"
    after = DRIVER.sent(inner)[-1].tool_results
    assert_inner_agent_joined(after, echo)


def test_an_agents_own_kickoff_is_a_run(instrument):
    echo = open_echo_for(DRIVER, instrument, "assistant")

    def kickoff(agent: Agent) -> None:
        assert agent.kickoff("go").raw == "done"

    assert_each_run_budgeted(DRIVER, echo, kickoff)
