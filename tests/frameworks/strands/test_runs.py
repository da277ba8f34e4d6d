"""The run in Strands beyond the contract: an agent a tool calls (an agent as a tool) joins
its caller's run, on the real event loop with the scripted model."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

pytest.importorskip("strands")
sys.path.insert(0, str(Path(__file__).parent))

from contract import PROMPT, Tool, call
from driver import StrandsDriver, strands_tool
from run_contract import SPENT, UNAVAILABLE
from scripted_model import ScriptedModel
from status_prompt import breaker_settings
from strands import Agent, tool

DRIVER = StrandsDriver()


def _open_echo(*agents: str) -> Tool:
    """``echo`` fails once for each agent in an earlier run: its breaker opens for each
    (breakers are per agent; threshold 1, a long cooldown)."""
    echo = Tool.flaky("echo", failures=len(agents))
    for name in agents:
        assert DRIVER.run(DRIVER.build([echo], [call("echo", 1), "done"], name=name)) == "done"
    assert echo.runs == len(agents)
    return echo


def test_an_agent_called_as_a_tool_joins_its_callers_run(instrument):
    breaker_settings(failure_threshold="1", recovery_timeout="600")
    instrument("strands")
    echo = _open_echo("outer", "inner")
    inner = DRIVER.build([echo], [call("echo", 4), call("echo", 5), "helped"], name="inner")

    @tool(name="helper", description="Asks the inner agent.")
    def helper(x: int) -> str:
        return str(inner(f"look up {x}"))

    steps = [call("echo", 2), call("echo", 3), call("helper", 1), "done"]
    outer = Agent(
        model=ScriptedModel(steps),
        tools=[strands_tool(echo), helper],
        system_prompt=PROMPT,
        name="outer",
        callback_handler=None,
    )
    assert DRIVER.run(outer) == "done"
    before = DRIVER.sent(outer)[2].tool_results  # the outer request before the helper ran
    after = DRIVER.sent(inner)[-1].tool_results
    # Two rejections in the outer agent; the inner agent's first call is the run's 3rd, its second the 4th.
    assert len(before) == 2 and all(UNAVAILABLE in text for text in before), before
    assert len(after) == 2, after
    assert UNAVAILABLE in after[0] and SPENT in after[1], after
    assert echo.runs == 2
