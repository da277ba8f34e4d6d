"""The run in CrewAI beyond the contract: an agent kicked off inside a crew (from a tool) joins
the crew's run, and an agent's own kickoff is a run, on the real native tool-calling path."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

pytest.importorskip("crewai")
sys.path.insert(0, str(Path(__file__).parent))

from contract import Tool, call
from crewai.tools import tool as crewai_tool
from driver import CrewAIDriver, crew_tool
from run_contract import SPENT, UNAVAILABLE
from status_prompt import breaker_settings

DRIVER = CrewAIDriver()


def _open_echo(*agents: str) -> Tool:
    """``echo`` fails once for each agent in an earlier run: its breaker opens for each
    (breakers are per agent role; threshold 1, a long cooldown)."""
    echo = Tool.flaky("echo", failures=len(agents))
    for name in agents:
        assert DRIVER.run(DRIVER.build([echo], [call("echo", 1), "done"], name=name)) == "done"
    assert echo.runs == len(agents)
    return echo


def test_an_agent_kicked_off_inside_a_crew_joins_its_run(instrument):
    breaker_settings(failure_threshold="1", recovery_timeout="600")
    instrument("crewai")
    echo = _open_echo("outer", "inner")
    inner = DRIVER.build([echo], [call("echo", 4), call("echo", 5), "helped"], name="inner")

    @crewai_tool("helper")
    def helper(x: int) -> str:
        """Asks the inner agent."""
        return str(inner.kickoff(f"look up {x}").raw)

    outer = DRIVER.build([echo], [call("echo", 2), call("echo", 3), call("helper", 1), "done"], name="outer")
    outer.tools = [crew_tool(echo), helper]
    assert DRIVER.run(outer) == "done"
    after = DRIVER.sent(inner)[-1].tool_results
    # Two rejections in the crew's agent; the inner agent's first call is the run's 3rd, its second the 4th.
    assert len(after) == 2, after
    assert UNAVAILABLE in after[0] and SPENT in after[1], after
    assert echo.runs == 2


def test_an_agents_own_kickoff_is_a_run(instrument):
    breaker_settings(failure_threshold="1", recovery_timeout="600")
    instrument("crewai")
    echo = _open_echo("assistant")
    steps = [call("echo", i) for i in range(2, 8)]
    for _ in range(2):  # the next run starts with its budget whole
        agent = DRIVER.build([echo], [*steps, "done"])
        assert agent.kickoff("go").raw == "done"
        read = DRIVER.sent(agent)[-1].tool_results
        assert len(read) == 6 and echo.runs == 1, read
        assert all(UNAVAILABLE in text for text in read[:3]), read
        assert all(SPENT in text for text in read[3:]), read
